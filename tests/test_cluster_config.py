"""Cluster settings in real etcd: applied live, invalid values ignored whole."""

from __future__ import annotations

import asyncio
import json

import aetcd

from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher


async def wait_for(predicate: object, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_watcher_applies_changes_live_and_ignores_invalid_values(
    etcd: aetcd.Client, settings: Settings
) -> None:
    key = f"{settings.etcd_prefix}/config/manager/phases".encode()
    await etcd.put(key, json.dumps({"prepare": {"timeout": 5, "max_tries": 2}}).encode())
    config = ClusterConfig()
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, config)
    await watcher.load()
    assert config.phases.prepare.max_tries == 2
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await asyncio.sleep(0.3)
        await etcd.put(key, json.dumps({"prepare": {"timeout": 9, "max_tries": 7}}).encode())
        await wait_for(lambda: config.phases.prepare.max_tries == 7)
        # Invalid: negative timeout on one phase. Nothing of it is applied.
        await etcd.put(
            key,
            json.dumps(
                {"start": {"timeout": 1, "max_tries": 1}, "prepare": {"timeout": -1, "max_tries": 1}}
            ).encode(),
        )
        loops_key = f"{settings.etcd_prefix}/config/manager/loops".encode()
        await etcd.put(loops_key, json.dumps({"long_cycle_interval": 0.5}).encode())
        await wait_for(lambda: config.loops.long_cycle_interval == 0.5)
        assert config.phases.prepare.max_tries == 7
        assert config.phases.start.max_tries == 3
        await etcd.put(loops_key, b"not json")
        await etcd.delete(key)
        await wait_for(lambda: config.phases.prepare.max_tries == 3)
        assert config.loops.long_cycle_interval == 0.5
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
