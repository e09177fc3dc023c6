"""The create path's group commit against real PostgreSQL: creates that arrive together are written
together, each answered on its own; idempotency within a batch and across batches (two managers);
the pending limit across batches; a bad create fails alone; replicas go the same way."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.db.models import AuditLog, Kernel, Keypair, Session, SessionSchedulingHistory, User
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.create_batch import CreateBatcher, Created, CreateRequest, PendingLimit
from sokovan.manager.controller.errors import TooManyPending
from sokovan.manager.controller.replica_sessions import ControllerReplicas
from sokovan.manager.controller.scheduling_controller import SchedulingController, new_session
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.daemon import _on_hint
from sokovan.manager.repositories.tenancy import Principal, principal_of
from sokovan.orchestrator.deployment.replicas import ReplicaSpec
from tests.api.conftest import Api
from tests.api.deployment_helpers import add_model_agent, created
from tests.api.tenancy_helpers import bind_policy, put

SLOW = 0.05  # a window long enough for every create of a test to land in one batch


async def _principal(engine: AsyncEngine, user: str) -> Principal:
    async with engine.connect() as conn:
        key = (
            await conn.execute(
                select(Keypair.access_key).join(User, User.id == Keypair.user_id).where(User.name == user)
            )
        ).scalar_one()
        found = await principal_of(conn, key)
    assert found is not None
    return found


def _request(
    principal: Principal, creation_id: str | None = None, *, limit: int | None = None, **spec: Any
) -> CreateRequest:
    body = SessionCreateRequest.model_validate(
        {"image": "python:3", "command": "true", "creation_id": creation_id, **spec}
    )
    session = new_session(principal, body, body.per_kernel_slots(), list(body.depends_on), 0, None)
    return CreateRequest(session, None if limit is None else PendingLimit(limit, "p"))


async def _count(engine: AsyncEngine, table: Any, *where: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one())


async def test_concurrent_creates_are_written_together_each_with_its_rows(api: Api) -> None:
    resps = await asyncio.gather(*(api.create(api.alice, cluster_size=2) for _ in range(40)))
    assert [r.status for r in resps] == [201] * 40
    bodies = [await r.json() for r in resps]
    ids = {uuid.UUID(b["id"]) for b in bodies}
    assert len(ids) == 40
    assert all(b["status"] == "PENDING" and len(b["kernels"]) == 2 for b in bodies)
    async with api.engine.connect() as conn:
        sessions = (await conn.execute(select(Session.id, Session.created_at))).all()
        kernels = (await conn.execute(select(Kernel.session_id, Kernel.cluster_role))).all()
        history = (
            await conn.execute(
                select(
                    SessionSchedulingHistory.session_id,
                    SessionSchedulingHistory.handler,
                    SessionSchedulingHistory.result,
                    SessionSchedulingHistory.from_status,
                    SessionSchedulingHistory.to_status,
                    SessionSchedulingHistory.message,
                )
            )
        ).all()
        audit = (await conn.execute(select(AuditLog.target).where(AuditLog.action == "session.create"))).all()
    assert {s.id for s in sessions} == ids
    assert sorted((k.session_id, k.cluster_role) for k in kernels) == sorted(
        (i, role) for i in ids for role in ("main", "sub")
    )
    assert sorted(tuple(h) for h in history) == sorted(
        (i, "api.create", "SUCCESS", None, "PENDING", "created") for i in ids
    )
    assert sorted(a.target for a in audit) == sorted(str(i) for i in ids)
    # A batch is one statement: its sessions share the transaction's time.
    assert len({s.created_at for s in sessions}) < 40


async def test_a_batch_is_one_statement(api: Api) -> None:
    alice = await _principal(api.engine, "alice")
    batcher = CreateBatcher(api.engine, window=SLOW)
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(api.engine.sync_engine, "before_cursor_execute", seen)
    try:
        got = await asyncio.gather(*(batcher.submit(_request(alice, cluster_size=2)) for _ in range(20)))
    finally:
        event.remove(api.engine.sync_engine, "before_cursor_execute", seen)
    assert all(g.created for g in got)
    assert len(statements) == 1, statements
    assert await _count(api.engine, Kernel) == 40


async def test_the_answer_is_what_a_read_shows(api: Api) -> None:
    resp = await api.create(
        api.alice, name="j", cluster_size=2, environ={"A": "1"}, retry_policy={"max_retries": 1}
    )
    assert resp.status == 201
    body = await resp.json()
    read = await (await api.client.get(f"/v2/sessions/{body['id']}", headers=api.alice)).json()
    assert body == read


async def test_one_creation_id_in_one_batch_is_one_session(ctx: ManagerContext, api: Api) -> None:
    alice = await _principal(api.engine, "alice")
    batcher = CreateBatcher(api.engine, window=SLOW)
    got = await asyncio.gather(*(batcher.submit(_request(alice, "same")) for _ in range(5)))
    assert len({g.session_id for g in got}) == 1
    assert [g.created for g in got] == [True, False, False, False, False]  # the first in arrival order
    assert await _count(api.engine, Session) == 1
    assert await _count(api.engine, AuditLog, AuditLog.action == "session.create") == 1


@pytest.mark.parametrize("max_batch", [1, 256], ids=["a-batch-each", "batched"])
async def test_one_creation_id_across_two_managers_is_one_session(api: Api, max_batch: int) -> None:
    alice = await _principal(api.engine, "alice")
    managers = [CreateBatcher(api.engine, window=0, max_batch=max_batch) for _ in range(2)]
    requests = [_request(alice, f"key-{i % 3}") for i in range(12)]
    got = await asyncio.gather(*(managers[i % 2].submit(r) for i, r in enumerate(requests)))
    by_key: dict[str, set[uuid.UUID]] = {}
    for request, answer in zip(requests, got, strict=True):
        assert request.session.creation_id is not None
        by_key.setdefault(request.session.creation_id, set()).add(answer.session_id)
    assert all(len(v) == 1 for v in by_key.values())
    assert sum(g.created for g in got) == 3
    assert await _count(api.engine, Session) == 3
    assert await _count(api.engine, SessionSchedulingHistory) == 3


async def test_the_pending_limit_holds_across_batches(api: Api) -> None:
    alice = await _principal(api.engine, "alice")
    managers = [CreateBatcher(api.engine, window=SLOW) for _ in range(3)]
    got = await asyncio.gather(
        *(managers[i % 3].submit(_request(alice, limit=4)) for i in range(12)), return_exceptions=True
    )
    assert sum(isinstance(g, Created) for g in got) == 4
    assert sum(isinstance(g, TooManyPending) for g in got) == 8
    assert await _count(api.engine, Session) == 4


async def test_a_refused_create_leaves_its_neighbours_alone(api: Api) -> None:
    alice, bob = await _principal(api.engine, "alice"), await _principal(api.engine, "bob")
    batcher = CreateBatcher(api.engine, window=SLOW)
    requests = [_request(alice, limit=1) for _ in range(3)] + [_request(bob) for _ in range(3)]
    got = await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True)
    assert [type(g).__name__ for g in got] == ["Created", "TooManyPending", "TooManyPending"] + [
        "Created"
    ] * 3
    assert await _count(api.engine, Session) == 4


async def test_a_create_the_database_refuses_fails_alone(api: Api) -> None:
    """A dependency that vanished after admission (say, removed by retention) breaks the batch's
    statement; the batch is then written create by create, and only that create fails."""
    alice = await _principal(api.engine, "alice")
    batcher = CreateBatcher(api.engine, window=SLOW)
    requests = [_request(alice) for _ in range(3)]
    requests.insert(1, _request(alice, depends_on=[str(uuid.uuid4())]))
    got = await asyncio.gather(*(batcher.submit(r) for r in requests), return_exceptions=True)
    assert [isinstance(g, Created) for g in got] == [True, False, True, True]
    assert await _count(api.engine, Session) == 3


async def test_a_create_cancelled_before_its_batch_left_is_not_written(api: Api) -> None:
    alice = await _principal(api.engine, "alice")
    batcher = CreateBatcher(api.engine, window=SLOW)
    cancelled = asyncio.ensure_future(batcher.submit(_request(alice)))
    await asyncio.sleep(0)
    cancelled.cancel()
    kept = await batcher.submit(_request(alice))
    assert kept.created and cancelled.cancelled()
    assert await _count(api.engine, Session) == 1


async def test_the_pending_limit_through_the_api_under_concurrency(api: Api) -> None:
    await put(api, "/v2/resource-policies/two", {"max_pending_sessions": 2})
    await bind_policy(api.engine, "alice", "two")
    resps = await asyncio.gather(
        *(api.create(api.alice) for _ in range(5)), *(api.create(api.bob) for _ in range(3))
    )
    assert sorted(r.status for r in resps[:5]) == [201, 201, 429, 429, 429]
    assert [r.status for r in resps[5:]] == [201, 201, 201]


async def test_a_policy_change_reaches_the_cached_limits_at_once(api: Api) -> None:
    await put(api, "/v2/resource-policies/p", {"max_pending_sessions": None})
    await bind_policy(api.engine, "alice", "p")
    assert (await api.create(api.alice)).status == 201  # alice's limits are cached now: no pending limit
    await put(api, "/v2/resource-policies/p", {"max_pending_sessions": 1})
    assert (await api.create(api.alice)).status == 429


def test_an_admission_hint_from_another_manager_drops_the_caches(ctx: ManagerContext) -> None:
    woken: list[str] = []

    class Orchestrator:
        def hint(self, *names: str) -> None:
            woken.extend(names)

    on_hint = _on_hint(ctx, Orchestrator())  # type: ignore[arg-type]
    epoch = ctx.admission.value
    on_hint(Hint.ADMISSION)
    on_hint(Hint.SCHEDULE)
    assert ctx.admission.value == epoch + 1
    assert woken == [Hint.ADMISSION, Hint.SCHEDULE]


async def test_replicas_go_through_the_batch(ctx: ManagerContext, api: Api) -> None:
    await add_model_agent(api)
    deployment = await created(api, api.alice)
    alice = await _principal(api.engine, "alice")
    replicas = ControllerReplicas(SchedulingController(ctx), api.engine)
    spec = ReplicaSpec(
        access_key=alice.access_key,
        deployment_id=uuid.UUID(deployment["id"]),
        name="web-r1",
        image="python:3",
        command="python3 -m http.server $PORT",
        resources={"cpu": 1, "mem": "256m"},
        scaling_group="default",
        creation_id="route:r1",
    )
    first, again = await asyncio.gather(replicas.ensure(spec), replicas.ensure(spec))
    assert first == again
    async with api.engine.connect() as conn:
        row = (
            await conn.execute(select(Session.deployment_id, Session.preemptible).where(Session.id == first))
        ).one()
    assert (str(row.deployment_id), row.preemptible) == (deployment["id"], False)
    assert (
        await _count(api.engine, SessionSchedulingHistory, SessionSchedulingHistory.session_id == first) == 1
    )
