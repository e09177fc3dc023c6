"""The service endpoints of a hollow fleet's inference kernels, answered on the fleet's RPC port.

A hollow kernel runs no server; so that deployments can run on a hollow fleet (and benchmarks can
send traffic through the app proxy), the fleet answers for every live hollow inference kernel at
`http://<host>:<fleet port>/kernels/<kernel_id>`: `GET …/health` is 200 `{"ok": true}`, any other
method or path under it 200 with `{"kernel_id", "method", "path"}`; a kernel that is not alive on
this fleet is 404. These are service endpoints, not RPC: unsigned, and they read nothing but the set
of live kernels, so they can neither start nor stop anything.
"""

from __future__ import annotations

from aiohttp import web

from sokovan.agent.service_ports import service_host


class HollowServices:
    """The fleet's live inference kernels (kernel id → agent id) and the HTTP routes that serve them."""

    def __init__(self) -> None:
        self._base = ""
        self._live: dict[str, str] = {}

    def bind(self, rpc_host: str, port: int) -> None:
        """Set the base URL once the fleet's RPC server listens on `port`."""
        self._base = f"http://{service_host(rpc_host)}:{port}/kernels/"

    def add(self, kernel_id: str, agent_id: str) -> str:
        """Serve `kernel_id` (run by `agent_id`); its service address."""
        self._live[kernel_id] = agent_id
        return self._base + kernel_id

    def discard(self, kernel_id: str, agent_id: str) -> None:
        if self._live.get(kernel_id) == agent_id:
            del self._live[kernel_id]

    def __contains__(self, kernel_id: object) -> bool:
        return kernel_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/kernels/{kernel_id}/health", self._health)
        app.router.add_route("*", "/kernels/{kernel_id}", self._serve)
        app.router.add_route("*", "/kernels/{kernel_id}/{tail:.*}", self._serve)

    async def _health(self, request: web.Request) -> web.Response:
        if request.match_info["kernel_id"] not in self._live:
            return _unknown(request)
        return web.json_response({"ok": True})

    async def _serve(self, request: web.Request) -> web.Response:
        kernel_id = request.match_info["kernel_id"]
        if kernel_id not in self._live:
            return _unknown(request)
        await request.read()  # take the body, as a server would
        path = "/" + request.match_info.get("tail", "")
        return web.json_response({"kernel_id": kernel_id, "method": request.method, "path": path})


def _unknown(request: web.Request) -> web.Response:
    kernel_id = request.match_info["kernel_id"]
    return web.json_response({"error": f"no live kernel {kernel_id!r} on this fleet"}, status=404)
