"""Promotions run as agents' kernel events arrive, for the sessions those events touched.

The promotion handlers also run in their lanes (the safety net); here the same handlers, narrowed
to the sessions whose kernels just moved, run right after the events were applied, so a session
whose last kernel reported PREPARED (RUNNING, ended) moves on in the same breath instead of a lane
cycle later. Writes are the same guarded transitions with the same history: when a lane's cycle and
this path race, one of them moves the session and the other finds nothing to do.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sokovan.common.types import KernelStatus
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import Promotion
from sokovan.orchestrator.schedule.handlers.promotion.promotions import (
    DETECT_STARTUP_FAILURE,
    DETECT_TERMINATION,
    PROMOTE_TO_PREPARED,
    PROMOTE_TO_RUNNING,
    PROMOTE_TO_TERMINATED,
    PROMOTIONS,
)
from sokovan.state.kernel_writes import KernelMove

K = KernelStatus
_FAILED = (DETECT_STARTUP_FAILURE, DETECT_TERMINATION, PROMOTE_TO_TERMINATED)
# What a kernel entering a status may complete for its session, in the end lane's order.
FOLLOW: dict[str, tuple[Promotion, ...]] = {
    K.PREPARED.value: (PROMOTE_TO_PREPARED,),
    K.RUNNING.value: (PROMOTE_TO_RUNNING,),
    K.ERROR.value: _FAILED,
    K.CANCELLED.value: _FAILED,
    K.TERMINATED.value: (DETECT_TERMINATION, PROMOTE_TO_TERMINATED),
}


def promotions_for(moves: Sequence[KernelMove]) -> list[tuple[Promotion, list[uuid.UUID]]]:
    """The promotions to run, in table order, each with the sessions it may move."""
    wanted: dict[str, dict[uuid.UUID, None]] = {}
    for move in moves:
        for spec in FOLLOW.get(move.to_status, ()):
            wanted.setdefault(spec.name, {})[move.session_id] = None
    return [(spec, list(wanted[spec.name])) for spec in PROMOTIONS if spec.name in wanted]
