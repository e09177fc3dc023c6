"""One simulation per policy combination, each measured; several at once on several cores.

The names are the registry's (`provisioner.registry`): whatever sequencer, queue policy or
selector is registered there can be simulated, and an unknown one is refused before any run with
the names that are known (`registry.UnknownStage`). A combination that leaves the queue policy or
the selector out keeps each scaling group's own from the trace.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor

from sokovan.orchestrator.provisioner import registry
from sokovan.sim.engine import Combination, simulate
from sokovan.sim.metrics import RunMetrics, measure
from sokovan.sim.trace import Trace


def combinations(
    policies: Sequence[str], queue_policies: Sequence[str] = (), selector: str | None = None
) -> list[Combination]:
    """Every policy x queue policy; `registry.UnknownStage` for a name nothing answers to."""
    for name in policies:
        registry.sequencer(name)
    for name in queue_policies:
        registry.queue_policy(name)
    if selector is not None:
        registry.selector(selector)
    queues: Sequence[str | None] = list(queue_policies) or [None]
    return [Combination(p, q, selector) for p, q in itertools.product(policies, queues)]


def run_one(trace: Trace, combination: Combination, seed: int) -> RunMetrics:
    began = time.perf_counter()
    outcome = simulate(trace, combination, seed)
    metrics = measure(
        outcome,
        combination.queue_policy or _own(g.queue_policy for g in trace.groups),
        combination.selector or _own(g.agent_selection for g in trace.groups),
    )
    metrics.seconds = time.perf_counter() - began
    return metrics


def run_all(
    trace: Trace, combos: Sequence[Combination], seed: int = 0, jobs: int | None = None
) -> list[RunMetrics]:
    """The runs in the order of `combos`; up to `jobs` at once (default: one per core)."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(combos)))
    if jobs == 1:
        return [run_one(trace, c, seed) for c in combos]
    # Workers from a fork server, not forked from this process: a process with other threads (an
    # etcd client's gRPC threads, in a test worker that ran one) forks children that can crash.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return list(pool.map(run_one, [trace] * len(combos), combos, [seed] * len(combos)))


def _own(names: Iterable[str]) -> str:
    """How a run that keeps each group's own setting names it: the one name, or all of them."""
    found = sorted(set(names))
    return ",".join(found) if found else "-"
