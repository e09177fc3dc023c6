"""The app proxy (`sokovan proxy`): forwards `/<deployment>/<rest>` to HEALTHY replicas and probes them.

It needs only Redis and the cluster secret: it reads the signed routing table the managers publish
(`sokovan.bus.routing`), probes every route's health path and writes the results back as health
reports, and registers its URL so deployments can show their endpoint. No database access.

- `daemon`: `AppProxy` (start/stop, background loops) and `ProxyConfig`.
- `table`: following the routing table live; `balancer`: which replica gets a request;
  `forward`: the forwarding itself; `headers`: what crosses; `probes` and `reports`: health.
"""

from sokovan.proxy.daemon import AppProxy, ProxyConfig, ProxyStartError

__all__ = ["AppProxy", "ProxyConfig", "ProxyStartError"]
