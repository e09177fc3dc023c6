"""Forwarding `/<deployment>/<rest>` to `<endpoint>/<rest>` of one of the deployment's HEALTHY replicas.

The request (method, headers less the hop-by-hop ones, query string, body streamed as it arrives)
goes to the first endpoint `Balancer.candidates` names. If the connection to it fails before any
byte was sent (refused, reset or timed out while connecting) the next candidate gets it, each at
most once; a bodiless idempotent request is also re-sent when the replica closed or reset the
connection without answering (a reused keep-alive connection it had closed, or a replica killed with
the request unread in its socket). The response (status, headers, body) streams back chunk by
chunk, so server-sent events and long responses flow as the replica writes them. If the replica
breaks off mid-response the client's connection is closed, so the truncation is visible; if the
client goes away, the replica's connection is closed with it.

Errors the proxy answers itself are problem documents: 404 for a deployment the routing table does
not mention, 503 when it has no HEALTHY replica or none could be connected to, 502 when a replica
failed after the request was sent.
"""

from __future__ import annotations

import asyncio
import errno

import aiohttp
import structlog
from aiohttp import web
from yarl import URL

from sokovan.proxy import metrics
from sokovan.proxy.balancer import Balancer
from sokovan.proxy.headers import downstream_response_headers, upstream_request_headers
from sokovan.proxy.problems import problem

log = structlog.get_logger(__name__)

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
# What aiohttp would otherwise add on its own: the replica sees the client's headers, not ours.
SKIP_AUTO_HEADERS = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


# What a replica that dropped the connection without answering leaves (besides a clean close).
_DROPPED_ERRNOS = frozenset({errno.ECONNRESET, errno.EPIPE, errno.ECONNABORTED})


def _dropped(exc: aiohttp.ClientError) -> bool:
    """The replica closed or reset the connection before any answer (aiohttp raises
    `ClientConnectionResetError` when the request is written to a pooled connection the replica
    already closed: nothing reached it)."""
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError)):
        return True
    return isinstance(exc, aiohttp.ClientOSError) and exc.errno in _DROPPED_ERRNOS


def split_path(raw_path: str) -> tuple[str, str]:
    """`/name/rest/of/path` → (`name`, `rest/of/path`), both still percent-encoded."""
    name, _, rest = raw_path.lstrip("/").partition("/")
    return name, rest


def target_url(endpoint: str, rest: str, query: str) -> URL:
    return URL(endpoint.rstrip("/") + "/" + rest + (f"?{query}" if query else ""), encoded=True)


class Forwarder:
    def __init__(self, balancer: Balancer, session: aiohttp.ClientSession, timeout: aiohttp.ClientTimeout):
        self._balancer = balancer
        self._session = session
        self._timeout = timeout

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name, rest = split_path(request.rel_url.raw_path)
        if not self._balancer.knows(name):
            metrics.REQUESTS.labels(deployment="(unknown)", outcome="unknown_deployment").inc()
            if self._balancer.table is None:
                return problem(503, "No routing table", "the proxy has not read the routing table yet")
            return problem(404, "Unknown deployment", f"no deployment named {name!r} is routed here")
        candidates = self._balancer.candidates(name)
        if not candidates:
            metrics.REQUESTS.labels(deployment=name, outcome="no_healthy_replica").inc()
            return problem(503, "No healthy replica", f"deployment {name!r} has no HEALTHY replica right now")
        headers = upstream_request_headers(request, f"/{name}")
        body = request.content if request.body_exists else None
        retry_on_disconnect = body is None and request.method in IDEMPOTENT
        query = request.rel_url.raw_query_string
        for attempt, endpoint in enumerate(candidates):
            if attempt:
                metrics.RETRIES.labels(deployment=name).inc()
            try:
                upstream = await self._session.request(
                    request.method,
                    target_url(endpoint, rest, query),
                    headers=headers,
                    data=body,
                    allow_redirects=False,
                    skip_auto_headers=SKIP_AUTO_HEADERS,
                    timeout=self._timeout,
                )
            except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ValueError) as exc:
                # Nothing was sent: the connection itself failed (or the endpoint is not a URL at all).
                # Skip this replica for a while.
                log.warning("proxy.replica_unreachable", deployment=name, endpoint=endpoint, error=str(exc))
                self._balancer.mark_failed(endpoint)
                continue
            except (
                aiohttp.ServerDisconnectedError,
                aiohttp.ClientOSError,
                aiohttp.ClientConnectionResetError,
            ) as exc:
                if retry_on_disconnect and _dropped(exc):
                    log.info("proxy.replica_disconnected", deployment=name, endpoint=endpoint, error=str(exc))
                    continue
                return self._bad_gateway(name, endpoint, exc)
            except (aiohttp.ClientError, TimeoutError) as exc:
                return self._bad_gateway(name, endpoint, exc)
            return await self._relay(request, upstream, name, endpoint)
        metrics.REQUESTS.labels(deployment=name, outcome="all_replicas_failed").inc()
        return problem(
            503,
            "No healthy replica",
            f"no replica of deployment {name!r} could be connected to ({len(candidates)} tried)",
        )

    def _bad_gateway(self, name: str, endpoint: str, exc: BaseException) -> web.Response:
        log.warning("proxy.replica_failed", deployment=name, endpoint=endpoint, error=repr(exc))
        metrics.REQUESTS.labels(deployment=name, outcome="upstream_failed").inc()
        return problem(502, "Bad gateway", f"the replica of {name!r} failed to answer: {type(exc).__name__}")

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, name: str, endpoint: str
    ) -> web.StreamResponse:
        out = web.StreamResponse(
            status=upstream.status,
            reason=upstream.reason,
            headers=downstream_response_headers(upstream.headers),
        )
        try:
            await out.prepare(request)
            while True:
                try:
                    chunk = await upstream.content.readany()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    log.warning(
                        "proxy.replica_broke_off", deployment=name, endpoint=endpoint, error=repr(exc)
                    )
                    metrics.REQUESTS.labels(deployment=name, outcome="upstream_broken").inc()
                    if request.transport is not None:
                        request.transport.close()  # the client must see the truncation
                    return out
                if not chunk:
                    break
                await out.write(chunk)
            await out.write_eof()
        except (ConnectionError, asyncio.CancelledError) as exc:
            # The client went away (its handler is cancelled, or a write fails): nothing left to deliver.
            metrics.REQUESTS.labels(deployment=name, outcome="client_gone").inc()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return out
        finally:
            if upstream.content.at_eof():
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()
        metrics.REQUESTS.labels(deployment=name, outcome="forwarded").inc()
        return out
