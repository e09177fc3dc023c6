"""Black-box: retry defaults set live through the CLI, and retries that survive managers dying.

Own module, so its cluster (and the cluster retry default it changes) is its own."""

from __future__ import annotations

import asyncio
import json
import subprocess

import aiohttp

from sokovan.harness import SOKOVAN, ManagerProc
from tests.e2e.cluster import Client, Cluster
from tests.e2e.test_retry import chain_of


def cli(cluster: Cluster, *args: str) -> str:
    env = {**cluster.env, "SOKOVAN_API": cluster.api, "SOKOVAN_TOKEN": cluster.token}
    done = subprocess.run([*SOKOVAN, *args], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def failing(admin: Client, **extra: object) -> str:
    s = await admin.create(
        image="shell", type="batch", command="exit 1", resources={"cpu": 1, "mem": "64m"}, **extra
    )
    return str(s["id"])


async def test_defaults_set_live_cluster_then_project_then_session(cluster: Cluster, admin: Client) -> None:
    cli(
        cluster,
        "config",
        "retry-default",
        "set",
        json.dumps({"max_retries": 1, "retry_delay": 0.2, "jitter": "none"}),
    )
    assert json.loads(cli(cluster, "config", "retry-default", "get"))["max_retries"] == 1
    by_cluster = await failing(admin)  # no restart: the next failure follows the new default
    assert len(await chain_of(admin, by_cluster, 2)) == 2
    status, _ = await admin.request(
        "PUT", "/v2/projects/default", {"retry_policy_default": {"max_retries": 2}}
    )
    assert status == 200
    by_project = await failing(admin)
    assert len(await chain_of(admin, by_project, 3)) == 3
    by_session = await failing(admin, retry_policy={"max_retries": 0})
    await asyncio.sleep(2.5)
    assert len(await chain_of(admin, by_session, 1)) == 1
    await admin.request("PUT", "/v2/projects/default", {"retry_policy_default": None})
    cli(cluster, "config", "retry-default", "set", json.dumps({"max_retries": 0}))


async def test_a_retry_survives_its_manager_being_killed_during_the_delay(
    cluster: Cluster, admin: Client
) -> None:
    sid = await failing(admin, retry_policy={"max_retries": 1, "retry_delay": 3, "jitter": "none"})
    for _ in range(100):  # wait until the retry is decided (scheduled), then kill the manager
        if "due at" in (await admin.get(sid))["retry_state"]:
            break
        await asyncio.sleep(0.1)
    cluster.manager.kill()
    cluster.start_manager()
    async with aiohttp.ClientSession() as http:
        client = Client(http, cluster.api, cluster.token)
        await chain_of(client, sid, 2)
        await asyncio.sleep(2.5)
        assert len(await chain_of(client, sid, 2)) == 2  # exactly once


async def test_two_managers_create_exactly_one_child_per_failure(cluster: Cluster, admin: Client) -> None:
    second = ManagerProc(cluster.env, cluster.workdir, "manager-2")
    second.start()
    try:
        await asyncio.sleep(2)
        ids = [
            await failing(admin, retry_policy={"max_retries": 1, "retry_delay": 0.3, "jitter": "none"})
            for _ in range(10)
        ]
        for sid in ids:
            assert len(await chain_of(admin, sid, 2)) == 2
        await asyncio.sleep(2.5)
        for sid in ids:
            assert len(await chain_of(admin, sid, 2)) == 2
    finally:
        second.terminate()
        try:
            second.wait(timeout=20)
        finally:
            if second.running:
                second.kill()
