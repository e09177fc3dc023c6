"""The proxy's Prometheus counters, in a registry of their own (served by the proxy's `GET /metrics`).

Kept apart from the manager's default registry so a proxy's `/metrics` shows only what it does.
Deployments are labelled by id only (`Balancer.label`), "(unknown)" for a name the routing table
has no entry for: a deployment's name, chosen by its owner, is never a label value.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "sokovan_proxy_requests_total",
    "Requests for a deployment, by deployment id and outcome (forwarded, unknown_deployment, "
    "unauthorized, too_many_requests, no_healthy_replica, activation_timeout, all_replicas_failed, "
    "upstream_failed, upstream_broken, client_gone, body_timeout)",
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
    "Health probes, by deployment id and result (pass, fail)",
    ["deployment", "result"],
    registry=REGISTRY,
)


def exposition() -> bytes:
    """The proxy's registry in the Prometheus text format."""
    return generate_latest(REGISTRY)
