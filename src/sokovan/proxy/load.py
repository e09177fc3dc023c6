"""What this proxy measures for the autoscaler and the drain (CONTRACT section 12), and writing it.

`LoadTracker` counts, per deployment id, the requests in flight (forwarded, not waiting), the
requests started (admitted past the token check and the limits; `rps` is their rate over the last
`WINDOW` seconds) and the requests waiting for a replica to start; per replica endpoint, the
requests in flight on it. `LoadReporter` writes a `ProxyLoad` snapshot to Redis every
`interval` (`bus.proxy_load.write_load`), and soon after a request starts waiting (debounced:
several arriving together make one write), so a deployment at zero is activated without waiting
for the next tick. Redis being away is retried with backoff; at stop the proxy's value is removed.
A deployment of the table is in every snapshot (zeros included), so a manager can tell a quiet
deployment from one no proxy measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeVar

import structlog
from redis.exceptions import RedisError

from sokovan.bus.proxy_load import DeploymentLoad, ProxyLoad
from sokovan.proxy.backoff import Backoff, sleep_unless

log = structlog.get_logger(__name__)

WINDOW = 5  # seconds over which `rps` is measured
DEBOUNCE = 0.05  # seconds between a request starting to wait and the write it causes


K = TypeVar("K")


def _bump(counts: dict[K, int], key: K, by: int) -> None:
    n = counts.get(key, 0) + by
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


class LoadTracker:
    def __init__(self) -> None:
        self._inflight: dict[uuid.UUID, int] = {}
        self._waiting: dict[uuid.UUID, int] = {}
        self._endpoints: dict[str, int] = {}
        # deployment → {whole second (monotonic) → requests started in it}, the last WINDOW seconds
        self._started: dict[uuid.UUID, dict[int, int]] = {}
        self.on_wait: Callable[[], None] = lambda: None

    def started(self, deployment: uuid.UUID) -> None:
        now = math.floor(time.monotonic())
        buckets = self._started.setdefault(deployment, {})
        buckets[now] = buckets.get(now, 0) + 1
        if len(buckets) > WINDOW + 1:
            self._prune(buckets, now)

    @contextlib.contextmanager
    def inflight(self, deployment: uuid.UUID | None) -> Iterator[None]:
        yield from self._count(self._inflight, deployment)

    @contextlib.contextmanager
    def waiting(self, deployment: uuid.UUID | None) -> Iterator[None]:
        # The reporter writes soon, with this request counted.
        yield from self._count(self._waiting, deployment, then=self.on_wait)

    @contextlib.contextmanager
    def on_endpoint(self, endpoint: str) -> Iterator[None]:
        _bump(self._endpoints, endpoint, 1)
        try:
            yield
        finally:
            _bump(self._endpoints, endpoint, -1)

    def snapshot(self, proxy_id: str, known: Iterable[uuid.UUID] = ()) -> ProxyLoad:
        clock = time.monotonic()
        now = math.floor(clock)
        ids = set(known) | set(self._inflight) | set(self._waiting) | set(self._started)
        deployments: dict[uuid.UUID, DeploymentLoad] = {}
        for dep in ids:
            buckets = self._started.get(dep, {})
            self._prune(buckets, now)
            if not buckets:
                self._started.pop(dep, None)
            # The WINDOW whole seconds before this one, and what the current one has so far.
            rps = sum(buckets.values()) / (WINDOW + clock - now)
            deployments[dep] = DeploymentLoad(
                inflight=self._inflight.get(dep, 0), rps=rps, waiting=self._waiting.get(dep, 0)
            )
        return ProxyLoad(
            proxy_id=proxy_id, at=time.time(), deployments=deployments, endpoints=dict(self._endpoints)
        )

    @staticmethod
    def _prune(buckets: dict[int, int], now: int) -> None:
        for second in [s for s in buckets if s < now - WINDOW]:
            del buckets[second]

    @staticmethod
    def _count(
        counts: dict[uuid.UUID, int], deployment: uuid.UUID | None, then: Callable[[], None] | None = None
    ) -> Iterator[None]:
        if deployment is None:  # a routed name without an entry: not reported
            yield
            return
        _bump(counts, deployment, 1)
        try:
            if then is not None:
                then()
            yield
        finally:
            _bump(counts, deployment, -1)


WriteLoad = Callable[[ProxyLoad], Awaitable[None]]


class LoadReporter:
    """Writes `snapshot()` every `interval` and soon after `wake()`."""

    def __init__(self, snapshot: Callable[[], ProxyLoad], write: WriteLoad, interval: float = 1.0) -> None:
        self._snapshot = snapshot
        self._write = write
        self._interval = interval
        self._wake = asyncio.Event()
        self._backoff = Backoff()
        self.written = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)
            if self._wake.is_set() and await sleep_unless(stop, DEBOUNCE):
                return
            self._wake.clear()
            if stop.is_set():
                return
            if not await self.write_once() and await sleep_unless(stop, self._backoff.next_delay()):
                return

    async def write_once(self) -> bool:
        try:
            await self._write(self._snapshot())
        except (RedisError, OSError) as exc:
            log.warning("proxy.redis_unreachable", during="load", error=str(exc) or type(exc).__name__)
            return False
        if self._backoff.failures:
            log.info("proxy.redis_back", during="load")
        self._backoff.reset()
        self.written += 1
        return True
