"""`ProxyConfig`: how the app proxy listens, follows the table, guards and forwards (seconds, counts)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProxyConfig:
    host: str = "127.0.0.1"
    port: int = 8091  # 0 picks a free one
    public_url: str | None = None  # default: http://<host>:<port>
    table_poll_interval: float = 1.0
    register_interval: float = 5.0
    load_interval: float = 1.0  # how often the proxy's load is written for the managers
    probe_concurrency: int = 64
    connect_timeout: float = 5.0  # per replica, before trying the next one
    read_timeout: float | None = None  # between two reads from a replica; None: streams may idle
    # Connections to all replicas together, for forwarding; 0: no limit of its own, so that no
    # deployment can starve another (each deployment's `max_connections` bounds its share).
    max_connections: int = 0
    max_per_client: int = 64  # requests in flight per client address and deployment
    header_timeout: float = 10.0  # for a client to send its complete request headers
    body_timeout: float = 30.0  # the longest a request body may go without a byte
    keepalive_timeout: float = 75.0  # an idle client connection between two requests
    shutdown_timeout: float = 5.0  # for in-flight requests at stop
