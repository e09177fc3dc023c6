"""`session create --wait` / `session watch` follow `GET /v2/events` (falling back to polling)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from sokovan.bus.user_events import UserEvent, UserEventPublisher, user_events_channel
from sokovan.cli import session_follow
from sokovan.cli.client import ApiClient, EventStream
from sokovan.manager.context import ManagerContext
from sokovan.state.session_writes import apply_session_transitions
from tests.api.conftest import Api, user_id
from tests.cli.conftest import run_cli, session_move, start_cli
from tests.cli.test_session_cli import _session_id

LINE_TIMEOUT = 10.0


async def _line(proc: asyncio.subprocess.Process, within: float = LINE_TIMEOUT) -> str:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), within)
    assert raw, "the CLI ended early"
    return raw.decode().rstrip("\n")


async def _subscribed(ctx: ManagerContext) -> None:
    """Wait until the CLI's event stream is open (its server side subscribed)."""
    channel = user_events_channel(ctx.settings.etcd_prefix)
    for _ in range(200):
        if int((await ctx.redis.pubsub_numsub(channel))[0][1]) >= 1:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the CLI never opened the event stream")


def _status(sid: uuid.UUID, owner: str, src: str, dst: str, **detail: Any) -> UserEvent:
    return UserEvent(
        name="session.status", session_id=str(sid), owner=owner, detail=detail, **{"from": src, "to": dst}
    )


def _move_of(line: str) -> str:
    """`HH:MM:SS  FROM -> TO ...` → `FROM -> TO`."""
    return " ".join(line.split()[1:4])


async def test_create_wait_prints_events_as_they_come(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher, cli_env: dict[str, str]
) -> None:
    alice = await user_id(api, "alice")
    proc = await start_cli(
        "session", "create", "--image", "shell", "--type", "interactive", "--name", "ev1", "--wait",
        env=cli_env,
    )  # fmt: skip
    try:
        assert "created" in await _line(proc)
        sid = await _session_id(api, "ev1")
        await _subscribed(ctx)
        # Events only (the table is left alone): each line can only come from the stream, and
        # comes well before the CLI's next re-read of the session.
        others = [
            _status(uuid.uuid4(), alice, "PENDING", "RUNNING"),  # another session of alice
            UserEvent(name="kernel.status", session_id=str(sid), kernel_id=str(uuid.uuid4()), owner=alice),
        ]
        await publisher.publish_many([*others, _status(sid, alice, "PENDING", "SCHEDULED")])
        assert _move_of(await _line(proc, 1.5)) == "PENDING -> SCHEDULED"
        await publisher.publish_many(
            [_status(sid, alice, "SCHEDULED", "PENDING", pending_reason="0/2 agents fit: 2 busy")]
        )
        line = await _line(proc, 1.5)
        assert _move_of(line) == "SCHEDULED -> PENDING" and line.endswith("0/2 agents fit: 2 busy")
        await publisher.publish_many(
            [
                _status(sid, alice, "PENDING", "SCHEDULED"),
                _status(sid, alice, "SCHEDULED", "PREPARING", handler="prepare"),
                _status(sid, alice, "PREPARING", "CREATING"),
                _status(sid, alice, "CREATING", "RUNNING"),
            ]
        )
        moves = [_move_of(await _line(proc, 1.5)) for _ in range(4)]
        assert moves == [
            "PENDING -> SCHEDULED",
            "SCHEDULED -> PREPARING",
            "PREPARING -> CREATING",
            "CREATING -> RUNNING",
        ]
        final = await _line(proc)
        assert final.split()[1] == "RUNNING"
        assert await asyncio.wait_for(proc.wait(), LINE_TIMEOUT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_transition_in_history_and_on_the_stream_is_printed_once(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher, cli_env: dict[str, str]
) -> None:
    """As the orchestrator does it: the move is committed (with its history row), then published."""
    alice = await user_id(api, "alice")
    proc = await start_cli(
        "session", "create", "--image", "shell", "--type", "interactive", "--name", "ev2", "--wait",
        env=cli_env,
    )  # fmt: skip
    sid = await _session_id(api, "ev2")
    await _subscribed(ctx)
    # The first event comes late (the CLI has read the move from the history by then), the
    # second at once (the CLI reads it in the history afterwards): each is printed once.
    for src, dst, delay in (("PENDING", "SCHEDULED", 2.5), ("SCHEDULED", "RUNNING", 0.0)):
        async with api.engine.begin() as conn:
            await apply_session_transitions(conn, [session_move(sid, src, dst)])
        await asyncio.sleep(delay)
        await publisher.publish_many([_status(sid, alice, src, dst)])
        await asyncio.sleep(0.5)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert [_move_of(line) for line in lines[1:3]] == ["PENDING -> SCHEDULED", "SCHEDULED -> RUNNING"]
    assert len(lines) == 4 and lines[3].split()[1] == "RUNNING", lines


async def test_watch_an_ended_session_and_a_foreign_one(api: Api, cli_env: dict[str, str]) -> None:
    created = await (await api.create(api.alice, name="ev3")).json()
    assert (await api.client.delete(f"/v2/sessions/{created['id']}", headers=api.alice)).status == 202
    res = await run_cli("session", "watch", created["id"], env=cli_env)
    assert res.code == 1, res.err
    lines = res.out.splitlines()
    assert lines[0].endswith("(ev3): CANCELLED")
    assert _move_of(lines[1]) == "PENDING -> CANCELLED"
    assert "CANCELLED" in lines[2] and "USER_CANCELLED" in lines[2]
    bob = await (await api.create(api.bob, name="ev4")).json()
    res = await run_cli("session", "watch", bob["id"], env=cli_env)
    assert res.code == 1 and res.err.startswith("Error: Not found:")


class _OldServerClient(ApiClient):
    """A client of a server without `/v2/events` (it answers 404 there)."""

    def events(self, path: str = "/v2/events", **query: str | int | bool | None) -> EventStream:
        return super().events("/v2/no-events-here", **query)


async def test_without_a_stream_it_polls(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_follow, "RESYNC_INTERVAL", 30.0)  # would time the test out if used
    created = await (await api.create(api.alice, type="interactive", command=None, name="ev5")).json()
    sid = uuid.UUID(created["id"])
    client = _OldServerClient(str(api.client.make_url("")).rstrip("/"), api.alice["Authorization"][7:])
    follow = asyncio.create_task(asyncio.to_thread(session_follow.follow, client, str(sid), err=False))
    await asyncio.sleep(0.5)
    async with api.engine.begin() as conn:
        await apply_session_transitions(conn, [session_move(sid, "PENDING", "SCHEDULED")])
    await asyncio.sleep(0.5)
    async with api.engine.begin() as conn:
        await apply_session_transitions(conn, [session_move(sid, "SCHEDULED", "RUNNING")])
    final = await asyncio.wait_for(follow, 10)
    assert final["status"] == "RUNNING"
    lines = capsys.readouterr().out.splitlines()
    assert [_move_of(line) for line in lines[:2]] == ["PENDING -> SCHEDULED", "SCHEDULED -> RUNNING"]
    assert lines[2].split()[1] == "RUNNING"
