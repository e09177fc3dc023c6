"""Cluster settings in real etcd: applied live, invalid values ignored whole."""

from __future__ import annotations

import asyncio
import json

import aetcd
import pytest
from pydantic import ValidationError

from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.settings import Settings
from sokovan.config.cluster import ClusterConfig, EtcdConfigWatcher, validate_section


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


async def test_retry_default_and_kill_switch_apply_live(etcd: aetcd.Client, settings: Settings) -> None:
    """Native session retry: `manager/retry_policy_default` (a bare RetryPolicy object) and
    `manager/retry_enabled` (JSON true/false), written straight to etcd as with etcdctl."""
    policy_key = f"{settings.etcd_prefix}/config/manager/retry_policy_default".encode()
    switch_key = f"{settings.etcd_prefix}/config/manager/retry_enabled".encode()
    config = ClusterConfig()
    assert (config.retry_policy_default.max_retries, config.retry_enabled) == (0, True)  # shipped defaults
    await etcd.put(policy_key, json.dumps({"max_retries": 2, "backoff": "exponential"}).encode())
    watcher = EtcdConfigWatcher(etcd, settings.etcd_prefix, config)
    await watcher.load()
    assert config.retry_policy_default.max_retries == 2
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        # No sleep: a change made while the watcher starts is not lost.
        await etcd.put(switch_key, b"false")
        await wait_for(lambda: config.retry_enabled is False)
        await etcd.put(policy_key, json.dumps({"max_retries": 5, "retry_delay": 1}).encode())
        await wait_for(lambda: config.retry_policy_default.max_retries == 5)
        assert config.retry_policy_default.backoff == "fixed"  # whole object: omitted fields at defaults
        # Invalid values: a ratio out of range, a never-retried cause, a delay over 24 h, a string
        # for the switch. Each is ignored with a logged error; the last valid value stays.
        for bad in (
            {"jitter_ratio": 2},
            {"eligible_causes": ["USER_CANCELLED"]},
            {"retry_delay": 90000},
            {"max_retries": -1},
        ):
            await etcd.put(policy_key, json.dumps(bad).encode())
        await etcd.put(switch_key, b'"true"')
        await etcd.put(switch_key, b"1")
        loops_key = f"{settings.etcd_prefix}/config/manager/loops".encode()
        await etcd.put(loops_key, json.dumps({"long_cycle_interval": 0.7}).encode())
        await wait_for(lambda: config.loops.long_cycle_interval == 0.7)
        assert config.retry_policy_default.max_retries == 5 and config.retry_enabled is False
        await etcd.put(switch_key, b"true")
        await wait_for(lambda: config.retry_enabled is True)
        await etcd.put(switch_key, b"false")
        await wait_for(lambda: config.retry_enabled is False)
        await etcd.delete(switch_key)  # deleted: back to the default, enabled
        await etcd.delete(policy_key)
        await wait_for(lambda: config.retry_enabled is True and config.retry_policy_default.max_retries == 0)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


def test_validate_section_for_writers() -> None:
    assert validate_section("manager/retry_policy_default", {"max_retries": 1}) == RetryPolicy(max_retries=1)
    assert validate_section("manager/retry_enabled", False) is False
    with pytest.raises(ValidationError):
        validate_section("manager/retry_policy_default", {"jitter_ratio": -1})
    with pytest.raises(ValidationError):
        validate_section("manager/retry_enabled", "no")
    with pytest.raises(ValueError):
        validate_section("manager/nope", {})
