"""`sokovan simulate`: replay a trace through the real placement pipeline under other policies
and compare (docs/scheduling.md, "The what-if simulator")."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sokovan.orchestrator.provisioner import registry
from sokovan.sim.runs import combinations, run_all
from sokovan.sim.table import table
from sokovan.sim.trace import TraceError, read_trace


def _names(text: str | None) -> list[str]:
    return [p.strip() for p in (text or "").split(",") if p.strip()]


@click.command()
@click.option(
    "--trace",
    "trace_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A trace (JSON Lines: `sokovan trace export`, docs/trace-format.md).",
)
@click.option(
    "--policy",
    required=True,
    metavar="P[,P…]",
    help=f"Schedulers to compare (registered: {', '.join(sorted(registry.SEQUENCERS))}).",
)
@click.option(
    "--queue-policy",
    default=None,
    metavar="Q[,Q…]",
    help=f"Queue policies to compare ({', '.join(registry.QUEUE_POLICIES)}); default: each group's own.",
)
@click.option(
    "--selector",
    default=None,
    metavar="S",
    help=f"Agent selection ({', '.join(sorted(registry.SELECTORS))}); default: each group's own.",
)
@click.option("--seed", default=0, show_default=True, type=int, help="Same trace and seed, same result.")
@click.option(
    "--json", "json_out", type=click.Path(dir_okay=False, path_type=Path), help="Write the runs as JSON."
)
@click.option(
    "--html", "html_out", type=click.Path(dir_okay=False, path_type=Path), help="Write an HTML report."
)
@click.option(
    "--jobs", type=click.IntRange(min=1), default=None, help="Runs at once (default: one per core)."
)
def simulate(
    trace_path: Path,
    policy: str,
    queue_policy: str | None,
    selector: str | None,
    seed: int,
    json_out: Path | None,
    html_out: Path | None,
    jobs: int | None,
) -> None:
    """Replay TRACE once per policy x queue policy and print one row per run, side by side."""
    policies = _names(policy)
    if not policies:
        raise click.BadParameter("name at least one scheduler", param_hint="--policy")
    try:
        combos = combinations(policies, _names(queue_policy), selector)
    except registry.UnknownStage as exc:
        raise click.BadParameter(str(exc), param_hint=_hint(str(exc))) from None
    try:
        trace = read_trace(trace_path)
    except TraceError as exc:
        raise click.BadParameter(str(exc), param_hint="--trace") from None
    runs = run_all(trace, combos, seed, jobs)
    click.echo(table(runs))
    if json_out is not None:
        doc = {"runs": [r.to_json() for r in runs]}
        _write(json_out, json.dumps(doc, indent=1) + "\n")
    if html_out is not None:
        from sokovan.sim.report_html import render  # matplotlib: a second to import, only for this

        span = f"{len(trace.sessions)} sessions on {len(trace.agents)} agents, seed {seed}"
        _write(html_out, render(runs, f"Simulated policies: {trace_path.name}", span))


def _hint(message: str) -> str:
    if message.startswith("unknown queue policy"):
        return "--queue-policy"
    if message.startswith("unknown agent selection"):
        return "--selector"
    return "--policy"


def _write(path: Path, content: str) -> None:
    try:
        path.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from exc
