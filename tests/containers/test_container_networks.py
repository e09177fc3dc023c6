"""What a kernel on a session network can reach: its session's peers, not the host's listeners
(wildcard-bound ones included), not another session's kernels; and a deployment served from an
image through the proxy as with the process backend."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.containers.support import containers_of, until
from tests.e2e.cluster import Client, Cluster

SERVER = "python3 -m http.server $PORT --bind 0.0.0.0"
HEALTH = {"path": "/", "interval": 1, "timeout": 1, "healthy_threshold": 1, "unhealthy_threshold": 3}


@pytest.fixture
def wildcard_listener() -> Iterator[int]:
    """A TCP listener of the host on 0.0.0.0 (as an agent bound to every address would be)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def host_addresses() -> list[str]:
    addrs = {"127.0.0.1"}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: only picks the outgoing address
            addrs.add(probe.getsockname()[0])
        except OSError:
            pass
    return sorted(addrs)


async def serve(api: Client, name: str) -> dict[str, Any]:
    body = {
        "name": name,
        "type": "custom",
        "replicas": 1,
        "image": "python:3",
        "command": SERVER,
        "resources": {"cpu": 0.5, "mem": "128m"},
        "health_check": HEALTH,
        "open_to_public": True,  # this test is about networks, not the proxy's tokens
    }
    status, data = await api.request("POST", "/v2/deployments", body)
    assert status == 201, data

    async def healthy() -> list[dict[str, Any]] | None:
        _status, routes = await api.request("GET", f"/v2/deployments/{data['id']}/routes")
        items = [r for r in routes["items"] if r["status"] == "HEALTHY"]
        return items or None

    routes = await until(healthy, "a HEALTHY route", within=90)
    return {"deployment": data, "route": routes[0]}


async def test_a_deployment_in_an_image_serves_and_is_out_of_other_kernels_reach(
    admin: Client, cluster: Cluster, wildcard_listener: int
) -> None:
    served = await serve(admin, "ctr-web")
    assert cluster.proxy is not None
    async with aiohttp.ClientSession() as http:

        async def through_proxy() -> bool:
            async with http.get(f"{cluster.proxy.url}/ctr-web/") as resp:
                return resp.status == 200 and "Directory listing" in await resp.text()

        assert await until(through_proxy, "an answer through the proxy", within=30)

    replica = await admin.get(served["route"]["session_id"])
    kernel_id = replica["kernels"][0]["id"]
    [container] = await containers_of(kernel_id)
    networks = container["NetworkSettings"]["Networks"]
    replica_ip = next(iter(networks.values()))["IPAddress"]
    assert replica_ip

    targets = [f"{addr}:{wildcard_listener}" for addr in host_addresses()]
    targets += [
        f"host.containers.internal:{wildcard_listener}",
        f"{replica_ip}:{replica['kernels'][0]['service_addr'].rsplit(':', 1)[1]}",
    ]
    probe = " ".join(targets)
    # main1 probes; sub1 (which only gives the session its network) idles until the session ends
    command = (
        'if [ "$SOKOVAN_CLUSTER_ROLE" = sub ]; then exec sleep 60; fi; '
        f"for t in {probe}; do h=${{t%:*}}; p=${{t##*:}}; "
        "if echo | nc -w 2 $h $p >/dev/null 2>&1; then echo REACHED $t; else echo blocked $t; fi; done; "
        "ps -o args | grep -c '[h]ttp[.]server'; true"
    )
    created = await admin.create(
        image="python:3",
        type="batch",
        command=command,
        cluster_size=2,
        resources={"cpu": 0.25, "mem": "64m"},
    )
    session = await admin.wait_status(created["id"], {"TERMINATED", "ERROR"}, within=90)
    status, data = await admin.request("GET", f"/v2/sessions/{created['id']}/logs")
    assert session["result"] == "SUCCESS", (session["status_info"], data)
    outputs = [item["stdout"] for item in data["items"] if item["stdout"]]
    assert len(outputs) == 1, data  # main1's
    for stdout in outputs:
        assert "REACHED" not in stdout, stdout
        assert stdout.count("blocked") == len(targets), stdout
        assert stdout.strip().splitlines()[-1] == "0", stdout  # the replica's command line is not seen

    status, _ = await admin.request("DELETE", f"/v2/deployments/{served['deployment']['id']}")
    assert status == 202

    async def gone() -> bool:
        return await containers_of(kernel_id) == []

    assert await until(gone, "the replica's container removed", within=60)
    await asyncio.sleep(0)
