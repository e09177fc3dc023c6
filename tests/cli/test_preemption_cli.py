"""Preemption in the CLI: `session create --preemptible/--not-preemptible`, what `session info`
shows of a victim or a preemptor, `session.preempted` events in `session watch`, and `sokovan
scaling-group` setting a group's preemption; the pure formatting rules as tables."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import select, update

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.cli.preemption_view import dry_run_victims, preempted_event, preemption_rows
from sokovan.db.models import ScalingGroup, Session
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.cli.conftest import run_cli, start_cli
from tests.cli.test_wait_events import _subscribed

LINE_TIMEOUT = 10.0
VICTIM = "5a0b3f7e-2c1d-4f6b-8e9a-0c1d2e3f4a5b"
URGENT = "0b8f5a4e-1d3c-4a61-9a39-9d9f1f0b7c11"


# -- pure rules ------------------------------------------------------------------------------------

ROWS: list[tuple[str, dict[str, Any], dict[str, str | None]]] = [
    ("plain batch", {"preemptible": True}, {"preemptible": "yes"}),
    ("plain interactive", {"preemptible": False}, {"preemptible": "no"}),
    (
        "victim",
        {"preemptible": True, "status_info": {"preempted_by": URGENT, "preempt_mode": "terminate"}},
        {"preemptible": "yes", "preempted by": f"{URGENT} (terminate)"},
    ),
    (
        "victim without a mode",
        {"preemptible": True, "status_info": {"preempted_by": URGENT}},
        {"preemptible": "yes", "preempted by": URGENT},
    ),
    (
        "preemptor",
        {
            "preemptible": False,
            "status_info": {
                "preempts": [VICTIM, "v2"],
                "nominated_agents": ["agent-1"],
                "nominated_until": "2026-01-01T00:01:30Z",
            },
        },
        {
            "preemptible": "no",
            "waiting for": f"{VICTIM}, v2 on agent-1 (room held until 2026-01-01T00:01:30Z)",
        },
    ),
    (
        "nominated, victims not named",
        {"preemptible": False, "status_info": {"nominated_agents": ["a", "b"]}},
        {"preemptible": "no", "waiting for": "its victims on a, b"},
    ),
    (
        "requeued once",
        {"preemptible": True, "status_info": {"preempted_count": 1}},
        {"preemptible": "yes", "preempted": "1 time (requeued)"},
    ),
    (
        "requeued thrice",
        {"preemptible": True, "status_info": {"preempted_count": 3}},
        {"preemptible": "yes", "preempted": "3 times (requeued)"},
    ),
    ("a count of zero", {"preemptible": True, "status_info": {"preempted_count": 0}}, {"preemptible": "yes"}),
    (
        "junk values",
        {"status_info": {"preempted_count": "many", "preempts": "x", "nominated_agents": []}},
        {},
    ),
    ("an older server", {}, {}),
]


@pytest.mark.parametrize(("case", "session", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_preemption_rows(case: str, session: dict[str, Any], expected: dict[str, str | None]) -> None:
    shown = {label: value for label, value in preemption_rows(session) if value is not None}
    assert shown == expected


VICTIMS: list[tuple[dict[str, Any], str | None]] = [
    ({"placeable": True, "agents": ["a"], "preempts": [VICTIM, "v2"]}, f"by preempting {VICTIM}, v2"),
    ({"placeable": True, "agents": ["a"], "preempts": []}, None),
    ({"placeable": True, "agents": ["a"]}, None),
]


@pytest.mark.parametrize(("answer", "expected"), VICTIMS)
def test_dry_run_victims(answer: dict[str, Any], expected: str | None) -> None:
    assert dry_run_victims(answer) == expected


EVENTS: list[tuple[dict[str, Any], str | None]] = [
    (
        {"session_id": VICTIM, "agent_id": "agent-1", "detail": {"preempted_by": URGENT}},
        f"preempted by {URGENT} on agent agent-1",
    ),
    (
        {"session_id": VICTIM, "preempted_by": URGENT, "detail": {"preempt_mode": "requeue"}},
        f"preempted by {URGENT} (requeue)",
    ),
    ({"session_id": VICTIM, "agent_id": "agent-1"}, None),
    ({"session_id": VICTIM, "detail": "not an object"}, None),
]


@pytest.mark.parametrize(("data", "expected"), EVENTS)
def test_preempted_event_line(data: dict[str, Any], expected: str | None) -> None:
    assert preempted_event(data) == expected


# -- sessions --------------------------------------------------------------------------------------


async def test_create_preemptible_flags(api: Api, cli_env: dict[str, str]) -> None:
    base = ("session", "create", "--image", "python:3", "--command", "true", "--json")
    cases = [((), True), (("--not-preemptible",), False), (("--preemptible",), True)]
    for flags, expected in cases:
        res = await run_cli(*base, *flags, env=cli_env)
        assert res.code == 0, res.err
        assert res.json()["preemptible"] is expected, flags
    interactive = ("session", "create", "--image", "shell", "--type", "interactive", "--json")
    res = await run_cli(*interactive, env=cli_env)
    assert res.code == 0, res.err
    assert res.json()["preemptible"] is False
    res = await run_cli(*interactive, "--preemptible", env=cli_env)
    assert res.json()["preemptible"] is True


async def test_info_shows_priority_preemptible_and_preemption_state(
    api: Api, cli_env: dict[str, str]
) -> None:
    res = await run_cli(
        "session", "create", "--image", "python:3", "--command", "true", "--not-preemptible", "--json",
        env=cli_env,
    )  # fmt: skip
    sid = res.json()["id"]
    out = (await run_cli("session", "info", sid, env=cli_env)).out
    assert "priority:       10" in out and "preemptible:    no" in out
    assert "preempted by" not in out and "waiting for" not in out

    info = {
        "pending_reason": f"waiting for preempted sessions {VICTIM} to end on agent agent-1",
        "preempts": [VICTIM],
        "nominated_agents": ["agent-1"],
        "preempted_count": 2,
    }
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == uuid.UUID(sid)).values(status_info=info))
    out = (await run_cli("session", "info", sid, env=cli_env)).out
    assert f"waiting for:    {VICTIM} on agent-1" in out
    assert "preempted:      2 times (requeued)" in out
    assert f"pending reason: waiting for preempted sessions {VICTIM}" in out

    victim_info = {
        "cause": "PREEMPTED",
        "message": "preempted",
        "preempted_by": URGENT,
        "preempt_mode": "requeue",
    }
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == uuid.UUID(sid)).values(status_info=victim_info)
        )
    out = (await run_cli("session", "info", sid, env=cli_env)).out
    assert f"preempted by:   {URGENT} (requeue)" in out and "cause:          PREEMPTED: preempted" in out


async def test_watch_prints_a_preempted_event(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher, cli_env: dict[str, str]
) -> None:
    alice = await user_id(api, "alice")
    sid = (await (await api.create(api.alice)).json())["id"]
    proc = await start_cli("session", "watch", sid, env=cli_env)
    try:
        await _subscribed(ctx)
        await publisher.publish_many(
            [
                UserEvent(
                    name="session.preempted",
                    session_id=str(uuid.uuid4()),  # another session's: not this watch's
                    agent_id="agent-2",
                    owner=alice,
                    detail={"preempted_by": "someone-else"},
                ),
                UserEvent(
                    name="session.preempted",
                    session_id=sid,
                    agent_id="agent-1",
                    owner=alice,
                    detail={"preempted_by": URGENT, "preempt_mode": "terminate"},
                ),
            ]
        )
        assert proc.stdout is not None
        lines = []
        while not any("preempted by" in line for line in lines):
            raw = await asyncio.wait_for(proc.stdout.readline(), LINE_TIMEOUT)
            assert raw, "the CLI ended early"
            lines.append(raw.decode())
        shown = [line for line in lines if "preempted by" in line]
        assert shown[0].rstrip("\n").endswith(f"preempted by {URGENT} on agent agent-1 (terminate)")
        assert not any("someone-else" in line for line in lines)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# -- scaling groups --------------------------------------------------------------------------------


@pytest.fixture
def admin_env(api: Api, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "SOKOVAN_TOKEN": api.admin["Authorization"].removeprefix("Bearer ")}


async def _stored(api: Api, name: str) -> Any:
    async with api.engine.connect() as conn:
        return (
            await conn.execute(select(ScalingGroup.preemption).where(ScalingGroup.name == name))
        ).scalar_one()


async def test_scaling_group_preemption_options(api: Api, admin_env: dict[str, str]) -> None:
    res = await run_cli("scaling-group", "info", "default", env=admin_env)
    assert res.code == 0, res.err
    assert "preemption:      off, grace 30s" in res.out

    res = await run_cli("scaling-group", "update", "default", "--preemption-mode", "terminate", env=admin_env)
    assert res.code == 0, res.err
    assert "preemption:      terminate, grace 30s" in res.out
    res = await run_cli(
        "scaling-group", "update", "default", "--preemption-grace", "2.5", "--json", env=admin_env
    )
    assert res.json()["preemption"] == {"mode": "terminate", "grace_period": 2.5}
    assert await _stored(api, "default") == {"mode": "terminate", "grace_period": 2.5}

    res = await run_cli(
        "scaling-group", "create", "urgent", "--preemption-mode", "requeue", "--preemption-grace", "0",
        "--scheduler", "lifo", "--json", env=admin_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    assert (res.json()["preemption"], res.json()["scheduler"]) == (
        {"mode": "requeue", "grace_period": 0},
        "lifo",
    )
    listed = await run_cli("scaling-group", "list", env=admin_env)
    assert "terminate, grace 2.5s" in listed.out and "requeue, grace 0s" in listed.out


async def test_scaling_group_refusals(api: Api, cli_env: dict[str, str], admin_env: dict[str, str]) -> None:
    update_default = ("scaling-group", "update", "default")
    res = await run_cli(*update_default, "--preemption-grace", "3601", env=admin_env)
    assert res.code == 1 and res.err.startswith("Error: Validation failed:"), res.err
    res = await run_cli(*update_default, "--preemption-grace", "nan", env=admin_env)
    assert res.code == 2 and "finite" in res.err
    res = await run_cli(*update_default, "--preemption-mode", "cancel", env=admin_env)
    assert res.code == 2 and "cancel" in res.err
    res = await run_cli(*update_default, env=admin_env)
    assert res.code == 2 and "nothing to change" in res.err
    res = await run_cli(*update_default, "--preemption-mode", "terminate", env=cli_env)  # alice
    assert res.code == 1 and res.err.startswith("Error: Forbidden:"), res.err
    res = await run_cli("scaling-group", "update", "nowhere", "--preemption-mode", "off", env=admin_env)
    assert res.code == 1 and res.err.startswith("Error: Not found:"), res.err
    assert "Traceback" not in res.err
    assert await _stored(api, "default") == {"mode": "off", "grace_period": 30}
