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

Before any of that the request passes the guard (`guard`: the deployment's token, 401 without it;
its limits, 429 past them), an autoscaled deployment with no replica holds it until one starts
(`activation`), and it is counted in the proxy's load (`load`). The request body is streamed with
an idle timeout (`timeouts.body_chunks`); the connection to a replica has `connect_timeout`.

Errors the proxy answers itself are problem documents: 404 for a deployment the routing table does
not mention, 401 and 429 from the guard, 503 when it has no HEALTHY replica (none started in time,
for an autoscaled one) or none could be connected to, 502 when a replica failed after the request
was sent. Metrics and logs name deployments by id (`Balancer.label`).
"""

from __future__ import annotations

import asyncio
import errno

import aiohttp
import structlog
from aiohttp import web
from yarl import URL

from sokovan.bus.routing import DeploymentEntry
from sokovan.proxy import metrics
from sokovan.proxy.activation import TableSignal, await_endpoints
from sokovan.proxy.balancer import UNKNOWN, Balancer
from sokovan.proxy.guard import DEFAULT_MAX_CONNECTIONS, Limits, authorized, too_many, unauthorized
from sokovan.proxy.headers import downstream_response_headers, upstream_request_headers
from sokovan.proxy.load import LoadTracker
from sokovan.proxy.problems import problem
from sokovan.proxy.timeouts import BODY_TIMED_OUT, body_chunks

log = structlog.get_logger(__name__)

# A response this small, of known length, is read whole and sent in one write.
WHOLE_BODY = 64 * 1024
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
    def __init__(
        self,
        balancer: Balancer,
        session: aiohttp.ClientSession,
        timeout: aiohttp.ClientTimeout,
        *,
        limits: Limits,
        load: LoadTracker,
        signal: TableSignal,
        body_timeout: float,
    ) -> None:
        self._balancer = balancer
        self._session = session
        self._timeout = timeout
        self._limits = limits
        self._load = load
        self._signal = signal
        self._body_timeout = body_timeout

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name, rest = split_path(request.rel_url.raw_path)
        if not self._balancer.knows(name):
            metrics.REQUESTS.labels(deployment=UNKNOWN, outcome="unknown_deployment").inc()
            if self._balancer.table is None:
                return problem(503, "No routing table", "the proxy has not read the routing table yet")
            return problem(404, "Unknown deployment", f"no deployment named {name!r} is routed here")
        entry = self._balancer.entry(name)
        label = self._balancer.label(name)
        if not authorized(entry, request.headers):
            metrics.REQUESTS.labels(deployment=label, outcome="unauthorized").inc()
            return unauthorized(name)
        key, cap = (
            (str(entry.id), entry.max_connections) if entry else (f"name:{name}", DEFAULT_MAX_CONNECTIONS)
        )
        slot = self._limits.enter(key, request.remote or "", cap)
        if isinstance(slot, str):
            metrics.REQUESTS.labels(deployment=label, outcome="too_many_requests").inc()
            return too_many(name, slot)
        with slot:
            if entry is not None:
                self._load.started(entry.id)
            return await self._serve(request, name, rest, entry, label)

    async def _serve(
        self, request: web.Request, name: str, rest: str, entry: DeploymentEntry | None, label: str
    ) -> web.StreamResponse:
        candidates = self._balancer.candidates(name)
        if not candidates and entry is not None and entry.autoscaled:
            with self._load.waiting(entry.id):
                candidates = await await_endpoints(
                    self._signal, lambda: self._balancer.candidates(name), entry.activation_timeout
                )
            if not candidates:
                metrics.REQUESTS.labels(deployment=label, outcome="activation_timeout").inc()
                return problem(
                    503,
                    "No healthy replica",
                    f"deployment {name!r} has no replica: none started within {entry.activation_timeout:g} s",
                )
        if not candidates:
            metrics.REQUESTS.labels(deployment=label, outcome="no_healthy_replica").inc()
            return problem(503, "No healthy replica", f"deployment {name!r} has no HEALTHY replica right now")
        with self._load.inflight(entry.id if entry else None):
            for attempt, endpoint in enumerate(candidates):
                if attempt:
                    metrics.RETRIES.labels(deployment=label).inc()
                with self._load.on_endpoint(endpoint):
                    answer = await self._try(request, endpoint, rest, name, label)
                if answer is not None:
                    return answer
        metrics.REQUESTS.labels(deployment=label, outcome="all_replicas_failed").inc()
        return problem(
            503,
            "No healthy replica",
            f"no replica of deployment {name!r} could be connected to ({len(candidates)} tried)",
        )

    async def _try(
        self, request: web.Request, endpoint: str, rest: str, name: str, label: str
    ) -> web.StreamResponse | None:
        """The answer through `endpoint`, or None when the next replica should get the request."""
        body = body_chunks(request, self._body_timeout) if request.body_exists else None
        try:
            upstream = await self._session.request(
                request.method,
                target_url(endpoint, rest, request.rel_url.raw_query_string),
                headers=upstream_request_headers(request, f"/{name}"),
                data=body,
                allow_redirects=False,
                skip_auto_headers=SKIP_AUTO_HEADERS,
                timeout=self._timeout,
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError, ValueError) as exc:
            # Nothing was sent: the connection itself failed (or the endpoint is not a URL at all).
            # Skip this replica for a while.
            log.warning("proxy.replica_unreachable", deployment=label, endpoint=endpoint, error=str(exc))
            self._balancer.mark_failed(endpoint)
            return None
        except (
            aiohttp.ServerDisconnectedError,
            aiohttp.ClientOSError,
            aiohttp.ClientConnectionResetError,
        ) as exc:
            if body is None and request.method in IDEMPOTENT and _dropped(exc):
                log.info("proxy.replica_disconnected", deployment=label, endpoint=endpoint, error=str(exc))
                return None
            return self._bad_gateway(request, label, endpoint, exc)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return self._bad_gateway(request, label, endpoint, exc)
        return await self._relay(request, upstream, label, endpoint)

    def _bad_gateway(
        self, request: web.Request, label: str, endpoint: str, exc: BaseException
    ) -> web.Response:
        if request.get(BODY_TIMED_OUT):  # the client was cut off: nobody to answer
            metrics.REQUESTS.labels(deployment=label, outcome="body_timeout").inc()
            return problem(408, "Request timeout", "no byte of the request body for too long")
        log.warning("proxy.replica_failed", deployment=label, endpoint=endpoint, error=repr(exc))
        metrics.REQUESTS.labels(deployment=label, outcome="upstream_failed").inc()
        return problem(502, "Bad gateway", f"the replica failed to answer: {type(exc).__name__}")

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse, label: str, endpoint: str
    ) -> web.StreamResponse:
        length = upstream.content_length
        if length is not None and length <= WHOLE_BODY and request.method != "HEAD":
            return await self._relay_whole(upstream, label, endpoint)
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
                        "proxy.replica_broke_off", deployment=label, endpoint=endpoint, error=repr(exc)
                    )
                    metrics.REQUESTS.labels(deployment=label, outcome="upstream_broken").inc()
                    if request.transport is not None:
                        request.transport.close()  # the client must see the truncation
                    return out
                if not chunk:
                    break
                await out.write(chunk)
            await out.write_eof()
        except (ConnectionError, asyncio.CancelledError) as exc:
            # The client went away (its handler is cancelled, or a write fails): nothing left to deliver.
            metrics.REQUESTS.labels(deployment=label, outcome="client_gone").inc()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return out
        finally:
            if upstream.content.at_eof():
                upstream.release()  # the connection goes back to the pool
            else:
                upstream.close()
        metrics.REQUESTS.labels(deployment=label, outcome="forwarded").inc()
        return out

    async def _relay_whole(
        self, upstream: aiohttp.ClientResponse, label: str, endpoint: str
    ) -> web.StreamResponse:
        """A small response of known length: read whole, then sent with its headers in one write
        (the streamed path costs a write for the headers and one per chunk)."""
        try:
            body = await upstream.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            upstream.close()
            log.warning("proxy.replica_broke_off", deployment=label, endpoint=endpoint, error=repr(exc))
            metrics.REQUESTS.labels(deployment=label, outcome="upstream_broken").inc()
            return problem(502, "Bad gateway", f"the replica broke off its answer: {type(exc).__name__}")
        upstream.release()
        headers = downstream_response_headers(upstream.headers)
        headers.popall("Content-Length", None)
        metrics.REQUESTS.labels(deployment=label, outcome="forwarded").inc()
        return web.Response(status=upstream.status, reason=upstream.reason, headers=headers, body=body)
