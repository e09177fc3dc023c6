"""Black-box: a manager restarted while sessions run loses nothing."""

from __future__ import annotations

import aiohttp

from tests.e2e.cluster import Client, Cluster


async def test_running_sessions_survive_a_manager_restart(cluster: Cluster, admin: Client) -> None:
    s = await admin.create(image="shell", type="interactive", resources={"cpu": 1, "mem": "64m"})
    await admin.wait_status(s["id"], {"RUNNING"})
    cluster.stop_manager()
    cluster.start_manager()
    async with aiohttp.ClientSession() as http:
        client = Client(http, cluster.api, cluster.token)
        after = await client.get(s["id"])
        assert after["status"] == "RUNNING"
        assert after["kernels"][0]["status"] == "RUNNING"
        status, _ = await client.request("DELETE", f"/v2/sessions/{s['id']}")
        assert status == 202
        done = await client.wait_status(s["id"], {"TERMINATED", "ERROR"})
        assert (done["status"], done["status_info"]["cause"]) == ("TERMINATED", "USER_CANCELLED")
        # And new sessions still run to the end after the restart.
        batch = await client.create(image="python:3", type="batch", command="python3 -c 'print(6*7)'")
        finished = await client.wait_status(batch["id"], {"TERMINATED", "ERROR"})
        assert finished["result"] == "SUCCESS"
