"""`AppProxy`: the app proxy's lifecycle, wiring the table follower, prober, report writer and server.

`start()` binds the HTTP port (the only thing that can make it fail), reads the routing table once
if Redis answers, and starts the background loops: following the table, writing health reports,
registering the proxy's public URL every few seconds and writing the proxy's load every second.
None of them needs Redis to be up: each retries with backoff and the proxy forwards with the last
table it read. `stop()` unregisters the URL, lets in-flight requests finish (briefly), stops
probing, writes the last reports and removes the proxy's load. A loop that ends on an error that
is not Redis being away (a bug) stops the proxy with `ProxyFailed`, so that `sokovan proxy` exits
non-zero saying why, instead of forwarding with a table no longer followed. (`ProxyConfig`: `config`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from typing import Any

import aiohttp
import redis.asyncio as aioredis
import structlog
from aiohttp import web
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from sokovan.bus.proxy_load import ProxyLoad, forget_load, write_load
from sokovan.bus.routing import (
    HealthReport,
    RoutingTable,
    read_reports,
    register_proxy,
    unregister_proxy,
    write_reports,
)
from sokovan.common.lifecycle import Service
from sokovan.common.settings import Settings
from sokovan.common.supervise import describe
from sokovan.proxy.activation import TableSignal
from sokovan.proxy.app import create_app
from sokovan.proxy.backoff import sleep_unless
from sokovan.proxy.balancer import Balancer
from sokovan.proxy.config import ProxyConfig
from sokovan.proxy.forward import Forwarder
from sokovan.proxy.guard import Limits
from sokovan.proxy.load import LoadReporter, LoadTracker
from sokovan.proxy.probes import Prober
from sokovan.proxy.reports import ReportWriter
from sokovan.proxy.table import TableFollower
from sokovan.proxy.timeouts import GuardedRunner

log = structlog.get_logger(__name__)

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


class ProxyStartError(RuntimeError):
    """The proxy cannot start (no cluster secret, port taken)."""


class ProxyFailed(ProxyStartError):
    """One of the proxy's background loops ended on an error: the proxy stopped."""


def default_public_url(host: str, port: int) -> str:
    if host in WILDCARD_HOSTS:
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class AppProxy(Service):
    def __init__(self, settings: Settings, config: ProxyConfig | None = None) -> None:
        if not settings.cluster_secret:
            raise ProxyStartError("SOKOVAN_CLUSTER_SECRET is not set: the proxy refuses to start without it")
        self.config = config or ProxyConfig()
        self._secret = settings.cluster_secret
        self._prefix = settings.etcd_prefix
        self._redis = aioredis.Redis.from_url(
            settings.redis_url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=2.0, socket_timeout=5.0
        )
        self.proxy_id = ""  # <host name>:<port>, once bound: a restarted proxy replaces its entry
        self.balancer = Balancer()
        self.limits = Limits(self.config.max_per_client)
        self.load = LoadTracker()
        self.loads = LoadReporter(self._load_snapshot, self._write_load, self.config.load_interval)
        self.load.on_wait = self.loads.wake
        self.table_signal = TableSignal()
        self.writer = ReportWriter(self._write_reports)
        self.follower = TableFollower(
            self._redis, self._prefix, self._secret, self._apply, self.config.table_poll_interval
        )
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runner: web.AppRunner | None = None
        self._sessions: list[aiohttp.ClientSession] = []
        self._prober: Prober | None = None
        self.url = ""

    @property
    def prober(self) -> Prober:
        assert self._prober is not None, "start() first"
        return self._prober

    async def start(self) -> None:
        cfg = self.config
        probe_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=cfg.probe_concurrency),
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        forward_session = aiohttp.ClientSession(
            # No per-host limit, and by default no total one: each deployment's `max_connections`
            # (enforced before a connection is taken) bounds what it can hold, so none starves another.
            connector=aiohttp.TCPConnector(
                limit=cfg.max_connections, limit_per_host=0, keepalive_timeout=2.0
            ),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,  # bytes pass through as the replica encoded them
        )
        self._sessions = [probe_session, forward_session]
        self._prober = Prober(
            probe_session, self.writer, self._read_reports, cfg.probe_concurrency, label=self.balancer.label
        )
        self.balancer.failing = self._prober.failing
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=cfg.connect_timeout, sock_read=cfg.read_timeout
        )
        forwarder = Forwarder(
            self.balancer,
            forward_session,
            timeout,
            limits=self.limits,
            load=self.load,
            signal=self.table_signal,
            body_timeout=cfg.body_timeout,
        )
        app = create_app(forwarder, self.status)
        # A client that goes away cancels its handler, which closes the replica's connection with it
        # (an idle event stream would otherwise hold it until the replica next writes).
        # (Also what cuts off a client whose request body stalls: closing its connection.)
        self._runner = GuardedRunner(
            app,
            header_timeout=cfg.header_timeout,
            access_log=None,
            shutdown_timeout=cfg.shutdown_timeout,
            handler_cancellation=True,
            keepalive_timeout=cfg.keepalive_timeout,
        )
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, cfg.host, cfg.port).start()
        except OSError as exc:
            await self._runner.cleanup()
            await self._close_resources()
            raise ProxyStartError(f"cannot listen on {cfg.host}:{cfg.port}: {exc}") from exc
        port = int(self._runner.addresses[0][1])
        self.proxy_id = f"{socket.gethostname()}:{port}"
        self.url = cfg.public_url or default_public_url(cfg.host, port)
        with contextlib.suppress(RedisError, OSError):
            await self.follower.refresh()
        self._tasks = [
            asyncio.create_task(self.follower.run(self._stop), name="proxy-table"),
            asyncio.create_task(self.writer.run(self._stop), name="proxy-reports"),
            asyncio.create_task(self._register_loop(), name="proxy-register"),
            asyncio.create_task(self.loads.run(self._stop), name="proxy-load"),
        ]
        log.info("proxy.started", bind=f"{cfg.host}:{port}", url=self.url, proxy_id=self.proxy_id)

    async def run(self, stop: asyncio.Event) -> None:
        """`start()`, serve until `stop` is set or a background loop fails, then `stop()`;
        `ProxyFailed` in the second case."""
        await self.start()
        try:
            failure = await self._wait(stop)
        finally:
            await self.stop()
        if failure is not None:
            raise ProxyFailed(failure)

    async def _wait(self, stop: asyncio.Event) -> str | None:
        """Until `stop` is set (None) or a background loop ends on its own (why)."""
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait([stopper, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        for task in done:
            if task is not stopper and not task.cancelled():
                exc = task.exception()
                why = describe(exc) if exc is not None else "ended"
                log.error("proxy.loop_failed", loop=task.get_name(), error=why)
                return f"{task.get_name()}: {why}"
        return None

    async def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(unregister_proxy(self._redis, self._prefix, self.proxy_id), 2.0)
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(forget_load(self._redis, self._prefix, self.proxy_id), 2.0)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._prober is not None:
            await self._prober.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.writer.flush(), 2.0)
        await self._close_resources()
        log.info("proxy.stopped", proxy_id=self.proxy_id)

    def status(self) -> dict[str, Any]:
        """What `GET /healthz` tells besides `ok`."""
        table = self.balancer.table
        return {
            "routes": self.balancer.healthy_routes,
            "deployments": len(table.routes) if table else 0,
            "probes": self._prober.targets if self._prober else 0,
            "table_generated_at": table.generated_at if table else None,
        }

    async def _apply(self, table: RoutingTable) -> None:
        self.balancer.apply(table)
        self.table_signal.applied()  # requests held for a replica look again
        await self.prober.sync(table.probes)

    def _load_snapshot(self) -> ProxyLoad:
        table = self.balancer.table
        known = [e.id for e in table.deployments.values()] if table else []
        load = self.load.snapshot(self.proxy_id, known)
        # Under which table it was measured: a route that left the table is drained only by
        # reports made under a newer one (TerminatingRoute).
        load.table_at = table.generated_at if table else None
        return load

    async def _write_load(self, load: ProxyLoad) -> None:
        await write_load(self._redis, self._prefix, self._secret, load)

    async def _read_reports(self, route_ids: list[uuid.UUID]) -> dict[uuid.UUID, HealthReport]:
        return await read_reports(self._redis, self._prefix, self._secret, route_ids)

    async def _write_reports(self, reports: list[HealthReport]) -> None:
        await write_reports(self._redis, self._prefix, self._secret, reports)

    async def _register_loop(self) -> None:
        failing = False
        while True:
            try:
                await register_proxy(self._redis, self._prefix, self._secret, self.proxy_id, self.url)
                if failing:
                    log.info("proxy.redis_back", during="register")
                failing = False
            except (RedisError, OSError) as exc:
                if not failing:
                    log.warning("proxy.redis_unreachable", during="register", error=str(exc) or repr(exc))
                failing = True
            if await sleep_unless(self._stop, self.config.register_interval):
                return

    async def _close_resources(self) -> None:
        for session in self._sessions:
            await session.close()
        await self._redis.aclose()
