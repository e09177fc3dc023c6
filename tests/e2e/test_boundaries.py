"""Black-box: tokens, ownership, the agent RPC secret, and bad input that must write nothing."""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.db.models import Agent, AuditLog, Kernel, Session
from tests.e2e.cluster import Client, Cluster, process_alive_with_env


async def counts(db_url: str) -> tuple[int, int, int]:
    engine = create_async_engine(db_url)
    async with engine.connect() as conn:
        result = tuple(
            [
                int(await conn.scalar(select(func.count()).select_from(t)) or 0)
                for t in (Session, Kernel, AuditLog)
            ]
        )
    await engine.dispose()
    return result  # type: ignore[return-value]


async def test_bad_input_is_a_problem_and_writes_nothing(admin: Client, db_url: str) -> None:
    before = await counts(db_url)
    cases = [
        {"image": "python:3", "type": "batch", "command": "true", "resources": {"cpu": "abc"}},
        {"image": "no-such-image:1", "type": "batch", "command": "true"},
        {"image": "python:3", "type": "batch"},
        {"image": "python:3", "type": "batch", "command": "true", "resources": {"cpu": 1000}},
        {"image": "python:3", "type": "batch", "command": "true", "scaling_group": "nope"},
        {"image": "python:3", "type": "nonsense", "command": "true"},
    ]
    for body in cases:
        status, problem = await admin.request("POST", "/v2/sessions", body)
        assert 400 <= status < 500, (body, status, problem)
        assert {"type", "title", "status", "detail"} <= set(problem), problem
    status, problem = await admin.request("POST", "/v2/sessions", raw=b"{not json")
    assert 400 <= status < 500 and problem["status"] == status
    assert await counts(db_url) == before


async def test_tokens_and_ownership(cluster: Cluster, admin: Client) -> None:
    async with aiohttp.ClientSession() as http:
        anonymous = Client(http, cluster.api, None)
        status, problem = await anonymous.request("GET", "/v2/sessions")
        assert status == 401 and problem["status"] == 401
        forged = Client(http, cluster.api, "not-a-token")
        assert (await forged.request("GET", "/v2/sessions"))[0] == 401

        status, keys = await admin.request(
            "POST", "/v2/keypairs", {"user": "bob", "project": "team-b", "role": "user"}
        )
        assert status == 201, keys
        bob = Client(http, cluster.api, keys["token"])
        assert (await bob.request("POST", "/v2/keypairs", {"user": "eve", "project": "x", "role": "admin"}))[
            0
        ] == 403

        mine = await admin.create(image="shell", type="interactive", resources={"cpu": 1, "mem": "64m"})
        for method, path in [
            ("GET", f"/v2/sessions/{mine['id']}"),
            ("DELETE", f"/v2/sessions/{mine['id']}"),
            ("GET", f"/v2/sessions/{mine['id']}/logs"),
            ("GET", f"/v2/sessions/{mine['id']}/history"),
            ("GET", f"/v2/sessions/{uuid.uuid4()}"),
        ]:
            status, problem = await bob.request(method, path)
            assert status == 404, (method, path, status, problem)
        status, listing = await bob.request("GET", "/v2/sessions")
        assert status == 200 and listing["items"] == []
        assert (await admin.get(mine["id"]))["status"] != "TERMINATING"
        await admin.request("DELETE", f"/v2/sessions/{mine['id']}?forced=true")
        await admin.wait_status(mine["id"], {"TERMINATED", "CANCELLED"})


async def test_agent_rpc_without_the_cluster_secret_starts_nothing(cluster: Cluster, db_url: str) -> None:
    engine = create_async_engine(db_url)
    async with engine.connect() as conn:
        rpc_addr = await conn.scalar(select(Agent.rpc_addr).limit(1))
    await engine.dispose()
    kernel_id = str(uuid.uuid4())
    body = json.dumps(
        {
            "kernels": [
                {
                    "kernel_id": kernel_id,
                    "session_id": str(uuid.uuid4()),
                    "image": "shell",
                    "command": "sleep 30",
                    "session_type": "batch",
                }
            ]
        }
    ).encode()
    async with aiohttp.ClientSession() as http:
        for headers in (
            {},
            {"X-Sokovan-Timestamp": "1", "X-Sokovan-Signature": "0" * 64},
        ):
            async with http.post(f"http://{rpc_addr}/rpc/create_kernels", data=body, headers=headers) as resp:
                assert resp.status == 401
    await asyncio.sleep(0.5)
    assert not process_alive_with_env(f"SOKOVAN_KERNEL_ID={kernel_id}")


async def test_an_agent_kernel_limit_reaches_the_scheduler(cluster: Cluster, db_url: str) -> None:
    cluster.start_agent("e2e-limited", slots="cpu=8,mem=2g", extra=("--max-kernels", "1"))
    engine = create_async_engine(db_url)
    try:
        for _ in range(100):
            async with engine.connect() as conn:
                limit = await conn.scalar(select(Agent.max_kernels).where(Agent.id == "e2e-limited"))
            if limit is not None:
                break
            await asyncio.sleep(0.1)
    finally:
        proc = cluster.agents.pop("e2e-limited")
        proc.terminate()
        proc.wait(timeout=20)
        # Until node lifecycle lands a stopped agent stays READY: leave no room on it behind.
        async with engine.begin() as conn:
            await conn.execute(delete(Agent).where(Agent.id == "e2e-limited"))
        await engine.dispose()
    assert limit == 1
