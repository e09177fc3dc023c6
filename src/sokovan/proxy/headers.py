"""Which headers cross the proxy: hop-by-hop headers stop here, X-Forwarded-* are added.

Hop-by-hop headers (RFC 9110 §7.6.1: Connection and the headers it names, Keep-Alive, TE, Trailer,
Transfer-Encoding, Upgrade, Proxy-*) describe one connection, not the message; the proxy's own
connections carry their own. `Host` is set from the replica's URL; `Expect` was answered already.
`Authorization` never reaches a replica: it carries the deployment's access token, which is the
proxy's to check (`guard`), not the replica's to see.
"""

from __future__ import annotations

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)


def _dropped(headers: CIMultiDictProxy[str], extra: frozenset[str] = frozenset()) -> frozenset[str]:
    named = {t.strip().lower() for v in headers.getall("Connection", []) for t in v.split(",")}
    return HOP_BY_HOP | extra | named


def _copy(headers: CIMultiDictProxy[str], drop: frozenset[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in drop)


def upstream_request_headers(request: web.Request, prefix: str) -> CIMultiDict[str]:
    """The client's headers for the replica, with X-Forwarded-For/-Host/-Proto/-Prefix."""
    out = _copy(request.headers, _dropped(request.headers, frozenset({"host", "expect", "authorization"})))
    peer = request.remote or ""
    prior = ", ".join(request.headers.getall("X-Forwarded-For", []))
    out["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
    out["X-Forwarded-Host"] = request.host
    out["X-Forwarded-Proto"] = request.scheme
    out["X-Forwarded-Prefix"] = prefix
    return out


def downstream_response_headers(headers: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    """The replica's response headers for the client."""
    return _copy(headers, _dropped(headers))
