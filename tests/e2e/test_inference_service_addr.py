"""Black-box: an inference session on a real process agent serves HTTP where its kernel's
`service_addr` (on GET /v2/sessions/{id}) says."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.e2e.cluster import Client

SERVER = "exec python3 -m http.server $PORT --bind 127.0.0.1"


async def test_inference_kernel_answers_on_its_service_addr(admin: Client) -> None:
    s = await admin.create(
        image="python:3", type="inference", command=SERVER, resources={"cpu": 1, "mem": "128m"}
    )
    running = await admin.wait_status(s["id"], {"RUNNING"})
    addr = running["kernels"][0]["service_addr"]
    assert addr is not None and addr.startswith("http://127.0.0.1:")
    async with aiohttp.ClientSession() as http, asyncio.timeout(15):
        while True:
            try:
                async with http.get(addr + "/") as resp:
                    assert resp.status == 200
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
    status, _ = await admin.request("DELETE", f"/v2/sessions/{s['id']}")
    assert status == 202
    done = await admin.wait_status(s["id"], {"TERMINATED", "ERROR", "CANCELLED"})
    assert done["kernels"][0]["service_addr"] == addr  # kept as a record after the end
