"""The routing table and the health reports, shared over Redis by the managers and the app proxies.

- The **routing table** is written by the route coordinator (ServiceDiscoverySync) and read by every
  proxy: per deployment, the HEALTHY routes traffic may go to, and every route whose replica runs,
  which the proxies probe. A change is announced on a channel; proxies also re-read it periodically.
- **Health reports** are written by the proxies after each probe (one hash field per route, with
  the time of the probe) and read by the route coordinator (HealthCheckRoute), which judges them.
  A report older than 3 probe intervals is stale: nobody is probing.
- **Proxies** register their public URL with a time-to-live, so a deployment can show its endpoint.

Every value is signed with the cluster secret, like every other message on the bus: a process
without it can neither steer traffic nor fake a replica's health. A sealed value is
`{"body", "ts", "nonce", "sig"}`, the signature covering `signing.canonical(ROUTING_TAG, [kind,
key], ts, nonce, body)`: its kind ("table", "health", "proxy") and key (the route or proxy id)
are signed, so a healthy report cannot be copied onto another route nor a registration onto
another proxy; a value whose time is malformed (`nan`, `inf`, ...) or more than the skew window
ahead is refused. These are values read many times by design (every proxy reads the table, the
coordinator every report), not messages consumed once, so a nonce is not refused when seen
again; an old value put back is judged by its own time (reports by `last_checked_at`,
registrations by `at`, the table by `generated_at`).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from pydantic import BaseModel, Field, ValidationError

from sokovan.common.signing import (
    SKEW,
    canonical,
    format_time,
    new_nonce,
    parse_time,
    sign,
    valid_nonce,
    verify,
)

ROUTING_TAG = "sokovan-routing-v2"
TABLE, HEALTH, PROXY = "table", "health", "proxy"  # the kinds of sealed values


class HealthCheck(BaseModel):
    """How a deployment's replicas are probed (seconds)."""

    path: str = Field(default="/health", pattern=r"^/", max_length=256)
    interval: float = Field(default=5.0, gt=0, le=3600)
    timeout: float = Field(default=2.0, gt=0, le=600)
    healthy_threshold: int = Field(default=2, ge=1, le=100)
    unhealthy_threshold: int = Field(default=3, ge=1, le=100)
    initial_delay: float = Field(default=0.0, ge=0, le=3600)
    # How long a route may stay UNHEALTHY (out of the routing table) before it is evicted; None
    # means 3 intervals. One that passes `healthy_threshold` probes first is HEALTHY again.
    eviction_grace: float | None = Field(default=None, ge=0, le=86400)

    def grace(self) -> float:
        return self.eviction_grace if self.eviction_grace is not None else 3 * self.interval


class ProbeTarget(BaseModel):
    route_id: uuid.UUID
    deployment: str
    endpoint: str
    health_check: HealthCheck
    # When the route's replica session became RUNNING: probes wait `initial_delay` after it.
    since: float


class DeploymentEntry(BaseModel):
    """What a proxy must know of a deployment besides where its replicas are (CONTRACT section 12)."""

    id: uuid.UUID
    # Hex SHA-256 of the deployment's access token; None when it is open to the public.
    token_sha256: str | None = None
    replicas: int = 0  # the target
    # Autoscaled: a request that finds no replica at a target of zero is held while one starts.
    autoscaled: bool = False
    activation_timeout: float = 60.0
    max_connections: int = 256  # requests in flight through one proxy, past which it answers 429


class RoutingTable(BaseModel):
    generated_at: float
    # deployment name → endpoints of its HEALTHY routes (that serve: a blue-green update's new set
    # only once it is switched in; a draining route never)
    routes: dict[str, list[str]] = Field(default_factory=dict)
    # deployment name → the rest a proxy needs of it (every name in `routes` has one)
    deployments: dict[str, DeploymentEntry] = Field(default_factory=dict)
    probes: list[ProbeTarget] = Field(default_factory=list)


class HealthReport(BaseModel):
    route_id: uuid.UUID
    consecutive_successes: int = 0
    consecutive_failures: int = 0
    last_checked_at: float  # epoch seconds
    last_status: str  # "200", "503", "timeout", "connection refused", ...
    ok: bool


@dataclass(frozen=True)
class RoutingBus:
    """Where the routing table and health reports live, and the secret that signs them."""

    redis: aioredis.Redis
    prefix: str
    secret: str


def table_key(prefix: str) -> str:
    return f"{prefix}:routing:table"


def table_channel(prefix: str) -> str:
    return f"{prefix}:routing:changed"


def health_key(prefix: str) -> str:
    return f"{prefix}:routing:health"


def proxies_key(prefix: str) -> str:
    return f"{prefix}:routing:proxies"


def _seal(secret: str, kind: str, key: str, value: BaseModel) -> str:
    body = value.model_dump_json()
    ts, nonce = format_time(time.time()), new_nonce()
    sig = sign(secret, canonical(ROUTING_TAG, [kind, key], ts, nonce, body.encode()))
    return json.dumps({"body": body, "ts": ts, "nonce": nonce, "sig": sig})


def _open(secret: str, kind: str, key: str, raw: bytes | str | None) -> str | None:
    """The body of a sealed value of `kind` under `key` whose signature and time hold, else None."""
    if raw is None:
        return None
    try:
        sealed = json.loads(raw)
        body, ts, nonce, sig = sealed["body"], sealed["ts"], sealed["nonce"], sealed["sig"]
        timestamp = parse_time(ts)
        if not isinstance(body, str) or timestamp is None or not valid_nonce(nonce):
            return None
        if timestamp > time.time() + SKEW:
            return None
        payload = canonical(ROUTING_TAG, [kind, key], ts, nonce, body.encode())
        return body if verify(secret, payload, sig) else None
    except (ValueError, KeyError, TypeError):
        return None


# Other values shared the same way (the proxies' load: `proxy_load`) are sealed and opened by these.
seal = _seal
unseal = _open


async def publish_table(redis: aioredis.Redis, prefix: str, secret: str, table: RoutingTable) -> None:
    await redis.set(table_key(prefix), _seal(secret, TABLE, "", table))
    await redis.publish(table_channel(prefix), str(table.generated_at))


async def read_table(redis: aioredis.Redis, prefix: str, secret: str) -> RoutingTable | None:
    body = _open(secret, TABLE, "", await redis.get(table_key(prefix)))
    try:
        return RoutingTable.model_validate_json(body) if body is not None else None
    except ValidationError:
        return None


async def write_reports(redis: aioredis.Redis, prefix: str, secret: str, reports: list[HealthReport]) -> None:
    if reports:
        await redis.hset(
            health_key(prefix),
            mapping={str(r.route_id): _seal(secret, HEALTH, str(r.route_id), r) for r in reports},
        )


async def read_reports(
    redis: aioredis.Redis, prefix: str, secret: str, route_ids: list[uuid.UUID]
) -> dict[uuid.UUID, HealthReport]:
    if not route_ids:
        return {}
    raws: list[Any] = await redis.hmget(health_key(prefix), [str(r) for r in route_ids])
    out: dict[uuid.UUID, HealthReport] = {}
    for rid, raw in zip(route_ids, raws, strict=True):
        body = _open(secret, HEALTH, str(rid), raw)
        if body is None:
            continue
        try:
            out[rid] = HealthReport.model_validate_json(body)
        except ValidationError:
            continue
    return out


async def forget_reports(redis: aioredis.Redis, prefix: str, route_ids: list[uuid.UUID]) -> None:
    if route_ids:
        await redis.hdel(health_key(prefix), *[str(r) for r in route_ids])


class ProxyRegistration(BaseModel):
    url: str
    at: float


async def register_proxy(redis: aioredis.Redis, prefix: str, secret: str, proxy_id: str, url: str) -> None:
    await redis.hset(
        proxies_key(prefix),
        proxy_id,
        _seal(secret, PROXY, proxy_id, ProxyRegistration(url=url, at=time.time())),
    )


async def unregister_proxy(redis: aioredis.Redis, prefix: str, proxy_id: str) -> None:
    await redis.hdel(proxies_key(prefix), proxy_id)


async def proxy_urls(redis: aioredis.Redis, prefix: str, secret: str, max_age: float = 30.0) -> list[str]:
    """The URLs of the proxies that registered within `max_age` seconds, oldest registration first."""
    raws: dict[Any, Any] = await redis.hgetall(proxies_key(prefix))
    now = time.time()
    found: list[ProxyRegistration] = []
    for proxy_id, raw in raws.items():
        key = proxy_id.decode() if isinstance(proxy_id, bytes) else str(proxy_id)
        body = _open(secret, PROXY, key, raw)
        if body is None:
            continue
        try:
            reg = ProxyRegistration.model_validate_json(body)
        except ValidationError:
            continue
        if now - reg.at <= max_age:
            found.append(reg)
    return sorted({r.url for r in found})
