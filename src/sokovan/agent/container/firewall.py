"""Host firewall rules that keep a session network's kernels off the host and off other networks.

An engine's bridge network gives its containers a gateway address on the host, so any service of
the host that listens on a wildcard address (an agent's RPC bound to 0.0.0.0, PostgreSQL, etcd, an
ssh daemon) would answer a kernel. For each session network the agent inserts, at the top of the
filter table's INPUT and FORWARD chains, rules on the network's subnet:

- INPUT: new connections from the subnet to the host are rejected, except DNS to its gateway
  (the engine's resolver, through which the session's kernels find each other by hostname);
- FORWARD: new connections from the subnet to anywhere outside it are rejected (no other session's
  kernels, no outside world), unless the agent allows outbound traffic, in which case only the
  other kernel networks and the host stay out of reach.

Replies to connections the host opened (the published port of an inference kernel) are not new,
so they pass. Each rule carries the comment `sokovan:<network>` so that it is found again and
removed with its network. Rules are applied with `iptables` (`-C` first, so adding is idempotent
and several agents may share an engine); without it, or not as root, the agent says so in its
start log and kernels on a session network can reach the host's wildcard listeners.
"""

from __future__ import annotations

import asyncio
import shutil

import structlog

log = structlog.get_logger(__name__)

COMMENT_PREFIX = "sokovan:"


def rules(network: str, subnet: str, gateway: str | None, outbound: bool) -> list[tuple[str, list[str]]]:
    """(chain, rule arguments) of one network, in the order they must end up, top first."""
    tag = ["-m", "comment", "--comment", f"{COMMENT_PREFIX}{network}"]
    new = ["-m", "conntrack", "--ctstate", "NEW"]
    out: list[tuple[str, list[str]]] = []
    if gateway:
        for proto in ("udp", "tcp"):
            out.append(
                ("INPUT", ["-s", subnet, "-d", gateway, "-p", proto, "--dport", "53", *tag, "-j", "ACCEPT"])
            )
    out.append(("INPUT", ["-s", subnet, *new, *tag, "-j", "REJECT"]))
    if not outbound:
        out.append(("FORWARD", ["-s", subnet, "!", "-d", subnet, *new, *tag, "-j", "REJECT"]))
    return out


class Firewall:
    """Adds and removes the rules of session networks with `iptables`."""

    def __init__(self, outbound: bool = False, binary: str | None = None) -> None:
        self.outbound = outbound
        self.binary = binary if binary is not None else shutil.which("iptables")
        self.available = self.binary is not None
        self.note = "iptables rules per session network" if self.available else "no iptables: not applied"

    async def _run(self, *args: str) -> tuple[int, str]:
        assert self.binary is not None
        proc = await asyncio.create_subprocess_exec(
            self.binary, "-w", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        return proc.returncode or 0, out.decode(errors="replace").strip()

    async def protect(self, network: str, subnet: str, gateway: str | None) -> bool:
        """Make sure the network's rules are in place; False when they could not be."""
        if not self.available:
            return False
        wanted = rules(network, subnet, gateway, self.outbound)
        ok = True
        # inserted at the top in reverse, so that they end up in the listed order
        for chain, args in reversed(wanted):
            code, _ = await self._run("-C", chain, *args)
            if code == 0:
                continue
            code, out = await self._run("-I", chain, "1", *args)
            if code != 0:
                ok = False
                log.warning("firewall.rule_failed", network=network, chain=chain, error=out)
        return ok

    async def forget(self, network: str, subnet: str, gateway: str | None) -> None:
        """Remove the network's rules (every copy of each)."""
        if not self.available:
            return
        for chain, args in rules(network, subnet, gateway, self.outbound):
            for _ in range(8):
                code, _ = await self._run("-D", chain, *args)
                if code != 0:
                    break
