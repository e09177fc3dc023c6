"""`GET /manager/announcement`: the client reads it after logging in; Sokovan has no
announcements, so it is always off. (`GET /`, which the client reads first for the API version,
is the app's own: its JSON carries `version`.)"""

from __future__ import annotations

from aiohttp import web

from sokovan.manager.api.openapi import Route


async def announcement(request: web.Request) -> web.Response:
    return web.json_response({"enabled": False, "message": ""})


ROUTES = [
    Route("GET", "/manager/announcement", announcement, "Backend.AI client: the announcement", {200: None}),
]
