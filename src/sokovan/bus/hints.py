"""Hints: "there is work for coordinator X", broadcast to every manager over Redis pub/sub.

A hint only shortens a loop's wait; a lost hint costs at most one long-cycle interval, so
pub/sub's at-most-once delivery is enough here. The listener resubscribes after a lost
connection and then hints every coordinator once, for the hints it missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable

import redis.asyncio as aioredis
import structlog

from sokovan.common.supervise import Backoff, describe

log = structlog.get_logger(__name__)


class Hint(enum.StrEnum):
    """What a hint can name: a coordinator (one name each, used by publishers and the
    orchestrator), or `ADMISSION`: what the API's admission caches hold changed (a policy, a
    project, a domain, a scaling group), so every manager drops them."""

    SCHEDULE = "schedule"
    DEPLOYMENT = "deployment"
    ROUTE = "route"
    MAINTENANCE = "maintenance"
    RETRY = "retry"
    NODE = "node"
    ADMISSION = "admission"


# A hint whose name ends so (`schedule.place+demand`) only says that more work arrived (a create);
# the lane then keeps the spacing after a cycle that moved nothing (`CoordinatorLoop.hint`).
DEMAND = "+demand"


def as_demand(name: str) -> str:
    return f"{name}{DEMAND}"


def parse_demand(name: str) -> tuple[str, bool]:
    """(the coordinator or lane named, whether the hint is demand only)."""
    if name.endswith(DEMAND):
        return name[: -len(DEMAND)], True
    return name, False


def hint_channel(prefix: str) -> str:
    return f"{prefix}:hints"


class HintPublisher:
    def __init__(self, redis: aioredis.Redis, prefix: str) -> None:
        self._redis = redis
        self._channel = hint_channel(prefix)

    async def hint(self, coordinator: str) -> None:
        """`coordinator`: a `Hint` (all its lanes) or one lane, `<coordinator>.<lane>`."""
        await self._redis.publish(self._channel, coordinator)


async def listen_hints(
    redis: aioredis.Redis, prefix: str, on_hint: Callable[[str], None], stop: asyncio.Event
) -> None:
    """Call `on_hint(coordinator)` for every hint until `stop` is set.

    A lost connection to Redis is retried with backoff (0.1 s doubling to 5 s) for as long as it
    lasts; each time the subscription is back, every coordinator is hinted once, since hints sent
    meanwhile were lost (a hint is only a shortcut: a spurious one costs one cycle)."""
    backoff = Backoff()
    reconnecting = False
    while not stop.is_set():
        try:
            await _listen(redis, prefix, on_hint, stop, backoff, catch_up=reconnecting)
        except Exception as exc:
            reconnecting = True
            log.warning("hints.redis_unreachable", error=describe(exc))
            if await backoff.sleep(stop):
                return


async def _listen(
    redis: aioredis.Redis,
    prefix: str,
    on_hint: Callable[[str], None],
    stop: asyncio.Event,
    backoff: Backoff,
    *,
    catch_up: bool,
) -> None:
    pubsub = redis.pubsub()
    try:
        await pubsub.subscribe(hint_channel(prefix))
        backoff.reset()
        if catch_up:
            log.info("hints.resubscribed")
            for coordinator in Hint:
                on_hint(coordinator)
        while not stop.is_set():
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
            if message is None:
                continue
            data = message.get("data")
            on_hint(data.decode() if isinstance(data, bytes) else str(data))
    finally:
        with contextlib.suppress(Exception):
            await pubsub.unsubscribe()
        with contextlib.suppress(Exception):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
