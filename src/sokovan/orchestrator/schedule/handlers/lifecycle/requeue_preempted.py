"""TERMINATING → PENDING: a preemption victim of a `requeue` group whose kernels have all ended
goes back to the queue itself (CONTRACT section 9, Slurm's PreemptMode=REQUEUE).

It is the one path from TERMINATING back to PENDING. The session keeps its id, spec and priority;
its ended kernels make way for new PENDING ones (the history row of the move names the old ones),
`status_info.preempted_count` counts how often it was preempted, and what it carried as a victim
(cause, message, preempted_by, preempt_mode, kill_grace) is dropped. No retry child is made: it
never ends. Only such victims are read (`narrow`, SQL), and PromoteToTerminated leaves them alone.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import ColumnElement

from sokovan.common.preemption import PREEMPT_MODE, PREEMPTED_BY, PreemptionMode
from sokovan.common.types import FailureCause, KernelStatus, SessionStatus
from sokovan.orchestrator.schedule.evictions import VICTIM_KEYS, requeue_victim
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_queries import KernelMatchType
from sokovan.state.session_reads import SessionWithKernels


def requeued_reason(preemptor: object) -> str:
    return f"requeued after preemption by session {preemptor}"


class RequeuePreempted(SessionHandler):
    targets = frozenset({SessionStatus.TERMINATING})
    kernels = KernelCondition(KernelStatus.non_terminal(), KernelMatchType.NOT_ANY)
    transitions = StatusTransitions(
        success=TransitionStatus(SessionStatus.PENDING, None, drop_info=VICTIM_KEYS, replace_kernels=True)
    )

    def narrow(self, now: dt.datetime) -> ColumnElement[bool]:
        return requeue_victim()

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        result = SessionResultT()
        for session in targets:
            info = session.status_info
            if (
                info.get(PREEMPT_MODE) != PreemptionMode.REQUEUE
                or info.get("cause") != FailureCause.PREEMPTED
                or any(k.status in KernelStatus.non_terminal() for k in session.kernels)
            ):
                continue
            result.successes.append(session.id)
            result.success_info[session.id] = {
                "preempted_count": int(info.get("preempted_count") or 0) + 1,
                "pending_reason": requeued_reason(info.get(PREEMPTED_BY)),
            }
        return result
