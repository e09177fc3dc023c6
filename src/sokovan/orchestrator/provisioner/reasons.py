"""Every placement "why not" of the provisioner, named once.

Users read these words in `status_info.pending_reason` (e.g. `0/2 agents fit: 2 insufficient cpu`)
and in a dry run's answer, and the cancel message of a session that can never be placed; tests
compare them byte for byte. The stages use the names and formatters here, never a literal.

- `AgentRefusal` and `insufficient`: why one agent cannot take a session; counted per reason.
- `agents_fit`, `multi_node_needs`, `queued_behind`: what the pipeline makes of those counts.
- the validators' waits and rejects, each a formatter named after what it says.
- `unknown_scaling_group`, `rejected`, `WAITING`: a dry run's answers besides the plan's own.
- `filled_up`, `PLACED_MEANWHILE`: why the allocator left a session for the next cycle.
- `no_victims`, `waiting_for_victims`, `preempted_by`: preemption's words (the preemptor's reason
  to wait, the victim's message).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping

from sokovan.common.types import AgentStatus

__all__ = [
    "MISSING_DEPENDENCY",
    "NO_SESSION_TYPES",
    "PLACED_MEANWHILE",
    "WAITING",
    "AgentRefusal",
    "agents_fit",
    "at_concurrency_limit",
    "dependency_ended",
    "filled_up",
    "insufficient",
    "multi_node_needs",
    "no_victims",
    "not_ready",
    "over_pending_limit",
    "preempted_by",
    "queued_behind",
    "quota_exceeded",
    "quota_violation",
    "rejected",
    "type_not_allowed",
    "unknown_scaling_group",
    "waiting_for_dependencies",
    "waiting_for_victims",
]


# -- one agent --------------------------------------------------------------------------------


class AgentRefusal(enum.StrEnum):
    """Why an agent cannot take a session, apart from room (`insufficient`)."""

    NOT_READY = f"not {AgentStatus.READY.value}"
    UNSCHEDULABLE = "not schedulable"
    IMAGE_NOT_OFFERED = "image not offered"
    AT_KERNEL_LIMIT = "at kernel limit"
    HELD = "room held for a preempting session"
    RESERVED = "room reserved for a session queued ahead"


def not_ready(status: str) -> str:
    """The agent is in another lifecycle status than READY, named (e.g. `not READY (DRAINING)`)."""
    return f"{AgentRefusal.NOT_READY.value} ({status})"


def insufficient(slot: str) -> str:
    """The agent lacks room in `slot` (the first short slot, in the request's order)."""
    return f"insufficient {slot}"


# -- the pipeline -----------------------------------------------------------------------------


def agents_fit(total: int, fits: int, reasons: Mapping[str, int]) -> str:
    """`2/5 agents fit: 2 insufficient cpu, 1 not READY`: the most frequent reason first, ties by name."""
    parts = ", ".join(
        f"{n} {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    return f"{fits}/{total} agents fit" + (f": {parts}" if parts else "")


def multi_node_needs(kernels: int, detail: str) -> str:
    """A multi-node session needs one agent per kernel; `detail` is `agents_fit`'s summary."""
    return f"multi-node needs {kernels} agents: {detail}"


def queued_behind(blocker: uuid.UUID) -> str:
    """Queue policy `block`: an earlier session that did not fit holds its place."""
    return f"queued behind session {blocker} (queue policy: block)"


# -- the validators ---------------------------------------------------------------------------


def at_concurrency_limit(running: int, cap: int) -> str:
    return f"keypair at its concurrency limit ({running}/{cap} sessions)"


def over_pending_limit(cap: int) -> str:
    return f"keypair has more than {cap} pending sessions; older ones go first"


def quota_violation(scope: str, excess: Iterable[str]) -> str:
    """One violated scope: `project 'p': cpu 6 > 4, mem 8g > 4g`."""
    return f"{scope}: {', '.join(excess)}"


def quota_exceeded(violations: Iterable[str]) -> str:
    return "quota exceeded: " + "; ".join(violations)


# The status a dependency is reported in when it does not exist (any more).
MISSING_DEPENDENCY = "missing"


def dependency_ended(dependency: uuid.UUID, status: str, result: str | None) -> str:
    """A dependency ended other than TERMINATED / SUCCESS (or is missing): it never will."""
    how = f"{status}/{result}" if result else status
    return f"dependency {dependency} ended {how}"


def waiting_for_dependencies(waiting: Iterable[tuple[uuid.UUID, str]]) -> str:
    """The dependencies not ended yet, each with its current status."""
    return "waiting for dependencies: " + ", ".join(f"{dep} ({status})" for dep, status in waiting)


# What a scaling group that allows no session type at all says it allows.
NO_SESSION_TYPES = "none"


def type_not_allowed(scaling_group: str, session_type: str, allowed: Iterable[str]) -> str:
    allows = ", ".join(sorted(allowed)) or NO_SESSION_TYPES
    return f"scaling group {scaling_group!r} no longer allows {session_type} sessions (allows: {allows})"


# -- a dry run --------------------------------------------------------------------------------


def unknown_scaling_group(name: str) -> str:
    return f"scaling group {name!r} does not exist"


def rejected(message: str, cause: str) -> str:
    """A session that can never be placed: the reject's message and its cause."""
    return f"{message} ({cause})"


# A session the plan neither placed, rejected nor gave a reason for.
WAITING = "waiting"


# -- the allocator ----------------------------------------------------------------------------


def filled_up(agents: Iterable[str]) -> str:
    """Another manager placed on these agents meanwhile: the session is tried again next cycle."""
    return f"agent {', '.join(agents)} filled up meanwhile; retrying"


PLACED_MEANWHILE = "placed meanwhile by another scheduler"


# -- preemption -------------------------------------------------------------------------------


def no_victims(reason: str) -> str:
    """Preemption is on, but evicting lower-priority sessions would not make the session fit."""
    return f"{reason}; no lower-priority preemptible sessions would free enough room"


def waiting_for_victims(victims: Iterable[uuid.UUID], agents: Iterable[str]) -> str:
    """A nominated preemptor waits for its victims to end on its agents."""
    where = sorted(set(agents))
    noun = "agent" if len(where) == 1 else "agents"
    return (
        f"waiting for preempted sessions {', '.join(str(v) for v in victims)} "
        f"to end on {noun} {', '.join(where)}"
    )


def preempted_by(preemptor: uuid.UUID, priority: int) -> str:
    """A victim's message."""
    return f"preempted by session {preemptor} (priority {priority})"
