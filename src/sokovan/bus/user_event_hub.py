"""One Redis subscription per manager to the user events, fanned out to every open event stream.

`UserEventHub.open(accept)` adds a listener with a queue of its own and a filter (`accept`: what its
stream may and wants to send); the hub's reader (one pub/sub connection, started with the first
listener and ended with the last) parses each message once and puts its events on the queue of
every listener that accepts them, so a listener queues only what it will send and a burst of other
users' events fills no one's queue. A message's events are queued whole: one lane write that moves
a thousand sessions publishes thousands of events in one message, and a listener that kept up until
then must not be ended for it (with a bound per event, every admin's stream was ended in each burst,
however fast its client read). A listener still `queue_size` events or more behind when the next
message comes (its client reads slower than its events come) is ended alone rather than let memory
grow (it holds at most that bound and one message): its queue gets the end marker (`None`) and it
leaves the hub; the others go on. When the subscription is lost (Redis went
away), every listener is ended the same way, since the events published meanwhile are lost to it
(its client reconnects and reads the current state from the REST API); the reader reconnects with
backoff while listeners remain, and `open()` waits for the subscription to be confirmed, so a
listener that was opened misses nothing published afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
import structlog
from pydantic import ValidationError
from redis.asyncio.client import PubSub

from sokovan.bus.user_events import UserEvent, parse_wire, user_events_channel
from sokovan.common.supervise import Backoff, describe

log = structlog.get_logger(__name__)

# Events a listener may still lag behind, when a message comes, without being ended. A burst of
# 10,000 sessions publishes some 60,000 events within seconds, in messages of 200 that arrive back
# to back; the queue holds references to events parsed once for every listener, so a listener
# that lags costs little more than its references.
QUEUE_SIZE = 10_000
SUBSCRIBE_TIMEOUT = 5.0
READ_TIMEOUT = 1.0  # how long the reader waits for a message before looking around again


class HubUnavailable(Exception):
    """The subscription could not be confirmed in time (Redis is away)."""


Accept = Callable[[UserEvent], bool]


def _everything(event: UserEvent) -> bool:
    return True


class Listener:
    """One event stream's view of the hub: its queue of the events it accepts, `None` when it has
    been ended."""

    def __init__(self, size: int, accept: Accept = _everything) -> None:
        # Unbounded as a queue: the hub bounds how far behind it may fall (`offer_many`).
        self.queue: asyncio.Queue[UserEvent | None] = asyncio.Queue()
        self.limit = size
        self.accept = accept
        self.ended: str | None = None  # why the hub ended it: "slow", "lost" or "closed"
        self.live = False  # handed out by `open()`: it has seen the subscription confirmed

    def end(self, why: str) -> None:
        if self.ended is not None:
            return
        self.ended = why
        self.queue.put_nowait(None)

    def offer_many(self, events: list[UserEvent]) -> bool:
        """Queue the events of one message that this listener accepts, all of them; False (and the
        listener ended) when it is still `limit` events or more behind from earlier messages."""
        wanted = [event for event in events if self._accepts(event)]
        if not wanted:
            return True
        if self.queue.qsize() >= self.limit:
            self.end("slow")
            return False
        for event in wanted:
            self.queue.put_nowait(event)
        return True

    def _accepts(self, event: UserEvent) -> bool:
        try:
            return self.accept(event)
        except Exception as exc:  # a filter that cannot read an event does not send it
            log.warning("user_event_hub.filter_failed", error=repr(exc))
            return False


class UserEventHub:
    def __init__(self, redis: aioredis.Redis, prefix: str, *, queue_size: int | None = None) -> None:
        self._redis = redis
        self._channel = user_events_channel(prefix)
        self._queue_size = queue_size or QUEUE_SIZE
        self._listeners: set[Listener] = set()
        self._reader: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()  # the subscription is confirmed

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    async def open(self, accept: Accept = _everything) -> Listener:
        """A new listener of the events `accept` takes, once the hub's subscription is confirmed;
        `HubUnavailable` after `SUBSCRIBE_TIMEOUT` seconds without it."""
        listener = Listener(self._queue_size, accept)
        self._listeners.add(listener)
        if self._reader is None or self._reader.done():
            self._ready.clear()
            self._reader = asyncio.create_task(self._read(), name="user-event-hub")
        try:
            await asyncio.wait_for(self._ready.wait(), SUBSCRIBE_TIMEOUT)
        except TimeoutError as exc:
            await self.close_listener(listener)
            raise HubUnavailable("could not subscribe to the event channel") from exc
        except BaseException:
            await self.close_listener(listener)
            raise
        listener.live = True
        return listener

    async def close_listener(self, listener: Listener) -> None:
        """Remove `listener`; the last one leaving ends the subscription."""
        self._listeners.discard(listener)
        if not self._listeners:
            await self.close()

    async def close(self) -> None:
        """End the subscription (the listeners still open are ended)."""
        reader, self._reader = self._reader, None
        self._ready.clear()
        for listener in list(self._listeners):
            listener.end("closed")
        self._listeners.clear()
        if reader is not None and not reader.done():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _read(self) -> None:
        backoff = Backoff()
        while self._listeners:
            try:
                await self._subscribed(backoff)
            except Exception as exc:
                self._ready.clear()
                log.warning("user_event_hub.subscription_lost", error=describe(exc))
                # Those handed out missed events; those still in `open()` wait for the reconnect.
                for listener in [x for x in self._listeners if x.live]:
                    listener.end("lost")
                    self._listeners.discard(listener)
                await backoff.sleep()

    async def _subscribed(self, backoff: Backoff) -> None:
        pubsub = self._redis.pubsub(ignore_subscribe_messages=False)
        try:
            await pubsub.subscribe(self._channel)
            await _confirmed(pubsub)
            backoff.reset()
            self._ready.set()
            while self._listeners:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=READ_TIMEOUT)
                if message is not None and message.get("type") == "message":
                    self._fan_out(message.get("data"))
                    # Messages already read arrive without a pause: let the streams write out what
                    # this one queued before the next is fanned out.
                    await asyncio.sleep(0)
        finally:
            await _release(pubsub, self._channel)

    def _fan_out(self, data: Any) -> None:
        events = _parse(data)
        if not events:
            return
        for listener in list(self._listeners):
            if not listener.offer_many(events):
                self._listeners.discard(listener)
                log.info("user_event_hub.slow_listener_ended", queue=self._queue_size)


async def _confirmed(pubsub: PubSub) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SUBSCRIBE_TIMEOUT
    while loop.time() < deadline:
        message = await pubsub.get_message(timeout=max(0.0, deadline - loop.time()))
        if message is not None and message.get("type") == "subscribe":
            return
    raise TimeoutError("the event channel subscription was not confirmed")


def _parse(data: Any) -> list[UserEvent]:
    try:
        return parse_wire(data)
    except (ValidationError, TypeError, ValueError, AttributeError):
        log.warning("user_event_hub.malformed_event", data=repr(data)[:200])
        return []


async def _release(pubsub: PubSub, channel: str) -> None:
    async def unsubscribe() -> None:
        try:
            await pubsub.unsubscribe(channel)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    try:
        await asyncio.shield(unsubscribe())
    except Exception as exc:  # a Redis that went away: the connection is dropped all the same
        log.debug("user_event_hub.unsubscribe_failed", error=repr(exc))
