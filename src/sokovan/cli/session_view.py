"""How `sokovan session info` shows one session: its fields as labelled lines (the empty ones
left out), its retry story in words, and its kernels with what each container ran."""

from __future__ import annotations

from typing import Any

import click

from sokovan.cli.preemption_view import preemption_rows
from sokovan.cli.units import slots_text


def print_session(s: dict[str, Any], raw_bytes: bool) -> None:
    """Print a session as `GET /v2/sessions/{id}` answers it (memory in binary units unless
    `raw_bytes`)."""
    info_ = s.get("status_info") or {}
    rows = [
        ("id", s["id"]),
        ("name", s["name"]),
        ("owner", f"{s['owner']} ({s['access_key']})"),
        ("status", s["status"] + (f"  result={s['result']}" if s.get("result") else "")),
        ("cause", cause_text(info_)),
        ("pending reason", info_.get("pending_reason")),
        *foresight_rows(s),
        ("type", s["type"]),
        ("image", s["image"]),
        ("command", s.get("command")),
        ("resources", slots_text(s["resources"], raw=raw_bytes) + " per kernel"),
        ("cluster", f"{s['cluster_size']} kernel(s), {s['cluster_mode']}"),
        ("scaling group", s["scaling_group"]),
        ("priority", s["priority"]),
        ("max duration", f"{s['max_duration']} s" if s.get("max_duration") else None),
        *preemption_rows(s),
        ("depends on", ", ".join(s.get("depends_on") or []) or None),
        ("created", s["created_at"]),
        ("status changed", s["status_changed_at"]),
        ("terminated", s.get("terminated_at")),
        (
            "retry",
            s["retry_state"] + (f", retry of {s['parent_session_id']}" if s.get("parent_session_id") else ""),
        ),
        ("retry cause", s.get("retry_cause")),
        ("retry decision", retry_decision(info_.get("retry"))),
        ("next attempt", s.get("retry_child_id")),
        ("retry chain", chain_text(s)),
    ]
    for label, value in rows:
        if value not in (None, ""):
            click.echo(f"{label + ':':<16}{value}")
    click.echo("kernels:")
    for k in s.get("kernels", []):
        exit_code = "" if k.get("exit_code") is None else f"  exit={k['exit_code']}"
        agent = k.get("agent_id") or "-"
        click.echo(f"  {k['id']}  {k['cluster_role']:<4}  {k['status']:<11}  agent={agent}{exit_code}")
        if k.get("image_digest"):  # a container kernel: what it runs, exactly
            click.echo(f"      image {k.get('image') or s['image']}@{k['image_digest']}")


def foresight_rows(s: dict[str, Any]) -> list[tuple[str, str | None]]:
    """A PENDING session's estimated start (with why) and its reservation, as lines."""
    info = s.get("status_info") or {}
    if s.get("status") != "PENDING" or "estimate_reason" not in info:
        return []
    at = info.get("estimated_start_at")
    rows: list[tuple[str, str | None]] = [
        ("expected start", f"{at or 'unknown'}  ({info['estimate_reason']})")
    ]
    reservation = info.get("reservation")
    if isinstance(reservation, dict):
        agents = ", ".join(reservation.get("agents") or [])
        rows.append(("reservation", f"{agents} at {reservation.get('at') or 'a time nothing bounds yet'}"))
    return rows


def cause_text(info: dict[str, Any]) -> str | None:
    """`CAUSE: message` (or the cause alone) for an ended session; None when there is no cause."""
    if not info.get("cause"):
        return None
    message = info.get("message")
    return f"{info['cause']}: {message}" if message else str(info["cause"])


def retry_decision(decision: Any) -> str | None:
    """What the retry engine decided when this attempt failed (status_info.retry)."""
    if not isinstance(decision, dict) or not decision.get("decision"):
        return None
    what = str(decision["decision"])
    if what == "scheduled" and decision.get("due_at"):
        return f"scheduled, due at {decision['due_at']}"
    if decision.get("reason"):
        return f"{what}: {decision['reason']}"
    return what


def chain_text(s: dict[str, Any]) -> str | None:
    """The retry chain, oldest first, this session in [brackets]; None outside a chain."""
    chain = s.get("retry_chain") or []
    if len(chain) < 2:
        return None
    return " -> ".join(f"[{i}]" if i == s["id"] else i for i in chain)
