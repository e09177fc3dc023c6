"""Validators, table-driven over in-memory snapshots."""

from __future__ import annotations

import uuid

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.hooks import hook_for
from sokovan.orchestrator.provisioner.snapshot import KeypairPolicy, Quota, Tenancy
from sokovan.orchestrator.provisioner.stages import Reject, Wait
from sokovan.orchestrator.provisioner.validators.concurrency import ConcurrencyValidator
from sokovan.orchestrator.provisioner.validators.dependencies import DependencyValidator
from sokovan.orchestrator.provisioner.validators.pending_limit import PendingLimitValidator
from sokovan.orchestrator.provisioner.validators.quota import QuotaValidator
from sokovan.orchestrator.provisioner.validators.session_type import SessionTypeValidator
from tests.orchestrator.factories import PROJECT, session, snapshot


def slots(**kw: object) -> ResourceSlots:
    return ResourceSlots.parse(kw)


@pytest.mark.parametrize(
    ("keypair", "project", "domain", "used", "cpu", "want"),
    [
        (None, None, None, {}, 8, None),
        (Quota("keypair policy 'p'", slots(cpu=4, mem="8g")), None, None, {}, 4, None),
        (
            Quota("keypair policy 'p'", slots(cpu=4, mem="8g")),
            None,
            None,
            {"cpu": 1},
            4,
            "quota exceeded: keypair policy 'p': cpu 5 > 4",
        ),
        # a slot the quota does not name counts as 0 ...
        (
            Quota("keypair policy 'p'", slots(cpu=4)),
            None,
            None,
            {},
            1,
            "quota exceeded: keypair policy 'p': mem 1073741824 > 0",
        ),
        # ... unless the policy says unlimited
        (Quota("keypair policy 'p'", slots(cpu=4), unlimited_unspecified=True), None, None, {}, 1, None),
        # every violated scope is named together
        (
            Quota("keypair policy 'p'", slots(cpu=2, mem="8g")),
            Quota("project 'team'", slots(cpu=3, mem="8g")),
            Quota("domain 'd'", slots(cpu=100, mem="1g"), False),
            {},
            4,
            "quota exceeded: keypair policy 'p': cpu 4 > 2; project 'team': cpu 4 > 3; "
            "domain 'd': mem 2147483648 > 1073741824",
        ),
    ],
)
def test_quota(
    keypair: Quota | None,
    project: Quota | None,
    domain: Quota | None,
    used: dict[str, int],
    cpu: int,
    want: str | None,
) -> None:
    s = session(cpu=cpu, mem="1g" if domain is None else "2g")
    t = Tenancy(keypairs={"AK1": KeypairPolicy(name="p", quota=keypair)})
    if project:
        t.project_quotas[PROJECT] = project
    if domain:
        t.domain_quotas["default"] = domain
    t.keypair_usage["AK1"] = slots(**used)
    verdict = QuotaValidator().check(s, snapshot(tenancy=t))
    assert (verdict.reason if isinstance(verdict, Wait) else verdict) == want


@pytest.mark.parametrize(
    ("cap", "active", "waits"), [(None, 99, False), (2, 1, False), (2, 2, True), (0, 0, True)]
)
def test_concurrency(cap: int | None, active: int, waits: bool) -> None:
    t = Tenancy(keypairs={"AK1": KeypairPolicy(max_concurrent_sessions=cap)})
    t.active_sessions["AK1"] = active
    verdict = ConcurrencyValidator().check(session(), snapshot(tenancy=t))
    assert isinstance(verdict, Wait) is waits
    if waits:
        assert verdict.reason == f"keypair at its concurrency limit ({active}/{cap} sessions)"  # type: ignore[union-attr]


@pytest.mark.parametrize(("cap", "rank", "waits"), [(None, 50, False), (3, 3, False), (3, 4, True)])
def test_pending_limit(cap: int | None, rank: int, waits: bool) -> None:
    s = session()
    snap = snapshot(tenancy=Tenancy(keypairs={"AK1": KeypairPolicy(max_pending_sessions=cap)}))
    snap.pending_rank = {s.id: rank}
    assert isinstance(PendingLimitValidator().check(s, snap), Wait) is waits


A, B = uuid.UUID(int=10), uuid.UUID(int=11)


@pytest.mark.parametrize(
    ("deps", "want"),
    [
        ({A: ("TERMINATED", "SUCCESS")}, None),
        ({A: ("RUNNING", None)}, Wait(f"waiting for dependencies: {A} (RUNNING)")),
        (
            {A: ("TERMINATED", "SUCCESS"), B: ("PENDING", None)},
            Wait(f"waiting for dependencies: {B} (PENDING)"),
        ),
        ({A: ("ERROR", "FAILURE")}, Reject("DEPENDENCY_FAILED", f"dependency {A} ended ERROR/FAILURE")),
        ({A: ("CANCELLED", None)}, Reject("DEPENDENCY_FAILED", f"dependency {A} ended CANCELLED")),
        ({A: ("TERMINATED", None)}, Reject("DEPENDENCY_FAILED", f"dependency {A} ended TERMINATED")),
    ],
)
def test_dependencies(deps: dict[uuid.UUID, tuple[str, str | None]], want: object) -> None:
    s = session(depends_on=tuple(deps))
    assert DependencyValidator().check(s, snapshot(tenancy=Tenancy(dependencies=deps))) == want


@pytest.mark.parametrize(
    ("allowed", "type", "rejects"), [({"batch"}, "batch", False), ({"batch"}, "interactive", True)]
)
def test_session_type(allowed: set[str], type: str, rejects: bool) -> None:
    verdict = SessionTypeValidator().check(
        session(type=type), snapshot(allowed_session_types=frozenset(allowed))
    )
    assert isinstance(verdict, Reject) is rejects


@pytest.mark.parametrize(
    ("type", "command", "rejects", "env"),
    [
        ("batch", "echo hi", False, "batch"),
        ("batch", "  ", True, "batch"),
        ("interactive", None, False, "interactive"),
        ("inference", None, False, "inference"),
    ],
)
def test_session_type_hooks(type: str, command: str | None, rejects: bool, env: str) -> None:
    s = session(type=type, command=command)
    hook = hook_for(s)
    assert hook is not None
    assert isinstance(hook.admit(s), Reject) is rejects
    assert hook.kernel_environ(s)["SOKOVAN_SESSION_TYPE"] == env
