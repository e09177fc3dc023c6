"""Preemption's shared vocabulary (CONTRACT section 9): a scaling group's settings, which sessions
are preemptible by default, and the `status_info` keys the orchestrator, the API and the agents'
kill grace agree on.

- A scaling group's `preemption` is `{"mode": "off" | "terminate" | "requeue", "grace_period": s}`
  (0 to 3600, default 30); mode `off` (the default) never preempts.
- A session is preemptible by default when it is `batch`, not when it is `interactive` or
  `inference`; the create request may say otherwise.
- A victim carries `preempted_by` (the preemptor's id), `preempt_mode` (what happens once its
  kernels ended: `terminate` or `requeue`) and `kill_grace` (seconds between SIGTERM and SIGKILL
  for its kernels) in its status_info; a requeued session counts `preempted_count`.
- A preemptor carries `nominated_agents` (the agents whose room is held for it) and
  `nominated_until` (ISO time: the nomination lapses then if its victims have not ended; the grace
  period + `NOMINATION_SLACK`) and `preempts` (its victims' ids).
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from sokovan.common.types import SessionType

MAX_GRACE_PERIOD = 3600.0
DEFAULT_GRACE_PERIOD = 30.0
NOMINATION_SLACK = 60.0  # seconds past the grace period before a nomination lapses

# status_info keys
PREEMPTED_BY = "preempted_by"
PREEMPT_MODE = "preempt_mode"
KILL_GRACE = "kill_grace"
PREEMPTED_COUNT = "preempted_count"
NOMINATED_AGENTS = "nominated_agents"
NOMINATED_UNTIL = "nominated_until"
PREEMPTS = "preempts"


class PreemptionMode(enum.StrEnum):
    OFF = "off"
    TERMINATE = "terminate"
    REQUEUE = "requeue"


class PreemptionSettings(BaseModel):
    """A scaling group's `preemption`; unknown keys, an unknown mode or a grace out of range are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: PreemptionMode = PreemptionMode.OFF
    grace_period: float = Field(default=DEFAULT_GRACE_PERIOD, ge=0, le=MAX_GRACE_PERIOD, allow_inf_nan=False)


def default_preemptible(session_type: str) -> bool:
    """Batch sessions may be preempted unless they say otherwise; interactive and inference may not."""
    return session_type == SessionType.BATCH
