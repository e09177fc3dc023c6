"""The simulator's report: one self-contained HTML file (no script, no network) with the runs side
by side in a table and three charts drawn by matplotlib, embedded as PNG data URLs: the wait CDF of
each run, each slot's utilization over time per run, and each user's mean wait per run.

matplotlib (docs/scheduling.md says why) draws off screen (the Agg backend, chosen per figure, so
that importing this module changes no global backend).
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sokovan.sim.metrics import RunMetrics
from sokovan.sim.table import duration_text

MAX_POINTS = 4000  # per line of the utilization chart: thinned beyond (each change is a point)
MAX_USERS = 30  # bars of the per-user chart: the users with the most sessions

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1d2430; }
h1 { font-size: 22px; margin: 0 0 4px; }
p.sub { color: #5a6472; margin: 0 0 18px; }
table { border-collapse: collapse; margin: 0 0 24px; font-size: 14px; }
th, td { border: 1px solid #d5dae1; padding: 5px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead th { background: #f1f4f8; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(620px, 1fr)); gap: 18px; }
figure { margin: 0; border: 1px solid #e3e7ec; padding: 8px; }
figcaption { font-size: 13px; color: #5a6472; padding: 4px 2px 0; }
img.chart { width: 100%; height: auto; display: block; }
"""


def render(runs: Sequence[RunMetrics], title: str, subtitle: str = "") -> str:
    charts = [
        ("wait-cdf", "Wait until start: share of started sessions that waited at most x", _wait_cdf(runs)),
        ("utilization", "Utilization per slot type over time (share of capacity in use)", _utilization(runs)),
        ("user-waits", "Mean wait per user (the users with the most sessions)", _user_waits(runs)),
    ]
    figures = "\n".join(
        f'<figure><img class="chart" id="chart-{key}" alt="{html.escape(caption)}" '
        f'src="data:image/png;base64,{png}"><figcaption>{html.escape(caption)}</figcaption></figure>'
        for key, caption, png in charts
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f'<h1>{html.escape(title)}</h1><p class="sub">{html.escape(subtitle)}</p>'
        f'{_table(runs)}<div class="charts">{figures}</div></body></html>\n'
    )


def _table(runs: Sequence[RunMetrics]) -> str:
    slots = sorted({k for r in runs for k in r.utilization})
    rows: list[tuple[str, list[str]]] = [
        ("queue policy", [r.queue_policy for r in runs]),
        ("selector", [r.selector for r in runs]),
        ("started", [str(r.started) for r in runs]),
        ("never started", [str(r.not_started) for r in runs]),
        ("wait p50", [duration_text(r.wait_p50) for r in runs]),
        ("wait p95", [duration_text(r.wait_p95) for r in runs]),
        ("wait p99", [duration_text(r.wait_p99) for r in runs]),
        ("longest wait of a large session", [duration_text(r.longest_wait_large) for r in runs]),
        (
            "fairness (Jain, users' mean waits)",
            ["-" if r.fairness is None else f"{r.fairness:.3f}" for r in runs],
        ),
        *[(f"utilization {s}", [f"{100 * r.utilization.get(s, 0.0):.1f}%" for r in runs]) for s in slots],
    ]
    head = "".join(f"<th>{html.escape(r.policy)}</th>" for r in runs)
    body = "".join(
        f"<tr><td>{html.escape(name)}</td>{''.join(f'<td>{html.escape(v)}</td>' for v in values)}</tr>"
        for name, values in rows
    )
    return f'<table id="runs"><thead><tr><th>scheduler</th>{head}</tr></thead><tbody>{body}</tbody></table>'


def _png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _wait_cdf(runs: Sequence[RunMetrics]) -> str:
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for r in runs:
        n = len(r.waits)
        if n:
            ax.step([w / 60 for w in r.waits], [(i + 1) / n for i in range(n)], where="post", label=r.label)
    ax.set_xlabel("wait (minutes)")
    ax.set_ylabel("share of started sessions")
    ax.set_ylim(0, 1.02)
    ax.set_xscale("symlog", linthresh=1)  # linear to a minute, logarithmic beyond
    ax.set_xlim(left=0)
    _legend(ax)
    return _png(fig)


def _utilization(runs: Sequence[RunMetrics]) -> str:
    slots = sorted({k for r in runs for k in r.utilization})
    fig = Figure(figsize=(7.5, 1.2 + 2.0 * max(len(slots), 1)), layout="constrained")
    axes = fig.subplots(max(len(slots), 1), 1, sharex=True, squeeze=False)[:, 0]
    for ax, slot in zip(axes, slots, strict=False):
        for r in runs:
            points = _thin(r.series)
            ax.step(
                [h for h, _ in points], [u.get(slot, 0.0) for _, u in points], where="post", label=r.label
            )
        ax.set_ylabel(slot)
        ax.set_ylim(0, 1.05)
    axes[-1].set_xlabel("hours from the start of the trace")
    _legend(axes[0])
    return _png(fig)


def _user_waits(runs: Sequence[RunMetrics]) -> str:
    counts: dict[str, int] = {}
    for r in runs:
        for user, row in r.by_user.items():
            counts[user] = max(counts.get(user, 0), int(row["started"] or 0) + int(row["waiting"] or 0))
    users = sorted(sorted(counts), key=lambda u: -counts[u])[:MAX_USERS]
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / max(len(runs), 1)
    for i, r in enumerate(runs):
        waits = [float(r.by_user.get(u, {}).get("mean_wait") or 0.0) / 60 for u in users]
        ax.bar([x + i * width for x in range(len(users))], waits, width, label=r.label)
    ax.set_xticks(
        [x + 0.4 - width / 2 for x in range(len(users))], users, rotation=60, ha="right", fontsize=8
    )
    ax.set_ylabel("mean wait (minutes)")
    _legend(ax)
    return _png(fig)


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")


def _thin(points: Sequence[tuple[float, dict[str, float]]]) -> Sequence[tuple[float, dict[str, float]]]:
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    return [points[int(i * step)] for i in range(MAX_POINTS)] + [points[-1]]
