"""Network namespaces joined to the host by veth pairs, and partitions between them (Jepsen style).

`Namespace.make(index)` creates a namespace of this test run's own (`ip netns add`) with a veth pair:
the host's end gets 10.231.<n>.1/30, the namespace's 10.231.<n>.2/30, and the namespace its own
loopback. A daemon started there (`wrapper`: `ip netns exec <name>`) reaches the host only at the
host's end of its pair; the host reaches it at `address`.

A partition is a silent one: `cut()` (or `cut(port)`, one server's connections only) adds an
nftables drop rule at the ingress of both ends (a table of its own on each side, hooked to that one
device), so every packet either way is dropped where it arrives: nothing is refused, no connection
is reset, the senders see no error (TCP retransmits into the void, as across a broken switch);
`heal()` deletes the two tables. `flap(...)` alternates the two. `pids()` lists the processes in
the namespace (`ip netns pids`): a daemon and what it started.

Traffic goes only between the host and namespaces this module made; `close()` deletes the namespace
(its veth pair goes with it). Needs root (CAP_NET_ADMIN), `ip` (iproute2) and `nft` (nftables).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from dataclasses import dataclass

SUBNETS = 16384  # /30s in 10.231.0.0/16


def _run(*args: str, script: str | None = None) -> str:
    done = subprocess.run(args, input=script, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass
class Namespace:
    name: str
    host_if: str
    ns_if: str
    host_address: str
    address: str
    partitioned: bool = False

    @classmethod
    def make(cls, index: int) -> Namespace:
        tag = uuid.uuid4().hex[:6]
        block = (os.getpid() * 7 + index * 131 + int(tag, 16)) % SUBNETS
        third, fourth = divmod(block * 4, 256)
        ns = cls(
            name=f"sokovan-{tag}-{index}",
            host_if=f"skh{tag}{index % 10}",
            ns_if=f"skn{tag}{index % 10}",
            host_address=f"10.231.{third}.{fourth + 1}",
            address=f"10.231.{third}.{fourth + 2}",
        )
        ns._create()
        return ns

    @property
    def wrapper(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def _create(self) -> None:
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _run("ip", "link", "set", self.ns_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_if)
            _run("ip", "link", "set", self.host_if, "up")
            self._inside("ip", "addr", "add", f"{self.address}/30", "dev", self.ns_if)
            self._inside("ip", "link", "set", self.ns_if, "up")
            self._inside("ip", "link", "set", "lo", "up")
        except Exception:
            self.close()
            raise

    def _inside(self, *args: str) -> str:
        return _run(*self.wrapper, *args)

    @property
    def _table(self) -> str:
        return "sokovan_" + self.host_if

    def _drop_script(self, device: str, rule: str | None) -> str:
        chain = f"type filter hook ingress device {device} priority 0; policy {'accept' if rule else 'drop'};"
        return f"table netdev {self._table} {{\n  chain partition {{ {chain} {rule or ''} }}\n}}\n"

    def cut(self, port: int | None = None) -> None:
        """Drop every packet between the host and the namespace, both ways; with `port`, only
        those of TCP connections to that port in the namespace (its daemon's server)."""
        if self.partitioned:
            return
        inward = f"tcp dport {port} drop;" if port else None
        outward = f"tcp sport {port} drop;" if port else None
        _run("nft", "-f", "-", script=self._drop_script(self.host_if, outward))
        _run(*self.wrapper, "nft", "-f", "-", script=self._drop_script(self.ns_if, inward))
        self.partitioned = True

    def heal(self) -> None:
        if not self.partitioned:
            return
        _run("nft", "delete", "table", "netdev", self._table)
        self._inside("nft", "delete", "table", "netdev", self._table)
        self.partitioned = False

    async def flap(self, cycles: int, down: float, up: float) -> None:
        """`cycles` times: cut for `down` seconds, then healed for `up`."""
        for _ in range(cycles):
            self.cut()
            await asyncio.sleep(down)
            self.heal()
            await asyncio.sleep(up)

    def pids(self) -> set[int]:
        return {int(p) for p in _run("ip", "netns", "pids", self.name).split()}

    def close(self) -> None:
        subprocess.run(["nft", "delete", "table", "netdev", self._table], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
