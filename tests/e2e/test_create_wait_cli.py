"""Black-box: `sokovan session create --wait` as a subprocess against a real manager and agents.
A batch session is followed to its end (contract: a kernel's non-zero exit → TERMINATING → ERROR,
result FAILURE; exit 0 everywhere → TERMINATED, result SUCCESS) and the command exits with the
outcome; an interactive one is followed to RUNNING only."""

from __future__ import annotations

import asyncio
import itertools
import re

from sokovan.harness import SOKOVAN
from tests.e2e.cluster import Client, Cluster

MOVE = re.compile(r"^\S+\s+(?P<src>[A-Z]+) -> (?P<dst>[A-Z]+)\b")


async def _create_wait(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    env = {**cluster.env, "SOKOVAN_API": cluster.api, "SOKOVAN_TOKEN": cluster.token}
    proc = await asyncio.create_subprocess_exec(
        *SOKOVAN, "session", "create", "--image", "shell", "--resources", "cpu=1,mem=128m", *args, "--wait",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _moves(out: str) -> list[tuple[str, str]]:
    return [(m["src"], m["dst"]) for line in out.splitlines() if (m := MOVE.match(line))]


def _chained(moves: list[tuple[str, str]]) -> bool:
    """Each transition starts where the previous one ended (none missed, none printed twice)."""
    return all(a[1] == b[0] for a, b in itertools.pairwise(moves))


async def test_failing_batch_is_followed_to_error_and_exits_non_zero(cluster: Cluster) -> None:
    code, out, err = await _create_wait(cluster, "--type", "batch", "--command", "exit 3")
    assert code != 0, out + err
    moves = _moves(out)
    assert moves[0][0] == "PENDING" and ("RUNNING", "TERMINATING") in moves, out
    assert moves[-1] == ("TERMINATING", "ERROR"), out
    assert _chained(moves), out
    last = out.splitlines()[-1].split()
    assert last[1:4] == ["ERROR", "result=FAILURE", "cause=KERNEL_NONZERO_EXIT"], out


async def test_succeeding_batch_ends_terminated_success_and_exits_0(cluster: Cluster) -> None:
    code, out, err = await _create_wait(cluster, "--type", "batch", "--command", "echo hi")
    assert code == 0, out + err
    moves = _moves(out)
    assert moves[0][0] == "PENDING" and moves[-1][1] == "TERMINATED", out
    assert _chained(moves), out
    assert out.splitlines()[-1].split()[1:3] == ["TERMINATED", "result=SUCCESS"], out


async def test_interactive_stops_following_at_running(cluster: Cluster, admin: Client) -> None:
    code, out, err = await _create_wait(cluster, "--type", "interactive", "--name", "wait-interactive")
    assert code == 0, out + err
    assert out.splitlines()[-1].split()[1] == "RUNNING", out
    sid = out.splitlines()[0].split()[1]
    assert (await admin.get(sid))["status"] == "RUNNING"
    status, _ = await admin.request("DELETE", f"/v2/sessions/{sid}")
    assert status == 202
    await admin.wait_status(sid, {"TERMINATED"})
