"""A session's `status_info`: every key the system writes, with its type, in one place.

It is stored as JSONB and shown to users as is (`GET /v2/sessions/{id}`), so the keys are part of
the external shape. Writers build one of these instead of an ad-hoc dict; readers get one back from
the read model. Every key is optional: a session carries only what happened to it.
"""

from __future__ import annotations

from typing import Any, TypedDict

# `from` is a keyword, so this one is spelled the functional way.
Requeue = TypedDict("Requeue", {"from": str, "reason": str})


class SessionStatusInfo(TypedDict, total=False):
    # Why a PENDING session is still waiting ("0/2 agents fit: 2 insufficient cpu").
    pending_reason: str
    # How a session failed or was ended: a `FailureCause` value and a readable message.
    cause: str
    message: str
    # The kernel whose failure ended the session, and its exit code.
    failed_kernel: str
    exit_code: int
    # Sent back to PENDING (expired or given up after placement), and the agents to avoid next time.
    requeued: Requeue
    avoid_agents: list[str]
    # Notes kept beside a cause the session already carried (the first cause wins).
    gave_up: str
    timeout: str
    # The last failed attempt of a phase that is being retried.
    last_failure: str
    # The user asked for a forced termination (SIGKILL, no graceful stop).
    forced: bool
    # The retry engine's decision for a failed session (decision, cause, due_at, child, ...).
    retry: dict[str, Any]
    # Preemption (sokovan.common.preemption names the keys). A victim: who preempted it, what
    # happens once its kernels ended (terminate | requeue), its kernels' SIGTERM → SIGKILL grace;
    # a requeued session counts how often it was preempted.
    preempted_by: str
    preempt_mode: str
    kill_grace: float
    preempted_count: int
    # A preemptor: the agents whose room is held for it (one per kernel), until when, its victims.
    nominated_agents: list[str]
    nominated_until: str
    preempts: list[str]
    # Foresight (sokovan.common.foresight names the keys): when a PENDING session is expected to
    # start (ISO time, or null when nothing bounds it) and why; under `reserve`, its reservation
    # {"agents": [...], "at": ISO time or null}.
    estimated_start_at: str | None
    estimate_reason: str
    reservation: dict[str, Any]


def status_info_of(raw: Any) -> SessionStatusInfo:
    """The stored JSONB value (a dict, or NULL) as a SessionStatusInfo; unknown keys are kept."""
    info: SessionStatusInfo = {}
    if isinstance(raw, dict):
        info.update(raw)  # type: ignore[typeddict-item]
    return info
