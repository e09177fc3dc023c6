"""A network of each session's own, on which its kernels find each other by hostname.

A kernel of a one-kernel session that serves nothing gets no network at all (`NetworkMode: none`):
it has only a loopback device. The kernels of a multi-kernel session, and inference kernels (whose
port the engine publishes on the host), join the bridge network `sokovan-<session id>`, made by the
first agent that needs it (several agents sharing an engine find it by name; a create that loses
the race reads the winner's). The agent's firewall rules (`firewall`) keep the network's kernels
off the host and off every other network. The network is removed, with its rules, when the last
kernel of the session on this agent has ended and no container is attached to it any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiodocker
import structlog

from sokovan.agent.container import labels
from sokovan.agent.container.firewall import Firewall

log = structlog.get_logger(__name__)

NAME_PREFIX = "sokovan-"


def network_name(session_id: str) -> str:
    return f"{NAME_PREFIX}{session_id}"


def needs_network(cluster_size: int, session_type: str) -> bool:
    return cluster_size > 1 or session_type == "inference"


@dataclass(frozen=True)
class Subnet:
    subnet: str
    gateway: str | None


def subnet_of(info: dict[str, Any]) -> Subnet | None:
    """The first IPv4 subnet of a network's inspect answer (Docker's or Podman's shape)."""
    for config in (info.get("IPAM") or {}).get("Config") or []:
        subnet = config.get("Subnet")
        if subnet and ":" not in subnet:
            return Subnet(subnet, config.get("Gateway") or None)
    return None


class SessionNetworks:
    """Makes and removes sessions' networks in one engine, with their firewall rules."""

    def __init__(self, docker: aiodocker.Docker, firewall: Firewall) -> None:
        self.docker = docker
        self.firewall = firewall

    async def ensure(self, session_id: str) -> str:
        """The session's network, made if missing and protected; its name."""
        name = network_name(session_id)
        try:
            info = await self._inspect(name)
        except aiodocker.DockerError as exc:
            if exc.status != 404:
                raise
            info = await self._create(name, session_id)
        subnet = subnet_of(info)
        if subnet is None:
            raise RuntimeError(f"network {name} has no IPv4 subnet")
        if not await self.firewall.protect(name, subnet.subnet, subnet.gateway) and self.firewall.available:
            raise RuntimeError(f"cannot apply the firewall rules of network {name}")
        return name

    async def _inspect(self, name: str) -> dict[str, Any]:
        network = await self.docker.networks.get(name)
        info: dict[str, Any] = await network.show()
        return info

    async def _create(self, name: str, session_id: str) -> dict[str, Any]:
        config = {
            "Name": name,
            "Driver": "bridge",
            "CheckDuplicate": True,
            "Labels": {labels.MANAGED: "1", labels.SESSION: session_id},
        }
        try:
            await self.docker.networks.create(config)
        except aiodocker.DockerError:
            # Another agent on this engine made it first (Docker answers 409, Podman 500 "already
            # used"): use theirs; when there is none, the create's own error stands.
            try:
                return await self._inspect(name)
            except aiodocker.DockerError:
                pass
            raise
        return await self._inspect(name)

    async def release(self, session_id: str) -> None:
        """Remove the session's network and its rules when nothing is attached to it any more."""
        name = network_name(session_id)
        try:
            info = await self._inspect(name)
        except aiodocker.DockerError:
            return
        if info.get("Containers"):
            return
        try:
            network = await self.docker.networks.get(name)
            await network.delete()
        except aiodocker.DockerError as exc:
            log.info("network.kept", network=name, reason=exc.message)
            return
        subnet = subnet_of(info)
        if subnet is not None:
            await self.firewall.forget(name, subnet.subnet, subnet.gateway)
        log.info("network.removed", network=name)
