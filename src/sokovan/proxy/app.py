"""The proxy's HTTP application: its own `GET /healthz` and `GET /metrics`, everything else forwarded.

`/healthz` and `/metrics` (exactly these paths, GET/HEAD) are the proxy's; any other path, including
`/healthz/...`, is `/<deployment>/<rest>` for the `Forwarder`.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from sokovan.common.metrics import CONTENT_TYPE
from sokovan.proxy import metrics
from sokovan.proxy.forward import Forwarder


def create_app(forwarder: Forwarder, status: Callable[[], dict[str, object]]) -> web.Application:
    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True, **status()})

    async def metrics_handler(request: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_handler)
    app.router.add_route("*", "/{tail:.*}", forwarder.handle)
    return app
