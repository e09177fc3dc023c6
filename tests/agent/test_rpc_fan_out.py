"""The agent RPC client calls many agents at once: a lane that fans out to a thousand agents must
not be held to aiohttp's default of a hundred connections (the sessions of the other nine hundred
agents would wait for earlier calls to end)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from sokovan.common.rpc import AgentRPCClient, CheckAndPullRequest, rpc_path
from tests.support import signed_answer

CALLS = 300


async def test_hundreds_of_calls_are_in_flight_together() -> None:
    in_flight = 0
    peak = 0
    everyone = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if peak >= CALLS:
            everyone.set()
        try:
            await asyncio.wait_for(everyone.wait(), 30)  # held until all arrived (or gave up)
        except TimeoutError:
            pass
        in_flight -= 1
        return signed_answer("secret", request, {})

    app = web.Application()
    app.router.add_post(rpc_path("check_and_pull"), handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = AgentRPCClient("secret", timeout=60)  # a busy machine may take seconds to open 300 connections
    try:
        request = CheckAndPullRequest(kernels=[])
        await asyncio.gather(
            *(client.call(f"127.0.0.1:{port}", "check_and_pull", request, f"a{i}") for i in range(CALLS))
        )
    finally:
        await client.close()
        await runner.cleanup()
    assert peak == CALLS
