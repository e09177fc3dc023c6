"""`sokovan manager`: the REST v2 API and the SokovanOrchestrator in one process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import subprocess
import sys

import aetcd
import redis.asyncio as aioredis
import structlog
from aiohttp import web

from sokovan.bus.hints import Hint, HintPublisher, listen_hints
from sokovan.bus.routing import RoutingBus
from sokovan.bus.streams import EventConsumer, consumer_backlog
from sokovan.bus.user_events import UserEventPublisher
from sokovan.common.lifecycle import stop_on_signals
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher
from sokovan.db.engine import make_engine
from sokovan.manager.api.app import create_app
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.replica_sessions import ControllerReplicas
from sokovan.manager.controller.scheduling_controller import SchedulingController
from sokovan.manager.event_dispatch import EventDispatcher
from sokovan.orchestrator.orchestrator import Serving, SokovanOrchestrator

log = structlog.get_logger(__name__)


async def run_manager(
    settings: Settings, stop: asyncio.Event | None = None, *, reuse_port: bool = False
) -> None:
    if not settings.cluster_secret:
        raise RuntimeError("SOKOVAN_CLUSTER_SECRET is not set")
    stop = stop or asyncio.Event()
    engine = make_engine(
        settings.db_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow
    )
    redis = aioredis.Redis.from_url(settings.redis_url)
    etcd = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    rpc = AgentRPCClient(settings.cluster_secret)
    hints = HintPublisher(redis, settings.etcd_prefix)
    config = ClusterConfig()
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, config)
    await watcher.load()
    events = UserEventPublisher(redis, settings.etcd_prefix)
    ctx = ManagerContext(settings=settings, engine=engine, redis=redis, etcd=etcd, hints=hints, rpc=rpc)
    # Replicas are created and ended through the same controller as the API's sessions.
    replicas = ControllerReplicas(SchedulingController(ctx, config), engine)
    orchestrator = SokovanOrchestrator(
        engine,
        rpc,
        config,
        events,
        backlog=functools.partial(consumer_backlog, redis, settings.etcd_prefix),
        serving=Serving(RoutingBus(redis, settings.etcd_prefix, settings.cluster_secret), replicas),
    )
    consumer = EventConsumer(
        redis,
        settings.etcd_prefix,
        settings.cluster_secret,
        consumer=f"{socket.gethostname()}-{os.getpid()}",
        handler=EventDispatcher(engine, hints, events),
    )
    runner = web.AppRunner(create_app(ctx, config), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.api_host, settings.api_port, reuse_port=reuse_port or None)
    await site.start()
    log.info("manager.started", api=f"http://{settings.api_bind}")
    tasks = [
        asyncio.create_task(orchestrator.run(stop), name="orchestrator"),
        asyncio.create_task(consumer.run(stop), name="event-consumer"),
        asyncio.create_task(watcher.run(stop), name="config-watcher"),
        asyncio.create_task(listen_hints(redis, settings.etcd_prefix, orchestrator.hint, stop), name="hints"),
    ]
    orchestrator.hint(Hint.SCHEDULE)  # pick up whatever was left in flight before a restart
    try:
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopper and task.exception() is not None:
                log.error("manager.task_failed", task=task.get_name(), error=repr(task.exception()))
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        await runner.cleanup()
        await rpc.close()
        await redis.aclose()
        await etcd.close()
        await engine.dispose()
        log.info("manager.stopped")


def serve(settings: Settings, workers: int = 1, reuse_port: bool = False) -> None:
    """Run the manager; with `workers > 1`, as that many processes sharing the API port.

    Every worker is a whole manager (API, orchestrator, event consumer): the coordinator lanes are
    guarded by cluster-wide locks, events are shared out by the consumer group and hints reach every
    worker, so N workers behave as one manager that uses N cores.
    """
    children: list[subprocess.Popen[bytes]] = []
    if workers > 1:
        args = [sys.executable, "-m", "sokovan", "manager", "--workers", "1", "--reuse-port"]
        children = [subprocess.Popen(args) for _ in range(workers - 1)]
        reuse_port = True

    async def main() -> None:
        await run_manager(settings, stop_on_signals(), reuse_port=reuse_port)

    try:
        asyncio.run(main())
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
