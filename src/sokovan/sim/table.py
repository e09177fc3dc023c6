"""The runs side by side in the terminal: one aligned row per combination."""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.sim.metrics import RunMetrics


def duration_text(seconds: float | None) -> str:
    """`-`, `42s`, `7m05s`, `3h12m`, `2d04h`: short, and exact enough to compare runs."""
    if seconds is None:
        return "-"
    s = round(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 and seconds != int(seconds) else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def table(runs: Sequence[RunMetrics]) -> str:
    slots = sorted({k for r in runs for k in r.utilization})
    head = [
        "policy", "queue", "selector", "started", "waiting", "wait p50", "wait p95", "wait p99",
        "large max", "fairness", *[f"util {s}" for s in slots],
    ]  # fmt: skip
    rows = [
        [
            r.policy,
            r.queue_policy,
            r.selector,
            str(r.started),
            str(r.not_started),
            duration_text(r.wait_p50),
            duration_text(r.wait_p95),
            duration_text(r.wait_p99),
            duration_text(r.longest_wait_large),
            "-" if r.fairness is None else f"{r.fairness:.3f}",
            *[f"{100 * r.utilization.get(s, 0.0):.1f}%" for s in slots],
        ]
        for r in runs
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
    left = 3  # the names are left-aligned, the numbers right-aligned

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return "\n".join(line(r) for r in [head, *rows])
