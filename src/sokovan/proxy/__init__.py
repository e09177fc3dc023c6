"""The app proxy (`sokovan proxy`): forwards `/<deployment>/<rest>` to HEALTHY replicas and probes them.

It needs only Redis and the cluster secret: it reads the signed routing table the managers publish
(`sokovan.bus.routing`), probes every route's health path and writes the results back as health
reports, and registers its URL so deployments can show their endpoint. No database access.

- `daemon`: `AppProxy` (start/stop, background loops); `config`: `ProxyConfig`.
- `table`: following the routing table live; `balancer`: which replica gets a request;
  `forward`: the forwarding itself; `headers`: what crosses; `probes` and `reports`: health.
- `guard`: access tokens and in-flight limits; `timeouts`: cutting off slow clients;
  `activation`: holding requests while a deployment scales from zero; `load`: what the proxy
  measures for the autoscaler and the drain, written to Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sokovan.proxy.config import ProxyConfig

if TYPE_CHECKING:
    from sokovan.proxy.daemon import AppProxy, ProxyStartError

__all__ = ["AppProxy", "ProxyConfig", "ProxyStartError"]


def __getattr__(name: str) -> Any:
    """The daemon (aiohttp, Redis, ...) is imported when first asked for: the CLI reads
    `ProxyConfig`'s defaults at start-up without paying for it."""
    if name in ("AppProxy", "ProxyStartError"):
        from sokovan.proxy import daemon

        return getattr(daemon, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
