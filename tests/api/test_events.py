"""`GET /v2/events`: user events from Redis pub/sub as server-sent events, per caller."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import ClientResponse

from sokovan.bus.user_events import (
    PER_MESSAGE,
    UserEvent,
    UserEventPublisher,
    parse_wire,
    user_events_channel,
    wire_many,
)
from sokovan.manager.api import events as events_api
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.api.test_auth_and_errors import assert_problem

READ_TIMEOUT = 5.0


async def _block(resp: ClientResponse, wait: float = READ_TIMEOUT) -> list[str]:
    """The lines of the next SSE block (up to a blank line)."""
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(resp.content.readline(), wait)
        assert raw, "the stream ended"
        line = raw.decode().rstrip("\r\n")
        if line == "":
            if lines:
                return lines
            continue
        lines.append(line)


async def next_event(resp: ClientResponse, wait: float = READ_TIMEOUT) -> tuple[str, dict[str, Any]]:
    """The next message with an `event:` (comments skipped): its name and its data as JSON."""
    while True:
        lines = await _block(resp, wait)
        fields = dict(line.split(": ", 1) for line in lines if not line.startswith(":"))
        if fields:
            assert set(fields) == {"event", "data"}, lines
            return fields["event"], json.loads(fields["data"])


@asynccontextmanager
async def stream(api: Api, headers: dict[str, str], **query: str) -> AsyncIterator[ClientResponse]:
    resp = await api.client.get("/v2/events", headers=headers, params=query)
    assert resp.status == 200, await resp.text()
    try:
        yield resp
    finally:
        resp.close()


async def subscribers(ctx: ManagerContext) -> int:
    channel = user_events_channel(ctx.settings.etcd_prefix)
    counts = await ctx.redis.pubsub_numsub(channel)
    return int(counts[0][1])


async def wait_no_subscribers(ctx: ManagerContext) -> None:
    for _ in range(100):
        if await subscribers(ctx) == 0:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the event stream's subscription outlived its client")


async def test_admin_sees_all_and_a_user_its_own(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    alice, bob = await user_id(api, "alice"), await user_id(api, "bob")
    sid = str(uuid.uuid4())
    async with stream(api, api.admin) as admin_stream, stream(api, api.alice) as alice_stream:
        assert admin_stream.headers["Content-Type"].startswith("text/event-stream")
        await publisher.publish_many(
            [
                UserEvent(
                    name="session.status",
                    session_id=str(uuid.uuid4()),
                    owner=bob,
                    **{"from": "PENDING", "to": "SCHEDULED"},
                ),
                UserEvent(
                    name="agent.status", agent_id="agent-1", owner=None, **{"from": "READY", "to": "DOWN"}
                ),
                UserEvent(
                    name="session.status",
                    session_id=sid,
                    owner=alice,
                    **{"from": "PENDING", "to": "SCHEDULED"},
                ),
            ]
        )
        got = [await next_event(admin_stream) for _ in range(3)]
        assert [name for name, _ in got] == ["session.status", "agent.status", "session.status"]
        assert got[1][1]["agent_id"] == "agent-1" and (got[1][1]["from"], got[1][1]["to"]) == (
            "READY",
            "DOWN",
        )
        # pub/sub keeps the order: alice's first event is her own, the two before were held back
        name, data = await next_event(alice_stream)
        assert name == "session.status"
        assert data["session_id"] == sid and data["owner"] == alice
        assert (data["from"], data["to"]) == ("PENDING", "SCHEDULED")
        assert {"name", "at"} <= data.keys()
    await wait_no_subscribers(ctx)


async def test_session_id_filter(api: Api, ctx: ManagerContext, publisher: UserEventPublisher) -> None:
    alice = await user_id(api, "alice")
    mine, other = str(uuid.uuid4()), str(uuid.uuid4())
    kernel = str(uuid.uuid4())
    async with stream(api, api.alice, session_id=mine.upper()) as alice_stream:
        async with stream(api, api.admin, session_id=mine) as admin_stream:
            await publisher.publish_many(
                [
                    UserEvent(
                        name="session.status",
                        session_id=other,
                        owner=alice,
                        **{"from": "PENDING", "to": "CANCELLED"},
                    ),
                    UserEvent(name="agent.status", agent_id="agent-2", **{"from": "READY", "to": "DOWN"}),
                    UserEvent(
                        name="kernel.status",
                        session_id=mine,
                        kernel_id=kernel,
                        owner=alice,
                        **{"from": "PREPARED", "to": "CREATING"},
                    ),
                    UserEvent(
                        name="session.status",
                        session_id=mine,
                        owner=alice,
                        **{"from": "CREATING", "to": "RUNNING"},
                    ),
                ]
            )
            for resp in (alice_stream, admin_stream):
                name, data = await next_event(resp)
                assert (name, data["kernel_id"], data["to"]) == ("kernel.status", kernel, "CREATING")
                name, data = await next_event(resp)
                assert (name, data["session_id"], data["to"]) == ("session.status", mine, "RUNNING")
    await wait_no_subscribers(ctx)


async def test_bad_requests(api: Api, ctx: ManagerContext) -> None:
    body = await assert_problem(
        await api.client.get("/v2/events", params={"session_id": "nope"}, headers=api.alice), 400
    )
    assert "session_id" in str(body["detail"])
    await assert_problem(await api.client.get("/v2/events"), 401)
    assert await subscribers(ctx) == 0


async def test_keep_alive_comment(api: Api, ctx: ManagerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_api, "KEEPALIVE_INTERVAL", 0.2)
    async with stream(api, api.bob) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert resp.headers["Cache-Control"] == "no-cache"
        seen = [line for _ in range(3) for line in await _block(resp, 2.0)]
        assert seen.count(": keep-alive") >= 2, seen
    await wait_no_subscribers(ctx)


async def test_disconnect_releases_the_subscription(api: Api, ctx: ManagerContext) -> None:
    streams = api.client.app[events_api.STREAMS_KEY] if api.client.app else None
    async with stream(api, api.alice):
        assert await subscribers(ctx) == 1
    await wait_no_subscribers(ctx)
    if streams is not None:
        for _ in range(50):
            if all(t.done() for t in streams):
                break
            await asyncio.sleep(0.1)
        assert all(t.done() for t in streams)


async def test_closing_the_server_ends_open_streams(api: Api, ctx: ManagerContext) -> None:
    async with stream(api, api.admin) as resp:
        assert await subscribers(ctx) == 1
        await asyncio.wait_for(api.client.server.close(), 10)
        assert await asyncio.wait_for(resp.content.read(), 5) is not None
    await wait_no_subscribers(ctx)


async def test_openapi_documents_the_stream(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    op = doc["paths"]["/v2/events"]["get"]
    assert op["responses"]["200"]["content"]["text/event-stream"]["schema"] == {
        "$ref": "#/components/schemas/UserEvent"
    }
    assert [p["name"] for p in op["parameters"]] == ["session_id", "deployment_id"]
    assert op["security"] == [{"bearer": []}]
    schema = doc["components"]["schemas"]["UserEvent"]
    assert {"name", "at", "session_id", "from", "to"} <= schema["properties"].keys()
    assert "security" not in doc["paths"]["/metrics"]["get"]


async def test_a_large_write_travels_in_few_messages_and_arrives_whole_and_in_order(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    count = 2 * PER_MESSAGE + 50
    events = [
        UserEvent(
            name="session.status", session_id=str(uuid.uuid4()), **{"from": "PENDING", "to": "SCHEDULED"}
        )
        for _ in range(count)
    ]
    raw = ctx.redis.pubsub()
    await raw.subscribe(user_events_channel(ctx.settings.etcd_prefix))
    try:
        async with stream(api, api.admin) as admin_stream:
            await publisher.publish_many(events)
            got = [(await next_event(admin_stream))[1]["session_id"] for _ in range(count)]
            assert got == [e.session_id for e in events]
            messages = []
            async with asyncio.timeout(READ_TIMEOUT):
                while len(messages) < 3:  # (the subscription's confirmation reads as None)
                    message = await raw.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if message is not None:
                        messages.append(message["data"])
        assert [len(parse_wire(m)) for m in messages] == [PER_MESSAGE, PER_MESSAGE, 50]
        # A lone event is its own object, as every manager has sent it.
        assert json.loads(wire_many(events[:1]))["session_id"] == events[0].session_id
        assert [e.session_id for e in parse_wire(events[0].wire())] == [events[0].session_id]
    finally:
        await raw.unsubscribe()
        await raw.aclose()  # type: ignore[no-untyped-call]
    await wait_no_subscribers(ctx)
