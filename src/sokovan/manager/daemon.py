"""`sokovan manager`: the REST v2 API and the SokovanOrchestrator in one process.

At start the manager waits for PostgreSQL, Redis and etcd (retrying for as long as they are away,
one log line per attempt) and refuses to start on any other error of theirs (a database that does
not exist, a Redis that refuses the database index): `ManagerFailed`, exit 1. Its background tasks
(the orchestrator, the event consumer, the config watcher, the hints listener) are supervised
(`common.supervise`): an outage restarts them with backoff for as long as it lasts; a task given up
stops the whole manager with `ManagerFailed` saying which and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

import aetcd
import redis.asyncio as aioredis
import structlog
from aiohttp import web
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.answered_marks import unmarked
from sokovan.bus.hints import Hint, HintPublisher, listen_hints
from sokovan.bus.routing import RoutingBus
from sokovan.bus.streams import EventConsumer, answered_key, beats_key, consumer_backlog
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common import eventloop
from sokovan.common.lifecycle import stop_on_signals
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.common.supervise import TaskFailed, describe, supervise, wait_for_service
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher
from sokovan.db.engine import make_engine
from sokovan.manager.api.app import create_app
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.replica_sessions import ControllerReplicas
from sokovan.manager.controller.scheduling_controller import SchedulingController
from sokovan.manager.event_dispatch import EventDispatcher
from sokovan.manager.peer_watch import manager_peers
from sokovan.manager.workers import die_with_parent
from sokovan.orchestrator.node.watch import Watch
from sokovan.orchestrator.orchestrator import Serving, SokovanOrchestrator

log = structlog.get_logger(__name__)

REDIS_CONNECT_TIMEOUT = 3.0
# The longest a Redis command waits for its answer (the consumer's XREADGROUP blocks for 1 s): a
# Redis that drops packets fails the call, and the supervised task retries on a new connection.
# A pub/sub read has its own, shorter timeout and is not bound by this.
REDIS_TIMEOUT = 10.0
ETCD_TIMEOUT = 5  # seconds per etcd call
# Heartbeats read from the events' stream (agents of an older build) within this long are written
# together (`bus.streams`): one transaction per beat cost a fleet of a thousand a fifth of a core.
BEAT_WINDOW = 0.1
# The heartbeats' own stream is read at most this often (`bus.streams`): a fleet's beats then come
# in batches, and an agent's liveness is judged over seconds.
BEATS_PACE = 1.0
# An RPC answer's kernel events are applied from the answer; their copies on the bus (a stream of
# their own) are applied no sooner than this after they were put there: by then, a no-op
# (`bus.streams`).
ANSWERED_DELAY = 2.0


class ManagerFailed(RuntimeError):
    """The manager cannot start, or stopped on an error: `str()` is the one line it exits with."""


WORKER_ENV = "SOKOVAN_MANAGER_WORKER"  # "<index>/<count>", set by `serve` for its worker processes
# The manager's id (`ManagerContext.manager_id`), set by `serve` so that its workers share it.
MANAGER_ID_ENV = "SOKOVAN_MANAGER_ID"


def manager_id() -> str:
    """This manager's id: the one `serve` handed to its workers, else this process's own."""
    return os.environ.get(MANAGER_ID_ENV) or f"{socket.gethostname()}-{os.getpid()}"


def worker_of(value: str | None) -> tuple[int, int]:
    """(index, count) from `WORKER_ENV`; (0, 1) for a manager of one process or a bad value."""
    index, _, count = (value or "").partition("/")
    if index.isdigit() and count.isdigit() and 0 <= int(index) < int(count):
        return int(index), int(count)
    return 0, 1


async def run_manager(
    settings: Settings, stop: asyncio.Event | None = None, *, reuse_port: bool = False
) -> None:
    if not settings.cluster_secret:
        raise ManagerFailed("SOKOVAN_CLUSTER_SECRET is not set")
    stop = stop or asyncio.Event()
    engine = make_engine(
        settings.db_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
    )
    redis = aioredis.Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT,
        socket_timeout=REDIS_TIMEOUT,
        socket_keepalive=True,
    )
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port, timeout=ETCD_TIMEOUT)
    config = ClusterConfig()
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, config)
    try:
        if await _wait_for_services(engine, redis, watcher, stop):
            await _serve_until_stopped(settings, stop, engine, redis, etcd, config, watcher, reuse_port)
    finally:
        await redis.aclose()
        await etcd.close()
        await engine.dispose()
        log.info("manager.stopped")


async def _wait_for_services(
    engine: AsyncEngine, redis: aioredis.Redis, watcher: EtcdConfigWatcher, stop: asyncio.Event
) -> bool:
    """Wait until PostgreSQL, Redis and etcd answer (the cluster config loaded); False when stopped
    first. An error that is not an outage is `ManagerFailed`."""

    async def postgres() -> None:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    probes: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("postgres", postgres),
        ("redis", redis.ping),
        ("etcd", watcher.load),
    ]
    for name, probe in probes:
        try:
            await wait_for_service(name, probe, stop)
        except Exception as exc:
            raise ManagerFailed(f"cannot start: {name}: {describe(exc)}") from exc
        if stop.is_set():
            return False
    return True


async def _serve_until_stopped(
    settings: Settings,
    stop: asyncio.Event,
    engine: AsyncEngine,
    redis: aioredis.Redis,
    etcd: aetcd.Client,
    config: ClusterConfig,
    watcher: EtcdConfigWatcher,
    reuse_port: bool,
) -> None:
    assert settings.cluster_secret is not None
    rpc = AgentRPCClient(settings.cluster_secret)
    hints = HintPublisher(redis, settings.etcd_prefix)
    events = UserEventPublisher(redis, settings.etcd_prefix)
    peers, postgres_probe = manager_peers(settings.db_url, redis, etcd)
    ctx = ManagerContext(settings, engine, redis, etcd, hints, rpc, manager_id=manager_id(), peers=peers)
    # Replicas are created and ended through the same controller as the API's sessions.
    replicas = ControllerReplicas(SchedulingController(ctx, config), engine)
    watch = Watch()  # whether the agents' reports reach this manager: the consumer feeds it
    orchestrator = SokovanOrchestrator(
        engine,
        rpc,
        config,
        events,
        backlog=functools.partial(consumer_backlog, redis, settings.etcd_prefix),
        serving=Serving(RoutingBus(redis, settings.etcd_prefix, settings.cluster_secret), replicas),
        publish=hints.hint,
        worker=worker_of(os.environ.get(WORKER_ENV)),
        watch=watch,
        manager_id=ctx.manager_id,
    )
    # One consumer per stream, both in the managers' group, under this process's name, applying
    # through the same dispatcher: the agents' events as they come, their heartbeats in batches.
    consumer_of = functools.partial(
        EventConsumer,
        redis,
        settings.etcd_prefix,
        settings.cluster_secret,
        consumer=f"{socket.gethostname()}-{os.getpid()}",
        handler=EventDispatcher(engine, hints, events, follow=orchestrator.follow_kernels),
        on_read=watch.report,
    )
    consumer = consumer_of(beat_window=BEAT_WINDOW)
    beats = consumer_of(key=beats_key(settings.etcd_prefix), pace=BEATS_PACE)
    answered = consumer_of(
        key=answered_key(settings.etcd_prefix),
        delay=ANSWERED_DELAY,
        keep=functools.partial(unmarked, redis, settings.etcd_prefix),
    )
    runner = web.AppRunner(create_app(ctx, config), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.api_host, settings.api_port, reuse_port=reuse_port or None)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await rpc.close()
        raise ManagerFailed(f"cannot listen on {settings.api_bind}: {describe(exc)}") from exc
    log.info("manager.started", api=f"http://{settings.api_bind}")
    background: dict[str, Callable[[asyncio.Event], Awaitable[None]]] = {
        "orchestrator": orchestrator.run,
        "event-consumer": consumer.run,
        "heartbeat-consumer": beats.run,
        "answered-consumer": answered.run,
        "config-watcher": watcher.run,
        "hints": functools.partial(listen_hints, redis, settings.etcd_prefix, _on_hint(ctx, orchestrator)),
        "peer-watch": peers.run,
    }
    tasks = [asyncio.create_task(supervise(name, run, stop), name=name) for name, run in background.items()]
    orchestrator.hint(Hint.SCHEDULE)  # pick up whatever was left in flight before a restart
    failure: BaseException | None = None
    try:
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        failure = next((t.exception() for t in done if t is not stopper and t.exception()), None)
        if failure is not None:
            log.error("manager.task_failed", error=describe(failure))
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await runner.cleanup()
        await rpc.close()
        await postgres_probe.close()
    if isinstance(failure, TaskFailed):
        raise ManagerFailed(str(failure)) from failure
    if failure is not None:
        raise ManagerFailed(describe(failure)) from failure


def _on_hint(ctx: ManagerContext, orchestrator: SokovanOrchestrator) -> Callable[[str], None]:
    """Hints wake the orchestrator's loops; `ADMISSION` drops the API's admission caches."""

    def on_hint(name: str) -> None:
        if name == Hint.ADMISSION:
            ctx.admission.bump()
        orchestrator.hint(name)

    return on_hint


def serve(settings: Settings, workers: int = 1, reuse_port: bool = False) -> None:
    """Run the manager; with `workers > 1`, as that many processes sharing the API port.

    Every worker is a whole manager (API, orchestrator, event consumer): the coordinator lanes are
    guarded by cluster-wide locks, events are shared out by the consumer group and hints reach every
    worker, so N workers behave as one manager that uses N cores (and share its id, under which
    the limits on its event streams are counted).
    """
    children: list[subprocess.Popen[bytes]] = []
    if workers > 1:
        os.environ[MANAGER_ID_ENV] = manager_id()
        args = [sys.executable, "-m", "sokovan", "manager", "--workers", "1", "--reuse-port"]
        children = [
            subprocess.Popen(
                args, env={**os.environ, WORKER_ENV: f"{i}/{workers}"}, preexec_fn=die_with_parent
            )
            for i in range(1, workers)
        ]
        os.environ[WORKER_ENV] = f"0/{workers}"
        reuse_port = True

    failed: list[str] = []

    async def watch_children(stop: asyncio.Event) -> None:
        """A worker that exits on its own (a failure it could not ride out) stops them all."""
        while not stop.is_set():
            for child in children:
                code = child.poll()
                if code is not None:
                    failed.append(f"worker {child.pid} exited with status {code}")
                    stop.set()
                    return
            await asyncio.sleep(1.0)

    async def main() -> None:
        stop = stop_on_signals()
        watcher = asyncio.create_task(watch_children(stop))
        try:
            await run_manager(settings, stop, reuse_port=reuse_port)
        finally:
            watcher.cancel()

    try:
        eventloop.run(main())
        if failed:
            raise ManagerFailed(failed[0])
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
