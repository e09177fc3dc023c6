"""`sokovan trace export` against real PostgreSQL: which sessions and agents a trace holds, and
what it records of each (docs/trace-format.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.cli.main import cli
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, KernelStatus, SessionStatus
from sokovan.db.models import SessionDependency, SessionSchedulingHistory
from sokovan.sim.export import export_trace
from sokovan.sim.trace import read_trace
from tests.orchestrator.db_seed import Seed

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def ago(**kw: float) -> dt.datetime:
    return NOW - dt.timedelta(**kw)


async def _ran(engine: AsyncEngine, sid: uuid.UUID, at: dt.datetime) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            insert(SessionSchedulingHistory).values(
                session_id=sid, handler="test", result="success", from_status="CREATING", to_status="RUNNING",
                created_at=at,
            )
        )  # fmt: skip


async def test_the_export_holds_the_sessions_alive_since_then_with_what_happened_to_them(
    engine: AsyncEngine, db_url: str, tmp_path: Path
) -> None:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=8)
    await seed.agent("a-gone", status=AgentStatus.DOWN)  # serves nothing, ran nothing: left out
    await seed.agent("a-down", status=AgentStatus.DOWN)  # down now, but a session of the trace ran there
    done = await seed.session(
        cpu=2, size=2, status=SessionStatus.TERMINATED, kernel_status=KernelStatus.TERMINATED, agent_id="a1",
        created_at=ago(hours=2), terminated_at=ago(hours=1), result="SUCCESS", max_duration=7200,
    )  # fmt: skip
    await _ran(engine, done, ago(hours=2) + dt.timedelta(seconds=60))
    old = await seed.session(
        status=SessionStatus.TERMINATED, kernel_status=KernelStatus.TERMINATED, agent_id="a1",
        created_at=ago(days=3), terminated_at=ago(days=2), result="SUCCESS",
    )  # fmt: skip
    live = await seed.session(
        status=SessionStatus.RUNNING,
        kernel_status=KernelStatus.RUNNING,
        agent_id="a-down",
        created_at=ago(days=3),
    )
    await _ran(engine, live, ago(days=3) + dt.timedelta(seconds=5))
    waiting = await seed.session(created_at=ago(minutes=10))
    async with engine.begin() as conn:
        await conn.execute(insert(SessionDependency).values(session_id=waiting, depends_on=done))

    async with engine.connect() as conn:
        trace = await export_trace(conn, since=ago(days=1), now=NOW)

    assert [s.id for s in trace.sessions] == [str(live), str(done), str(waiting)]
    assert str(old) not in {s.id for s in trace.sessions}
    assert sorted(a.id for a in trace.agents) == ["a-down", "a1"]
    assert [g.name for g in trace.groups] == ["default"]
    assert (trace.header.since, trace.header.until) == (ago(days=1), NOW)
    s = {x.id: x for x in trace.sessions}
    d = s[str(done)]
    assert (d.started_at, d.terminated_at) == (ago(hours=2) + dt.timedelta(seconds=60), ago(hours=1))
    assert (d.status, d.result, d.max_duration, d.cluster_size) == ("TERMINATED", "SUCCESS", 7200, 2)
    assert d.agents == ["a1", "a1"]
    assert d.resources == ResourceSlots.parse({"cpu": 2, "mem": "1g"})
    assert (d.user, d.user_name, d.project, d.domain) == (
        str(seed.user_id),
        "alice",
        str(seed.project_id),
        "default",
    )
    assert (d.access_key, d.image) == ("AK1", "python:3")
    w = s[str(waiting)]
    assert (w.started_at, w.terminated_at, w.agents, w.depends_on) == (None, None, [], [str(done)])
    assert s[str(live)].agents == ["a-down"]
    assert [(p.id, p.name) for p in trace.projects] == [(str(seed.project_id), "default")]

    # the command writes the same, as a file `sokovan simulate` reads
    out = tmp_path / "trace.jsonl"
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        ["trace", "export", "--since", "1d", "--out", str(out)],
        env={"SOKOVAN_DB_URL": db_url},
    )
    assert result.exit_code == 0, result.output
    assert "3 sessions, 2 agents, 1 scaling groups" in result.output
    assert [x.id for x in read_trace(out).sessions] == [str(live), str(done), str(waiting)]


async def test_an_unreachable_database_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    url = "postgresql+asyncpg://nobody@127.0.0.1:1/none"
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["trace", "export", "--since", "7d", "--out", str(tmp_path / "t")],
        env={"SOKOVAN_DB_URL": url},
    )  # fmt: skip
    assert result.exit_code == 1
    assert "export failed" in result.output and "Traceback" not in result.output
