"""`free_port()`: below the kernel's ephemeral range, never the same port twice in a row for one
process, and a share of its own for each pytest-xdist worker."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from sokovan.harness import free_port
from sokovan.harness.process import _below_ephemeral

LOW = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
PICKS = """
from sokovan.harness import free_port
print(" ".join(str(free_port()) for _ in range(300)))
"""


def _picks(worker: str, count: str) -> set[int]:
    env = {"PATH": "/usr/bin:/bin", "PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": count}
    out = subprocess.run([sys.executable, "-c", PICKS], env=env, capture_output=True, text=True, check=True)
    return {int(p) for p in out.stdout.split()}


def test_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(LOW - 12000 <= p < LOW for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free, as promised


def test_a_port_held_by_a_listener_is_not_given() -> None:
    """A block of 300 ports held by listeners this test opens itself: 2,000 picks, which without
    the check would land in it some 50 times, land in it never."""
    held: list[socket.socket] = []
    try:
        share = _below_ephemeral()  # this process's (a test worker's share under xdist)
        middle = share.start + len(share) // 2
        block = range(middle, middle + 300)
        for port in block:
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()  # taken already: held all the same
                continue
            s.listen()
            held.append(s)
        assert not [p for p in (free_port() for _ in range(2000)) if p in block]
    finally:
        for s in held:
            s.close()


def test_two_workers_pick_from_shares_of_their_own() -> None:
    first, second = _picks("gw0", "2"), _picks("gw1", "2")
    assert len(first) == len(second) == 300
    assert max(first) < min(second)
