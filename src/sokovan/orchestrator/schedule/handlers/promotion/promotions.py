"""Every session promotion, as data: from which statuses, on which kernel condition, to where.

- DetectStartupFailure: a session still starting whose kernel failed (image not to be had,
  creation failed, exited early with an error) goes TERMINATING with that kernel's cause, so its
  other kernels are destroyed and it ends ERROR.
- PromoteToPrepared: once no kernel is still waiting for its image.
  It and PromoteToRunning are `followed`: only agents' events meet their conditions, and the event
  path runs them as the events arrive, so a lane leaves it the sessions whose kernels just moved.
- PromoteToRunning: once every kernel has started. PREPARED is a target too: a manager that died
  after asking agents to start the kernels but before recording CREATING must not strand the session
  (a PREPARED session whose kernels were not started does not match: they are PREPARED).
- DetectTermination: RUNNING → TERMINATING as soon as any kernel has ended, with a failed kernel's cause.
- PromoteToTerminated: once no kernel is left alive; the cause decides TERMINATED or ERROR. A
  preemption victim of a `requeue` group is not ended: RequeuePreempted sends it back to PENDING.
"""

from __future__ import annotations

from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.orchestrator.schedule.evictions import requeue_victim
from sokovan.orchestrator.schedule.handler import KernelCondition
from sokovan.orchestrator.schedule.handlers.promotion.promote_sessions import Promotion
from sokovan.state.session_queries import KernelMatchType

S, K = SessionStatus, KernelStatus
ANY, NOT_ANY = KernelMatchType.ANY, KernelMatchType.NOT_ANY

DETECT_STARTUP_FAILURE = Promotion(
    "DetectStartupFailure",
    targets=frozenset({S.SCHEDULED, S.PREPARING, S.PULLING, S.PREPARED, S.CREATING}),
    kernels=KernelCondition(frozenset({K.ERROR, K.CANCELLED}), ANY),
    to=S.TERMINATING,
    cause_from_kernels=True,
)
PROMOTE_TO_PREPARED = Promotion(
    "PromoteToPrepared",
    targets=frozenset({S.SCHEDULED, S.PREPARING}),
    kernels=KernelCondition(frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING}), NOT_ANY),
    to=S.PREPARED,
    expires_in=frozenset({S.PREPARING}),
    phase=Phase.PULLING,
    followed=True,
)
PROMOTE_TO_RUNNING = Promotion(
    "PromoteToRunning",
    targets=frozenset({S.PREPARED, S.CREATING}),
    kernels=KernelCondition(
        frozenset({K.PENDING, K.SCHEDULED, K.PREPARING, K.PULLING, K.PREPARED, K.CREATING}), NOT_ANY
    ),
    to=S.RUNNING,
    expires_in=frozenset({S.CREATING}),
    phase=Phase.CREATING,
    followed=True,
)
DETECT_TERMINATION = Promotion(
    "DetectTermination",
    targets=frozenset({S.RUNNING}),
    kernels=KernelCondition(K.terminal(), ANY),
    to=S.TERMINATING,
    cause_from_kernels=True,
)
PROMOTE_TO_TERMINATED = Promotion(
    "PromoteToTerminated",
    targets=frozenset({S.TERMINATING}),
    kernels=KernelCondition(K.non_terminal(), NOT_ANY),
    to=S.TERMINATED,
    where=lambda: ~requeue_victim(),
)

PROMOTIONS = (
    DETECT_STARTUP_FAILURE,
    PROMOTE_TO_PREPARED,
    PROMOTE_TO_RUNNING,
    DETECT_TERMINATION,
    PROMOTE_TO_TERMINATED,
)
