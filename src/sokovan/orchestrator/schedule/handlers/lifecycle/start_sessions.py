"""PREPARED → CREATING: ask each kernel's agent to start it.

The agents answer with kernel events (running, creation-failed, terminated);
PromoteToRunning moves the session on once every kernel has started.
"""

from __future__ import annotations

from collections.abc import Sequence

from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.orchestrator.handler_types import (
    HandlerResult,
    LifecycleHandler,
    SessionWithKernels,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.orchestrator.schedule.agent_calls import Items, Target, fan_out, kernel_spec


class StartSessions(LifecycleHandler):
    phase = "start"

    @classmethod
    def name(cls) -> str:
        return "StartSessions"

    @property
    def target_session_statuses(self) -> frozenset[SessionStatus]:
        return frozenset({SessionStatus.PREPARED})

    @property
    def target_kernel_statuses(self) -> frozenset[KernelStatus] | None:
        return frozenset({KernelStatus.PREPARED})

    @classmethod
    def status_transitions(cls) -> StatusTransitions:
        return StatusTransitions(
            success=TransitionStatus(SessionStatus.CREATING, KernelStatus.CREATING),
            need_retry=None,
            expired=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
            give_up=TransitionStatus(SessionStatus.PENDING, KernelStatus.PENDING),
        )

    def __init__(self, rpc: AgentRPCClient) -> None:
        self._rpc = rpc

    async def execute(self, targets: Sequence[SessionWithKernels]) -> HandlerResult:
        async def call(target: Target, items: Items) -> object:
            agent_id, addr = target
            return await self._rpc.create_kernels(addr, [kernel_spec(s, k) for s, k in items], agent_id)

        return await fan_out(targets, lambda k: k.status == KernelStatus.PREPARED, call)
