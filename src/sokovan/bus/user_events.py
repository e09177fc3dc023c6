"""Transitions as users see them: published on Redis pub/sub, streamed by `GET /v2/events`.

Every session and kernel transition the manager applies becomes one `UserEvent` on the channel
`<prefix>:user-events` (the events of one write travel together, up to `PER_MESSAGE` in a message,
as a JSON array); each manager's SSE endpoint subscribes to it and forwards to each client the
events it may see (its own sessions; an admin all). Delivery is live (pub/sub): a client that
reconnects reads the current state from the REST API, as with Kubernetes watches after a gap.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from sokovan.bus.answered_marks import MARK_TTL_S, marks_of

log = structlog.get_logger(__name__)


_slot = object.__getattribute__


def user_events_channel(prefix: str) -> str:
    return f"{prefix}:user-events"


class UserEvent(BaseModel):
    """`name` is e.g. session.status, kernel.status, agent.status, deployment.status, route.status;
    `from`/`to` are statuses (a `*.status` event's `from` is null for a first state)."""

    model_config = ConfigDict(populate_by_name=True)
    # The frame's cache: a plain slot, not a pydantic private attribute, whose every read went
    # through `BaseModel.__getattr__` (some 3 µs, and 1 µs more to build each event; a burst
    # makes and sends tens of thousands of them).
    # `_got`: the JSON an event read off the channel arrived as, which its frame then carries
    # as it is, rather than a second dump of what was just parsed from it.
    __slots__ = ("_got", "_sse")
    if TYPE_CHECKING:  # declared for the type checker only: pydantic takes no part in them
        _sse: bytes
        _got: msgspec.Raw | bytes

    name: str
    at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    session_id: str | None = None
    kernel_id: str | None = None
    agent_id: str | None = None
    deployment_id: str | None = None
    route_id: str | None = None
    from_status: str | None = Field(default=None, alias="from")
    to_status: str | None = Field(default=None, alias="to")
    preempted_by: str | None = None  # session.preempted: the preemptor's id
    # Who may see it: the session's owner (user id); None for cluster events (admins only).
    owner: str | None = None
    detail: dict[str, object] = Field(default_factory=dict)

    def sse_frame(self) -> bytes:
        """The event as one server-sent-events message, made once however many streams send it."""
        # Read past `BaseModel.__getattr__`, which an unset slot would call (some 3 µs) to raise.
        try:
            frame: bytes = _slot(self, "_sse")
            return frame
        except AttributeError:
            pass
        try:
            got = bytes(_slot(self, "_got"))
        except AttributeError:  # made here, not read off the channel
            got = b""
        if not got or b"\n" in got or b"\r" in got:  # none, or not on one line: one made here
            got = self.wire().encode()
        frame = b"event: " + self.name.encode() + b"\ndata: " + got + b"\n\n"
        object.__setattr__(self, "_sse", frame)
        return frame

    def wire(self) -> str:
        """The event's JSON, without its null fields, except that a `*.status` event always
        carries `from` (null for a first state). A string splice, not a second dump: this runs
        for every transition."""
        text = self.model_dump_json(by_alias=True, exclude_none=True)
        if self.from_status is None and self.name.endswith(".status"):
            return '{"from":null,' + text[1:]
        return text


async def publish(publisher: UserEventPublisher | None, events: Sequence[UserEvent]) -> None:
    """Publish after the fact: a lost user event never fails the transition it reports."""
    if publisher is None or not events:
        return
    try:
        await publisher.publish_many(events)
    except Exception:
        log.warning("user_events.publish_failed", count=len(events), exc_info=True)


class UserEventPublisher:
    def __init__(self, redis: aioredis.Redis, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._channel = user_events_channel(prefix)

    async def publish_many(self, events: Sequence[UserEvent]) -> None:
        """One message per `PER_MESSAGE` events: a lone event as its object, more as an array of
        them (`parse_wire` reads both). A thousand sessions moving cost a few Redis commands, not
        a thousand. Kernels that reached PREPARED or RUNNING are marked in the same pipeline
        (`answered_marks`)."""
        if not events:
            return
        messages = [wire_many(events[i : i + PER_MESSAGE]) for i in range(0, len(events), PER_MESSAGE)]
        marks = marks_of(self._prefix, events)
        if len(messages) == 1 and not marks:
            await self._redis.publish(self._channel, messages[0])
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.publish(self._channel, message)
            for key in marks:
                pipe.set(key, 1, ex=MARK_TTL_S)
            await pipe.execute()


# Events in one message at most: a burst's message stays well under Redis' output buffer limits.
PER_MESSAGE = 200
_MANY = TypeAdapter(list[UserEvent])


def wire_many(events: Sequence[UserEvent]) -> str:
    """What `publish_many` sends for `events`: one event's object, or an array of them."""
    if len(events) == 1:
        return events[0].wire()
    return "[" + ",".join(e.wire() for e in events) + "]"


_RAW_PARTS = msgspec.json.Decoder(list[msgspec.Raw])


def parse_wire(data: str | bytes) -> list[UserEvent]:
    """The events of one message: an event's object (as every manager sends a lone event, and as
    managers before batching sent every event) or an array of them; each keeps the JSON it
    arrived as, for its frame (`sse_frame`)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if raw.lstrip().startswith(b"["):
        events = _MANY.validate_json(raw)
        try:
            parts: list[msgspec.Raw] | list[bytes] = _RAW_PARTS.decode(raw)
        except msgspec.MsgspecError:  # what pydantic read and msgspec does not: frames made anew
            return events
    else:
        events = [UserEvent.model_validate_json(raw)]
        parts = [raw.strip()]
    if len(parts) == len(events):  # as it must be; else each frame is made anew
        for event, part in zip(events, parts, strict=True):
            object.__setattr__(event, "_got", part)
    return events
