"""How long `sokovan simulate` takes: a synthetic trace (`sokovan.sim.synthetic`, 10,000 sessions
on 1,000 agents by default) replayed once per repeat under each policy combination, on one core.

    python -m scripts.bench.simulate                       # fifo / backfill, 3 repeats
    python -m scripts.bench.simulate --policy fifo,drf --queue-policy backfill,block
    BENCH_SIM_SESSIONS=2000 BENCH_SIM_AGENTS=200 python -m scripts.bench.simulate

Prints, per combination, each repeat's seconds, their median, and what the run measured (so that
a faster run that measures something else shows); then one JSON document. No database, no
daemons: the simulator is the manager's placement pipeline on a virtual clock.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from sokovan.sim.runs import combinations, run_one
from sokovan.sim.synthetic import synthetic_trace
from sokovan.sim.table import duration_text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=int(os.environ.get("BENCH_SIM_SESSIONS", 10_000)))
    parser.add_argument("--agents", type=int, default=int(os.environ.get("BENCH_SIM_AGENTS", 1_000)))
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--queue-policy", default="backfill")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    began = time.perf_counter()
    trace = synthetic_trace(args.sessions, args.agents, seed=args.seed)
    made = time.perf_counter() - began
    print(f"trace: {len(trace.sessions)} sessions on {len(trace.agents)} agents, made in {made:.2f}s")
    results = []
    for combo in combinations(args.policy.split(","), args.queue_policy.split(",")):
        times = []
        for _ in range(args.repeat):
            m = run_one(trace, combo, args.seed)
            times.append(round(m.seconds, 2))
        median = statistics.median(times)
        print(
            f"{m.label}: {median:.2f}s median of {times}; started {m.started}, wait p50 "
            f"{duration_text(m.wait_p50)} p95 {duration_text(m.wait_p95)} p99 {duration_text(m.wait_p99)}, "
            f"longest large {duration_text(m.longest_wait_large)}, fairness {m.fairness or 0:.3f}, "
            + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(m.utilization.items()))
        )
        results.append({"run": m.label, "seconds": times, "median": median, "started": m.started})
    print(json.dumps({"sessions": args.sessions, "agents": args.agents, "results": results}))


if __name__ == "__main__":
    main()
