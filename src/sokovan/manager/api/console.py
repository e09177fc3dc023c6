"""The operators' console: static files under `/ui/` (CONTRACT §10), served without a token.

The files hold no data: the page asks for a token and reads everything through REST v2 and
`/v2/events` with it. Only the files shipped in `sokovan/manager/console/static` are served (a
fixed set read at start-up, so no path can reach outside it), with a content security policy that
allows the page's own scripts and styles only and no framing.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from aiohttp import web

from sokovan.manager.api.problems import Problem

STATIC_DIR = Path(__file__).resolve().parent.parent / "console" / "static"
PREFIX = "/ui"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".svg": "image/svg+xml"}


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def _files() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in STATIC_DIR.iterdir() if p.is_file()}


FILES_KEY = web.AppKey("console_files", dict[str, bytes])


async def _to_index(request: web.Request) -> web.Response:
    raise web.HTTPMovedPermanently(PREFIX + "/")


async def _serve(request: web.Request) -> web.Response:
    name = request.match_info.get("name") or "index.html"
    body = request.app[FILES_KEY].get(name)
    if body is None:
        raise Problem(404, "Not Found", f"the console has no file {name!r}")
    ctype = _TYPES.get(Path(name).suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return web.Response(body=body, content_type=ctype, charset="utf-8", headers=HEADERS)


def setup(app: web.Application) -> None:
    app[FILES_KEY] = _files()
    app.router.add_get(PREFIX, _to_index)
    app.router.add_get(PREFIX + "/", _serve)
    app.router.add_get(PREFIX + "/{name}", _serve)
