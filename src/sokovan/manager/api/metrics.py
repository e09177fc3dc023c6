"""`GET /metrics`: the default Prometheus registry (with `sokovan.common.metrics`), unauthenticated."""

from __future__ import annotations

from aiohttp import web

from sokovan.common import metrics as sokovan_metrics
from sokovan.manager.api.openapi import Route


async def prometheus_metrics(request: web.Request) -> web.Response:
    return web.Response(
        body=sokovan_metrics.exposition(), headers={"Content-Type": sokovan_metrics.CONTENT_TYPE}
    )


ROUTES = [
    Route(
        "GET",
        "/metrics",
        prometheus_metrics,
        "Prometheus metrics (text exposition format 0.0.4)",
        {200: None},
        auth=False,
        media_type="text/plain",
    ),
]
