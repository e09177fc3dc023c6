"""The proxy's Prometheus counters, in a registry of their own (served by the proxy's `GET /metrics`).

Kept apart from the manager's default registry so a proxy's `/metrics` shows only what it does.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "sokovan_proxy_requests_total",
    "Requests for a deployment, by deployment and outcome (forwarded, unknown_deployment, "
    "no_healthy_replica, all_replicas_failed, upstream_failed, upstream_broken, client_gone)",
    ["deployment", "outcome"],
    registry=REGISTRY,
)
RETRIES = Counter(
    "sokovan_proxy_retries_total",
    "Requests sent to another replica because the connection to one failed before any byte was sent",
    ["deployment"],
    registry=REGISTRY,
)
PROBES = Counter(
    "sokovan_proxy_probes_total",
    "Health probes, by deployment and result (pass, fail)",
    ["deployment", "result"],
    registry=REGISTRY,
)


def exposition() -> bytes:
    """The proxy's registry in the Prometheus text format."""
    return generate_latest(REGISTRY)
