"""Where an inference kernel's HTTP server answers: a TCP port per kernel and the agent's host.

Every kernel of an `inference` session gets a port of its own (the variable `PORT`); its
`service_addr` is `http://<host>:<port>`, the host being the address the agent's RPC is bound to
(`127.0.0.1` for a wildcard bind). A port is picked by binding a probe socket to port 0 on every
interface, so the kernel's server can bind it, and stays reserved until the kernel ends: two kernels
of one agent never get the same port, even before the first one's server has bound it.
"""

from __future__ import annotations

import socket

INFERENCE = "inference"
PROBE_TRIES = 64  # ports the kernel still holds can come back from a probe; then it asks again


def service_host(rpc_host: str) -> str:
    """The host part of a service URL for an agent whose RPC binds `rpc_host`."""
    if rpc_host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if rpc_host == "::":
        return "[::1]"
    if ":" in rpc_host and not rpc_host.startswith("["):
        return f"[{rpc_host}]"
    return rpc_host


class PortAllocator:
    """Free TCP ports for kernels, each handed out once until it is released."""

    def __init__(self) -> None:
        self._reserved: set[int] = set()

    @property
    def reserved(self) -> frozenset[int]:
        return frozenset(self._reserved)

    def allocate(self) -> int:
        """A port no process listens on now and this allocator has not handed out.

        Raises OSError when no such port is found."""
        for _ in range(PROBE_TRIES):
            port = _probe()
            if port not in self._reserved:
                self._reserved.add(port)
                return port
        raise OSError("no free TCP port for the kernel's service")

    def reserve(self, port: int | None) -> None:
        """Count `port` as handed out (a kernel taken over after an agent restart holds it)."""
        if port is not None:
            self._reserved.add(port)

    def release(self, port: int | None) -> None:
        if port is not None:
            self._reserved.discard(port)


def _probe() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("0.0.0.0", 0))
        port: int = probe.getsockname()[1]
        return port
