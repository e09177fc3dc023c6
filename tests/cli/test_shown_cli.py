"""What a user reads from `sokovan session ...` and `sokovan node ...` against a served API means
what it says: no Python reprs or `None`, sizes in binary units (bytes only when asked), history
without the handler runs that moved nothing unless `--all`, `watch` following to the end."""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest
from sqlalchemy import insert

from sokovan.common.types import SchedulingResult, SessionStatus
from sokovan.db.models import SessionSchedulingHistory
from sokovan.state.session_writes import SessionTransition, apply_session_transitions
from tests.api.conftest import Api
from tests.cli.conftest import Result, run_cli, session_move, start_cli
from tests.cli.test_session_cli import _session_id

# A byte count a person would not read: seven digits or more on their own.
BARE_BYTES = re.compile(r"(?<![\w.-])\d{7,}(?![\w.-])")
OLD_STALE = "stale: expected [<SessionStatus.TERMINATING: 'TERMINATING'>], found TERMINATED"


def assert_readable(res: Result) -> None:
    """The command worked and printed nothing a person would have to decode."""
    assert res.code == 0, res.err
    for text in (res.out, res.err):
        assert "<SessionStatus" not in text and "SessionStatus." not in text, text
        assert not re.search(r"\bNone\b", text), text
        assert not BARE_BYTES.search(text), text


@pytest.fixture
def admin_env(api: Api, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "SOKOVAN_TOKEN": api.admin["Authorization"].removeprefix("Bearer ")}


async def _create(cli_env: dict[str, str], *args: str) -> str:
    res = await run_cli(
        "session", "create", "--image", "python:3", "--resources", "cpu=1,mem=256m", *args, "--json",
        env=cli_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    return str(res.json()["id"])


def _stay(sid: uuid.UUID, expected: str, handler: str) -> SessionTransition:
    """A run of `handler` that expected the session in `expected` and moves it nowhere."""
    return SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus(expected)}),
        to_status=None,
        handler=handler,
        result=SchedulingResult.SUCCESS,
    )


async def test_info_and_list_in_words_and_binary_units(api: Api, cli_env: dict[str, str]) -> None:
    sid = await _create(cli_env, "--command", "echo hi", "--name", "shown-1")
    info = await run_cli("session", "info", sid, env=cli_env)
    assert_readable(info)
    assert "resources:      cpu=1, mem=256 MiB per kernel" in info.out, info.out
    raw = await run_cli("session", "info", sid, "--bytes", env=cli_env)
    assert raw.code == 0 and "cpu=1, mem=268435456 per kernel" in raw.out, raw.out
    assert (await run_cli("session", "info", sid, "--json", env=cli_env)).json()["resources"]["mem"] == str(
        256 * 2**20
    )
    assert_readable(await run_cli("session", "list", env=cli_env))
    # Terminated before it started: CANCELLED with a cause and no result, none of it printed as None.
    assert (await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)).status == 202
    ended = await run_cli("session", "info", sid, env=cli_env)
    assert_readable(ended)
    assert "CANCELLED" in ended.out and "result=" not in ended.out


async def test_history_hides_runs_that_moved_nothing_unless_all(api: Api, cli_env: dict[str, str]) -> None:
    sid = uuid.UUID(await _create(cli_env, "--command", "echo hi"))
    async with api.engine.begin() as conn:
        await apply_session_transitions(conn, [session_move(sid, "PENDING", "SCHEDULED")])
    async with api.engine.begin() as conn:  # a late run: finds the session moved on (stale)
        await apply_session_transitions(conn, [session_move(sid, "PENDING", "SCHEDULED")])
    async with api.engine.begin() as conn:
        await apply_session_transitions(conn, [_stay(sid, "SCHEDULED", "CheckScheduled")])
        # A row written before the stale message was fixed.
        await conn.execute(
            insert(SessionSchedulingHistory).values(
                session_id=sid,
                handler="TerminateSessions",
                result="SUCCESS",
                from_status="SCHEDULED",
                to_status="SCHEDULED",
                message=OLD_STALE,
                attempt=1,
            )
        )
    shown = await run_cli("session", "history", str(sid), env=cli_env)
    assert_readable(shown)
    assert "PENDING -> SCHEDULED" in shown.out
    assert "SCHEDULED -> SCHEDULED" not in shown.out and "stale" not in shown.out
    assert shown.out.splitlines()[-1] == "(3 handler runs that moved nothing not shown; --all shows them)"
    hidden = await run_cli("session", "history", str(sid), "--json", env=cli_env)
    assert all(h["from_status"] != h["to_status"] for h in hidden.json()["items"])

    every = await run_cli("session", "history", str(sid), "--all", env=cli_env)
    assert_readable(every)
    assert every.out.count("SCHEDULED -> SCHEDULED") == 3, every.out
    assert "stale: expected PENDING, found SCHEDULED" in every.out
    assert "stale: expected TERMINATING, found TERMINATED" in every.out  # the old row, in words
    assert "not shown" not in every.out
    as_json = (await run_cli("session", "history", str(sid), "--all", "--json", env=cli_env)).json()
    assert len(as_json["items"]) == len(hidden.json()["items"]) + 3


async def test_a_new_stale_row_is_written_in_status_values(api: Api, cli_env: dict[str, str]) -> None:
    sid = uuid.UUID(await _create(cli_env, "--command", "echo hi"))
    stale = SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus.TERMINATING, SessionStatus.RUNNING}),
        to_status=SessionStatus.TERMINATED,
        handler="TerminateSessions",
        result=SchedulingResult.SUCCESS,
    )
    async with api.engine.begin() as conn:
        assert (await apply_session_transitions(conn, [stale])).stale == [sid]
    resp = await api.client.get(f"/v2/sessions/{sid}/history?all=true", headers=api.alice)
    messages = [h["message"] for h in (await resp.json())["items"] if h["handler"] == "TerminateSessions"]
    assert messages == ["stale: expected RUNNING or TERMINATING, found PENDING"]


async def test_watch_follows_to_the_end_and_until_stops_early(api: Api, cli_env: dict[str, str]) -> None:
    sid = uuid.UUID(await _create(cli_env, "--type", "interactive", "--name", "shown-w"))
    proc = await start_cli("session", "watch", str(sid), env=cli_env)
    try:
        for src, dst in (("PENDING", "SCHEDULED"), ("SCHEDULED", "RUNNING")):
            async with api.engine.begin() as conn:
                await apply_session_transitions(conn, [session_move(sid, src, dst)])
        await asyncio.sleep(3.0)  # more than a re-read (2 s): it has seen RUNNING and goes on
        assert proc.returncode is None
        async with api.engine.begin() as conn:
            await apply_session_transitions(conn, [session_move(sid, "RUNNING", "TERMINATING")])
            end = SessionTransition(
                session_id=sid,
                expected=frozenset({SessionStatus.TERMINATING}),
                to_status=SessionStatus.TERMINATED,
                handler="test",
                result=SchedulingResult.SUCCESS,
                status_info={"cause": "USER_CANCELLED", "message": "terminated by its owner"},
            )
            await apply_session_transitions(conn, [end])
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    res = Result(proc.returncode or 0, out.decode(), err.decode())
    assert_readable(res)
    moves = [" ".join(line.split()[1:4]) for line in res.out.splitlines()[1:-1]]
    assert moves[-2:] == ["RUNNING -> TERMINATING", "TERMINATING -> TERMINATED"], res.out
    last = res.out.splitlines()[-1].split(maxsplit=1)[1]
    assert last == "TERMINATED  cause=USER_CANCELLED  (terminated by its owner)", res.out

    other = uuid.UUID(await _create(cli_env, "--type", "interactive"))
    proc = await start_cli("session", "watch", str(other), "--until", "running", env=cli_env)
    for src, dst in (("PENDING", "SCHEDULED"), ("SCHEDULED", "RUNNING")):
        async with api.engine.begin() as conn:
            await apply_session_transitions(conn, [session_move(other, src, dst)])
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines()[-1].split()[1:] == ["RUNNING"]


async def test_create_wait_ends_in_words(api: Api, cli_env: dict[str, str]) -> None:
    proc = await start_cli(
        "session", "create", "--image", "python:3", "--command", "sleep 1", "--resources", "cpu=1,mem=256m",
        "--name", "shown-c", "--wait", env=cli_env,
    )  # fmt: skip
    sid = await _session_id(api, "shown-c")
    assert (await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)).status == 202
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    res = Result(0, out.decode(), err.decode())
    assert proc.returncode == 1  # cancelled: not a success
    assert_readable(res)
    assert res.out.splitlines()[-1].split()[1:3] == ["CANCELLED", "cause=USER_CANCELLED"], res.out


async def test_a_batch_session_without_a_command_is_refused_in_words(cli_env: dict[str, str]) -> None:
    res = await run_cli("session", "create", "--image", "python:3", "--type", "batch", env=cli_env)
    assert res.code == 1
    assert res.err.strip() == "Error: Validation failed: command: a batch session needs a command", res.err


async def test_node_list_and_status_in_binary_units(api: Api, admin_env: dict[str, str]) -> None:
    assert_readable(await run_cli("node", "list", env=admin_env))
    status = await run_cli("node", "status", "agent-1", env=admin_env)
    assert_readable(status)
    assert "of cpu=4, mem=8 GiB" in status.out, status.out
    raw = await run_cli("node", "status", "agent-1", "--bytes", env=admin_env)
    assert raw.code == 0 and "mem=8589934592" in raw.out, raw.out
