"""A daemon's stop leaves no error-level noise: an agent's config watcher, cancelled at shutdown
(`HeartbeatTiming.follow`), used to leave its pending read of the etcd watch to end with
StopAsyncIteration, which asyncio logged as "Task exception was never retrieved" on every
Ctrl-C of `sokovan dev`."""

from __future__ import annotations

import asyncio
import gc
import uuid
from typing import Any

import aetcd

from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher
from tests import services


async def test_a_cancelled_config_watcher_leaves_no_unretrieved_task() -> None:
    loop = asyncio.get_running_loop()
    # The loop is shared by the whole session: what an earlier test left pending is destroyed (and
    # reported) now, before this test starts listening, so that only this test's tasks count.
    gc.collect()
    await asyncio.sleep(0)
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    settings = Settings(etcd=services.etcd_addr())
    client = aetcd.Client(host=settings.etcd_host, port=settings.etcd_port)
    try:
        watcher = EtcdConfigWatcher(client, f"sokovan-test-dev-{uuid.uuid4().hex[:8]}", ClusterConfig())
        for _ in range(3):  # as the agent runs it: a stop event nobody sets, then cancelled
            task = asyncio.create_task(watcher.run(asyncio.Event()))
            await asyncio.sleep(0.3)  # loaded and watching
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _ in range(5):
            await asyncio.sleep(0.05)
            gc.collect()
    finally:
        await client.close()
        gc.collect()
        await asyncio.sleep(0)
        loop.set_exception_handler(previous)
    assert not reported, [c.get("message") for c in reported]
