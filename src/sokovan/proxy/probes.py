"""Probing every route of the routing table on its own health check, and counting the results.

One task per probe target sleeps until the route is due (`initial_delay` after the replica started
running, then every `interval`), then `GET <endpoint><path>` within `timeout`: a 2xx passes. A
semaphore bounds how many probes are in flight (a hollow fleet has a thousand routes); they share
one client session. Each route keeps its consecutive passes and failures, starting from its last
report in Redis so a restarted proxy carries on, and every probe yields a report (with the time of
the probe) for the `ReportWriter`. A route that leaves the table stops being probed.

The latest result per endpoint is also what passive ejection uses: `failing` holds the endpoints
whose latest probe failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import structlog
from redis.exceptions import RedisError

from sokovan.bus.routing import HealthReport, ProbeTarget
from sokovan.proxy import metrics
from sokovan.proxy.reports import ReportWriter

log = structlog.get_logger(__name__)

LoadReports = Callable[[list[uuid.UUID]], Awaitable[dict[uuid.UUID, HealthReport]]]

# Read at most this much of a health response: the status decides, the body is drained for keep-alive.
MAX_HEALTH_BODY = 64 * 1024
REFUSED = f"[Errno {errno.ECONNREFUSED}]"


@dataclass
class Counts:
    successes: int = 0
    failures: int = 0


def probe_url(target: ProbeTarget) -> str:
    return target.endpoint.rstrip("/") + target.health_check.path


def failure_status(exc: BaseException) -> str:
    """The `last_status` of a probe that got no HTTP status."""
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Several addresses (localhost → ::1 and 127.0.0.1) come back as one OSError naming each errno.
        if isinstance(exc.os_error, ConnectionRefusedError) or REFUSED in str(exc.os_error):
            return "connection refused"
        return f"connection error: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "disconnected"
    if isinstance(exc, ConnectionResetError):
        return "connection reset"
    return f"error: {type(exc).__name__}"


class Prober:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        writer: ReportWriter,
        load_reports: LoadReports,
        concurrency: int = 64,
        label: Callable[[str], str] = lambda deployment: "(unknown)",
    ) -> None:
        self._session = session
        self._writer = writer
        self._load_reports = load_reports
        self._label = label  # a deployment's metrics label (its id) by name
        self._slots = asyncio.Semaphore(concurrency)
        self._targets: dict[uuid.UUID, ProbeTarget] = {}
        self._tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._counts: dict[uuid.UUID, Counts] = {}
        self.failing: set[str] = set()
        self.probes_run = 0

    @property
    def targets(self) -> int:
        return len(self._targets)

    def counts(self, route_id: uuid.UUID) -> Counts | None:
        return self._counts.get(route_id)

    async def sync(self, targets: list[ProbeTarget]) -> None:
        """Probe exactly `targets` from now on: start the new ones, stop those that left or changed."""
        wanted = {t.route_id: t for t in targets}
        for rid, old in list(self._targets.items()):
            new = wanted.get(rid)
            if new is None or new != old:
                self._stop(rid, keep_counts=new is not None and new.endpoint == old.endpoint)
        fresh = [t for rid, t in wanted.items() if rid not in self._targets]
        if not fresh:
            return
        missing = [t.route_id for t in fresh if t.route_id not in self._counts]
        last: dict[uuid.UUID, HealthReport] = {}
        if missing:
            try:
                last = await self._load_reports(missing)
            except (RedisError, OSError) as exc:
                log.warning("proxy.reports_unreadable", error=str(exc) or type(exc).__name__)
        for target in fresh:
            rid = target.route_id
            if rid not in self._counts:
                report = last.get(rid)
                self._counts[rid] = (
                    Counts(report.consecutive_successes, report.consecutive_failures) if report else Counts()
                )
            self._targets[rid] = target
            self._tasks[rid] = asyncio.create_task(self._run(target), name=f"probe-{rid}")

    async def close(self) -> None:
        """Stop probing; the reports already handed to the writer stay there for its last flush."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        self._targets.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop(self, route_id: uuid.UUID, keep_counts: bool) -> None:
        target = self._targets.pop(route_id)
        task = self._tasks.pop(route_id)
        task.cancel()
        if not keep_counts:
            self._counts.pop(route_id, None)
            self._writer.discard(route_id)
            if not any(t.endpoint == target.endpoint for t in self._targets.values()):
                self.failing.discard(target.endpoint)

    async def _run(self, target: ProbeTarget) -> None:
        hc = target.health_check
        await asyncio.sleep(max(0.0, target.since + hc.initial_delay - time.time()))
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + hc.interval
            async with self._slots:
                at = time.time()
                ok, status = await self.probe_once(target)
            self._record(target, ok, status, at)
            await asyncio.sleep(max(0.0, due - loop.time()))

    async def probe_once(self, target: ProbeTarget) -> tuple[bool, str]:
        """One probe: (passed, last_status)."""
        timeout = aiohttp.ClientTimeout(total=target.health_check.timeout)
        try:
            async with self._session.get(probe_url(target), timeout=timeout, allow_redirects=False) as resp:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    await resp.content.read(MAX_HEALTH_BODY)
                return 200 <= resp.status < 300, str(resp.status)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return False, failure_status(exc)
        except ValueError as exc:  # an endpoint that is not a URL
            return False, failure_status(exc)

    def _record(self, target: ProbeTarget, ok: bool, status: str, at: float) -> None:
        counts = self._counts.setdefault(target.route_id, Counts())
        if ok:
            counts.successes, counts.failures = counts.successes + 1, 0
            self.failing.discard(target.endpoint)
        else:
            counts.successes, counts.failures = 0, counts.failures + 1
            self.failing.add(target.endpoint)
        self.probes_run += 1
        metrics.PROBES.labels(
            deployment=self._label(target.deployment), result="pass" if ok else "fail"
        ).inc()
        self._writer.put(
            HealthReport(
                route_id=target.route_id,
                consecutive_successes=counts.successes,
                consecutive_failures=counts.failures,
                last_checked_at=at,
                last_status=status,
                ok=ok,
            )
        )
