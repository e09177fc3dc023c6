"""The agent's client on its engine: one connection per live kernel is held by that kernel's wait,
so the connector has no cap (aiodocker's default pool of 100 would starve the 101st kernel).

aiodocker leaves a connector it was given open at `close()`; `close_client` closes both. A call
the engine leaves unanswered fails after `REQUEST_TIMEOUT` instead of holding the agent."""

from __future__ import annotations

import aiodocker
import aiohttp

from sokovan.images.engine import REQUEST_TIMEOUT, EngineError


def agent_client(url: str) -> aiodocker.Docker:
    """A client on `url` (`unix:///path` or `tcp://host:port`) whose pool is unbounded."""
    if url.startswith("unix://"):
        connector: aiohttp.BaseConnector = aiohttp.UnixConnector(path=url.removeprefix("unix://"), limit=0)
        return aiodocker.Docker(
            url="unix://localhost", connector=connector, timeout=REQUEST_TIMEOUT
        )  # the host only names it
    if url.startswith(("tcp://", "http://")):
        address = "http://" + url.removeprefix("tcp://").removeprefix("http://")
        return aiodocker.Docker(url=address, connector=aiohttp.TCPConnector(limit=0), timeout=REQUEST_TIMEOUT)
    raise EngineError(f"engine address {url!r} is neither unix:///path nor tcp://host:port")


async def close_client(docker: aiodocker.Docker) -> None:
    await docker.close()
    await docker.connector.close()
