"""The limits on open `GET /v2/events` streams, held per manager: all its worker processes together.

`STREAMS_PER_KEYPAIR` streams per keypair and `Settings.max_event_streams` in all; past either,
429 problem+json. `sokovan manager --workers N` runs N processes on one port, so the places are
counted in Redis, where every worker of the manager (`ManagerContext.manager_id`, shared by the
workers) sees them: one sorted set per keypair and one of every stream, under the settings' key
prefix, with one member per open stream scored by when its lease runs out. A place is taken by one
Lua script (drop the expired leases, count, add under the limits) and given back (ZREM) when its
stream ends. Each worker refreshes the leases of its streams every `REFRESH_INTERVAL`, so those of
a worker that died run out within `LEASE_TTL`.

A stream whose client has gone (its connection was lost) holds no place, even before its handler
notices (it looks only every `events.LIVENESS_INTERVAL`): every worker gives back the places of its
gone clients every `SWEEP_INTERVAL`, and a worker about to refuse a stream first gives back its own
and waits `GRACE` for the other workers' sweeps, so a client that closes its streams and opens as
many again at once is not refused, whichever worker each connection reaches. Redis unreachable when
a stream opens: 503 problem+json (the stream needs its Redis subscription anyway).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from sokovan.manager.api.problems import Problem

log = structlog.get_logger(__name__)

STREAMS_PER_KEYPAIR = 16
RETRY_AFTER = 5  # seconds, on a 429 or 503
LEASE_TTL = 10.0  # seconds a place outlives its last refresh (a dead worker's places)
REFRESH_INTERVAL = 3.0  # seconds between the refreshes of a worker's leases
SWEEP_INTERVAL = 0.1  # seconds between a worker's looks for streams whose client has gone
GRACE = 0.25  # seconds a refused stream waits for the other workers' sweeps before its 429
REDIS_TIMEOUT = 5.0  # seconds a take or a give-back may wait for Redis

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: the keypair's set, the manager's set. ARGV: ttl ms, per keypair, in all, member.
# 0: taken; 1: the keypair's limit; 2: the manager's.
_TAKE = (
    _NOW_MS
    + """
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 2 end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[4])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 0
"""
)

# KEYS: the manager's set, then each lease's keypair set. ARGV: ttl ms, then each lease's member.
# Only leases still there are extended (XX): one given back meanwhile is not brought back.
_REFRESH = (
    _NOW_MS
    + """
local ttl = tonumber(ARGV[1])
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + ttl, ARGV[i])
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[i])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
redis.call('PEXPIRE', KEYS[1], ttl)
return 0
"""
)


def too_many(detail: str) -> Problem:
    return Problem(
        429,
        "Too Many Requests",
        detail,
        slug="too-many-event-streams",
        headers={"Retry-After": str(RETRY_AFTER)},
    )


def unavailable(detail: str) -> Problem:
    headers = {"Retry-After": str(RETRY_AFTER)}
    return Problem(503, "Service Unavailable", detail, slug="service-unavailable", headers=headers)


@dataclass(frozen=True)
class _Lease:
    access_key: str
    member: str
    alive: Callable[[], bool]


class StreamLimits:
    """One worker's view of its manager's stream places: those it holds (`_held`, with whether each
    stream's client is still there) and, in Redis, those of every worker of the manager."""

    def __init__(
        self, redis: aioredis.Redis, prefix: str, manager_id: str, per_keypair: int, total: int
    ) -> None:
        self.redis = redis
        self.per_keypair = per_keypair
        self.total = total
        self._base = f"{prefix}:event-streams:{manager_id}"
        self._held: dict[str, _Lease] = {}  # member -> lease
        self._take = redis.register_script(_TAKE)
        self._refresh = redis.register_script(_REFRESH)

    def key(self, access_key: str | None = None) -> str:
        """The Redis sorted set of the manager's streams of `access_key` (or of all of them)."""
        return self._base if access_key is None else f"{self._base}:keypair:{access_key}"

    def count(self, access_key: str | None = None) -> int:
        """The streams this worker holds whose client is still there (of `access_key`, or in all)."""
        return sum(
            1 for lease in self._held.values() if access_key in (None, lease.access_key) and lease.alive()
        )

    @asynccontextmanager
    async def hold(self, access_key: str, alive: Callable[[], bool] = lambda: True) -> AsyncIterator[None]:
        """A place for one stream of `access_key` while the block runs (and `alive()` holds); 429
        when there is none, 503 when Redis does not answer."""
        # This worker's own streams alone may fill the limits: no need to ask Redis then.
        if self.count(access_key) >= self.per_keypair:
            raise self._refusal(1)
        if self.count() >= self.total:
            raise self._refusal(2)
        lease = _Lease(access_key, uuid.uuid4().hex, alive)
        try:
            await self.sweep()
            refused = await self._take_place(lease)
            if refused:  # another worker's gone clients may hold places: its sweep frees them
                await asyncio.sleep(GRACE)
                await self.sweep()
                refused = await self._take_place(lease)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("events.limits_unavailable", error=repr(exc))
            raise unavailable("could not count the open event streams; retry later") from exc
        if refused:
            raise self._refusal(refused)
        self._held[lease.member] = lease
        try:
            yield
        finally:
            await asyncio.shield(self._give_back([lease]))

    def _refusal(self, which: int) -> Problem:
        if which == 1:
            return too_many(f"at most {self.per_keypair} event streams may be open per keypair")
        return too_many(f"this manager serves at most {self.total} event streams")

    async def _take_place(self, lease: _Lease) -> int:
        args: list[int | str] = [int(LEASE_TTL * 1000), self.per_keypair, self.total, lease.member]
        keys = [self.key(lease.access_key), self.key()]
        return int(await asyncio.wait_for(self._take(keys=keys, args=args), REDIS_TIMEOUT))

    async def _give_back(self, leases: list[_Lease]) -> None:
        """Give back the places of `leases` that this worker still holds (each only once)."""
        mine = [lease for lease in leases if self._held.pop(lease.member, None) is not None]
        if not mine:
            return
        pipe = self.redis.pipeline(transaction=False)
        for lease in mine:
            pipe.zrem(self.key(lease.access_key), lease.member)
            pipe.zrem(self.key(), lease.member)
        try:
            await asyncio.wait_for(pipe.execute(), REDIS_TIMEOUT)
        except Exception as exc:  # their leases run out within LEASE_TTL
            log.warning("events.limits_give_back_failed", streams=len(mine), error=repr(exc))

    async def sweep(self) -> None:
        """Give back the places of the streams whose client has gone."""
        gone = [lease for lease in self._held.values() if not lease.alive()]
        if gone:
            await self._give_back(gone)

    async def refresh(self) -> None:
        """Extend the leases of the places this worker holds."""
        leases = list(self._held.values())
        if not leases:
            return
        keys = [self.key()] + [self.key(lease.access_key) for lease in leases]
        args: list[int | str] = [int(LEASE_TTL * 1000), *(lease.member for lease in leases)]
        await asyncio.wait_for(self._refresh(keys=keys, args=args), REDIS_TIMEOUT)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Sweep every SWEEP_INTERVAL and refresh every REFRESH_INTERVAL, until `stop` is set or
        the task is cancelled. The flag besides the cancel: a cancel that arrives while a sweep's
        Redis call ends can be lost (Python 3.11's `wait_for` returns the result then), and this
        loop then ran on for good while the app's cleanup waited for it (a test's teardown hung
        15 minutes, the task "cancelling" and still sweeping)."""
        next_refresh = time.monotonic() + REFRESH_INTERVAL
        while stop is None or not stop.is_set():
            await asyncio.sleep(SWEEP_INTERVAL)
            if stop is not None and stop.is_set():
                return
            try:
                await self.sweep()
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + REFRESH_INTERVAL
                    await self.refresh()
            except Exception as exc:  # Redis away: the streams end with their subscription
                log.warning("events.limits_refresh_failed", error=repr(exc))
