"""The simulator against the real thing: a real manager and a hollow fleet run a few dozen
sessions of declared run times that queue; the run is exported (`sokovan trace export`) and
replayed (`sokovan simulate`) under the same policy, and the order in which sessions started is
compared (issue 37: "gives the same placement order as that run ... or lists where and why it
differs").

Where the orders differ, each swapped pair must be one the model explains:

- same wave: both started within `WAVE` seconds of each other on the cluster. Sessions placed by
  one cycle move to RUNNING one by one as their agents report them started, so their order on the
  cluster is the order of those reports, not of the plan; the simulation starts a plan's sessions
  at the same instant in plan order.
- near ends: in the simulation both started within `WAVE` seconds of each other (room freed by
  ends that close together may be seen by one cycle or two on the cluster, by the order its
  agents' reports arrive in).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sokovan.harness import SOKOVAN, truncate_tables
from sokovan.sim.trace import read_trace
from tests.e2e.cluster import Client, Cluster

AGENTS, SLOTS = 3, "cpu=2,mem=4g"
SESSIONS = 30
WAVE = 1.0  # seconds
ENDED = {"TERMINATED", "ERROR", "CANCELLED"}


@pytest.fixture
def cluster(service_env: dict[str, str], tmp_path: Path, db_url: str) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    c = Cluster(service_env, tmp_path / "cluster")
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("replay", SLOTS, simulate=AGENTS)
        asyncio.run(c.wait_ready(AGENTS))
        yield c
    finally:
        c.stop()


async def _run_sessions(c: Cluster) -> list[str]:
    rng = random.Random(37)
    async with aiohttp.ClientSession() as http:
        admin = Client(http, c.api, c.token)
        ids = []
        for n in range(SESSIONS):
            seconds = rng.choice([2, 3, 4, 5])
            s = await admin.create(
                name=f"replay-{n:02d}",
                image="python:3",
                type="batch",
                command=f"sleep {seconds}",
                resources={"cpu": rng.choice([1, 1, 2]), "mem": "256m"},
                max_duration=seconds + 30,
            )
            ids.append(s["id"])
        for sid in ids:
            done = await admin.wait_status(sid, ENDED, within=120)
            assert (done["status"], done["result"]) == ("TERMINATED", "SUCCESS"), done
        return ids


def _sokovan(c: Cluster, *args: str) -> str:
    proc = subprocess.run([*SOKOVAN, *args], env=c.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def differences(
    real: dict[str, dt.datetime], simulated: list[tuple[str, dt.datetime]]
) -> list[tuple[str, str, str | None]]:
    """Every pair the simulation started in one order and the cluster in the other, with the
    explanation that holds for it (None: none does)."""
    sim_rank = {sid: i for i, (sid, _) in enumerate(simulated)}
    sim_at = dict(simulated)
    real_order = sorted(real, key=lambda s: (real[s], sim_rank[s]))
    out = []
    for i, a in enumerate(real_order):
        for b in real_order[i + 1 :]:
            if sim_rank[b] > sim_rank[a]:
                continue  # same order in both
            why = None
            if abs((real[a] - real[b]).total_seconds()) <= WAVE:
                why = "same wave on the cluster"
            elif abs((sim_at[a] - sim_at[b]).total_seconds()) <= WAVE:
                why = "near ends in the simulation"
            out.append((b, a, why))
    return out


def test_replaying_a_real_run_gives_its_placement_order(cluster: Cluster, tmp_path: Path) -> None:
    ids = asyncio.run(_run_sessions(cluster))
    trace_path, result_path = tmp_path / "trace.jsonl", tmp_path / "sim.json"
    _sokovan(cluster, "trace", "export", "--since", "30m", "--out", str(trace_path))
    trace = read_trace(trace_path)
    assert sorted(s.id for s in trace.sessions) == sorted(ids)
    assert {g.scheduler for g in trace.groups} == {"fifo"}
    _sokovan(cluster, "simulate", "--trace", str(trace_path), "--policy", "fifo", "--json", str(result_path))
    run: dict[str, Any] = json.loads(result_path.read_text())["runs"][0]
    assert (run["queue_policy"], run["started"]) == ("backfill", SESSIONS)

    real = {s.id: s.started_at for s in trace.sessions if s.started_at is not None}
    assert len(real) == SESSIONS
    simulated = [(p["session"], dt.datetime.fromisoformat(p["start"])) for p in run["placements"]]
    diffs = differences(real, simulated)
    names = {s.id: s.name for s in trace.sessions}
    report = [
        f"{names[a]} before {names[b]} in the simulation: {why or 'UNEXPLAINED'}" for a, b, why in diffs
    ]
    print(f"{len(diffs)} pairs in another order:", *report, sep="\n  ")
    assert all(why for *_, why in diffs), "\n".join(report)
    # queueing happened: most sessions waited, so the order is the scheduler's, not the arrivals'
    waited = [
        p for p in run["placements"] if p["start"] > min(s.created_at for s in trace.sessions).isoformat()
    ]
    assert len(waited) > SESSIONS // 2
