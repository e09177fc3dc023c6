"""How the CLI shows preemption (CONTRACT section 9): a session's lines in `session info`, the
dry run's victims, and a `session.preempted` event in `watch` / `create --wait`."""

from __future__ import annotations

from typing import Any

from sokovan.common.preemption import (
    NOMINATED_AGENTS,
    NOMINATED_UNTIL,
    PREEMPT_MODE,
    PREEMPTED_BY,
    PREEMPTED_COUNT,
    PREEMPTS,
)


def _names(value: Any) -> str | None:
    """A list of ids or agent names as "a, b"; None for anything else or an empty list."""
    if not isinstance(value, list) or not value:
        return None
    return ", ".join(str(v) for v in value)


def preemption_rows(s: dict[str, Any]) -> list[tuple[str, str | None]]:
    """`session info` rows: preemptible; for a victim whom it was preempted by (and what follows);
    for a preemptor the sessions it waits for and where; how often a requeued session was
    preempted. Rows whose value is None are not printed."""
    info = s.get("status_info") or {}
    by = info.get(PREEMPTED_BY)
    mode = info.get(PREEMPT_MODE)
    victims, agents = _names(info.get(PREEMPTS)), _names(info.get(NOMINATED_AGENTS))
    waiting = None
    if victims or agents:
        waiting = f"{victims or 'its victims'} on {agents or 'its agents'}"
        if info.get(NOMINATED_UNTIL):
            waiting += f" (room held until {info[NOMINATED_UNTIL]})"
    count = info.get(PREEMPTED_COUNT)
    times = None
    if isinstance(count, int) and not isinstance(count, bool) and count > 0:
        times = f"{count} time{'s' if count != 1 else ''} (requeued)"
    preemptible = s.get("preemptible")
    return [
        ("preemptible", None if preemptible is None else ("yes" if preemptible else "no")),
        ("preempted by", f"{by}" + (f" ({mode})" if mode else "") if by else None),
        ("waiting for", waiting),
        ("preempted", times),
    ]


def dry_run_victims(answer: dict[str, Any]) -> str | None:
    """ "by preempting a, b" when the dry run's placement needs victims; None otherwise."""
    victims = _names(answer.get("preempts"))
    return f"by preempting {victims}" if victims else None


def preempted_event(data: dict[str, Any]) -> str | None:
    """A `session.preempted` event's line (without its time): "preempted by <id> on agent <a>"."""
    raw = data.get("detail")
    detail: dict[str, Any] = raw if isinstance(raw, dict) else {}
    by = data.get(PREEMPTED_BY) or detail.get(PREEMPTED_BY)
    if not by:
        return None
    line = f"preempted by {by}"
    agent = data.get("agent_id") or detail.get("agent_id")
    if agent:
        line += f" on agent {agent}"
    mode = data.get(PREEMPT_MODE) or detail.get(PREEMPT_MODE)
    if mode:
        line += f" ({mode})"
    return line
