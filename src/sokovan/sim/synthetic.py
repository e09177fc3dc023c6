"""A made-up trace with the shape of a busy GPU cluster, for the benchmark and the tests.

`agents` agents: nine in ten with 8 GPUs, 64 CPUs and 512 GiB in the scaling group `gpu`, the rest
with 64 CPUs and 256 GiB in `cpu`. `sessions` sessions from `users` users (in four projects of two
domains): in `gpu`, asking 1, 2, 4 or 8 GPUs (with 8 CPUs and 64 GiB per GPU), a few of them two
whole agents (multi-node); in `cpu`, 4 to 16 CPUs. Run times are log-normal around `median_run`
seconds; two in three sessions declare a `max_duration` (1, 2, 4, 8, 12 or 24 hours: the first that
covers what they expect), and one in twenty of those runs past it (the manager cuts it there).
Arrivals are a Poisson stream whose rate makes the offered load `load` of each group, with a busier
middle third (`burst` times the rate) during which a queue builds. Everything comes from
`random.Random(seed)`: the same arguments give the same trace.
"""

from __future__ import annotations

import datetime as dt
import math
import random

from sokovan.common.slots import ResourceSlots
from sokovan.sim.trace import Trace, TraceAgent, TraceGroup, TraceHeader, TraceSession

EPOCH = dt.datetime(2025, 1, 6, 9, 0, tzinfo=dt.UTC)
GIB = 2**30
CPU_IMAGE = "python:3.12"
GPU_IMAGES = ("pytorch:2.4-cuda12", "tensorflow:2.16-gpu")
# (GPUs per kernel, kernels, weight)
GPU_SHAPES = ((1, 1, 45), (2, 1, 22), (4, 1, 16), (8, 1, 14), (8, 2, 3))
CPU_SHAPES = ((4, 1, 50), (8, 1, 35), (16, 1, 15))
GPU_AGENT = ResourceSlots.parse({"cpu": 64, "mem": "512g", "cuda.device": 8})
CPU_AGENT = ResourceSlots.parse({"cpu": 64, "mem": "256g"})
DECLARED_HOURS = (1, 2, 4, 8, 12, 24)
SIGMA = 0.9  # of the log-normal run times


def synthetic_trace(
    sessions: int = 10_000,
    agents: int = 1_000,
    *,
    users: int = 24,
    seed: int = 0,
    load: float = 1.0,
    burst: float = 1.6,
    median_run: float = 1800.0,
) -> Trace:
    rng = random.Random(seed)
    mean_run = median_run * math.exp(SIGMA**2 / 2)
    cpu_agents = max(1, agents // 10)
    gpu_agents = agents - cpu_agents
    gpu_rate = load * gpu_agents * 8 / (_mean(GPU_SHAPES) * mean_run)
    cpu_rate = load * cpu_agents * 64 / (_mean(CPU_SHAPES) * mean_run)
    owners = [(f"user-{u:02d}", f"project-{u % 4}", f"domain-{u % 2}") for u in range(users)]
    out: list[TraceSession] = []
    t = 0.0
    for n in range(sessions):
        middle = 1 <= 3 * n // sessions < 2
        t += rng.expovariate((gpu_rate + cpu_rate) * (burst if middle else 1.0))
        gpu = rng.random() < gpu_rate / (gpu_rate + cpu_rate)
        amount, kernels = _pick(rng, GPU_SHAPES if gpu else CPU_SHAPES)
        # a few users send most sessions (Pareto), every third one is anyone's
        user, project, domain = owners[
            min(int(rng.paretovariate(1.2)) - 1, users - 1) if n % 3 else n % users
        ]
        run = min(rng.lognormvariate(math.log(median_run), SIGMA), 12 * median_run)
        out.append(
            TraceSession(
                id=f"s{n:06d}",
                scaling_group="gpu" if gpu else "cpu",
                access_key="AK" + user.upper().replace("-", ""),
                user=user,
                project=project,
                domain=domain,
                image=rng.choice(GPU_IMAGES) if gpu else CPU_IMAGE,
                resources=ResourceSlots.parse(
                    {"cpu": 8 * amount, "mem": 64 * GIB * amount, "cuda.device": amount}
                    if gpu
                    else {"cpu": amount, "mem": 4 * GIB * amount}
                ),
                cluster_size=kernels,
                cluster_mode="multi-node" if kernels > 1 else "single-node",
                created_at=EPOCH + dt.timedelta(seconds=round(t, 3)),
                max_duration=_declared(rng, run),
                run_seconds=round(run, 1),
            )
        )
    return Trace(
        header=TraceHeader(since=EPOCH, until=EPOCH + dt.timedelta(seconds=math.ceil(t))),
        groups=[TraceGroup(name="gpu"), TraceGroup(name="cpu")],
        agents=[
            TraceAgent(id=f"gpu-{i:04d}", scaling_group="gpu", available=GPU_AGENT, images=list(GPU_IMAGES))
            for i in range(gpu_agents)
        ]
        + [
            TraceAgent(id=f"cpu-{i:04d}", scaling_group="cpu", available=CPU_AGENT, images=[CPU_IMAGE])
            for i in range(cpu_agents)
        ],
        sessions=out,
    )


def _mean(shapes: tuple[tuple[int, int, int], ...]) -> float:
    return sum(a * k * w for a, k, w in shapes) / sum(w for *_, w in shapes)


def _pick(rng: random.Random, shapes: tuple[tuple[int, int, int], ...]) -> tuple[int, int]:
    amount, kernels, _ = rng.choices(shapes, weights=[w for *_, w in shapes])[0]
    return amount, kernels


def _declared(rng: random.Random, run: float) -> int | None:
    """Two in three declare a run time: the first of `DECLARED_HOURS` that covers what they
    expect (up to twice the run); one in twenty of those expects too little and is cut."""
    if rng.random() >= 2 / 3:
        return None
    expected = run * (1.0 + rng.random()) if rng.random() < 0.95 else run * 0.7
    hours = next((h for h in DECLARED_HOURS if h * 3600 >= expected), DECLARED_HOURS[-1])
    return hours * 3600
