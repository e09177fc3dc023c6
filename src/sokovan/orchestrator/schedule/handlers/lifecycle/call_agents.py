"""Ask each kernel's agent to do the next step for a batch of sessions: one handler, two uses.

`PREPARE_SESSIONS` (SCHEDULED → PREPARING): agents check for, and pull, the image; they answer
with kernel events (pulling, prepared, image-pull-failed) and PromoteToPrepared moves on.
`START_SESSIONS` (PREPARED → CREATING): agents start the kernels; they answer with kernel events
(running, creation-failed, terminated) and PromoteToRunning moves on.
A failed call is a failure of that stage (retried, then the session is rescheduled). The kernels
for one agent go in calls that stay under its body limit; a session too large for one call fails
alone, never the others of the batch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sokovan.common.rpc import AgentRPCClient, KernelSpec
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.orchestrator.schedule.agent_calls import Items, Target, fan_out, kernel_spec
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.state.session_reads import SessionWithKernels

S, K = SessionStatus, KernelStatus
# An AgentRPCClient method taking (rpc address, kernel specs, agent id).
AgentMethod = Callable[[AgentRPCClient, str, list[KernelSpec], str], Awaitable[object]]
_REQUEUE = TransitionStatus(S.PENDING, K.PENDING)


@dataclass(frozen=True)
class AgentCall:
    name: str
    phase: Phase
    session: SessionStatus  # the sessions it works on
    kernel: KernelStatus  # the kernels it sends
    method: AgentMethod
    to: TransitionStatus  # where success takes the session and the kernels sent


PREPARE_SESSIONS = AgentCall(
    name="PrepareSessions",
    phase=Phase.PREPARE,
    session=S.SCHEDULED,
    kernel=K.SCHEDULED,
    method=AgentRPCClient.check_and_pull,
    to=TransitionStatus(S.PREPARING, K.PREPARING),
)
START_SESSIONS = AgentCall(
    name="StartSessions",
    phase=Phase.START,
    session=S.PREPARED,
    kernel=K.PREPARED,
    method=AgentRPCClient.create_kernels,
    to=TransitionStatus(S.CREATING, K.CREATING),
)


class CallAgents(SessionHandler):
    def __init__(self, call: AgentCall, rpc: AgentRPCClient) -> None:
        self.name = call.name
        self.phase = call.phase
        self.targets = frozenset({call.session})
        self.kernels = KernelCondition(frozenset({call.kernel}))
        self.transitions = StatusTransitions(success=call.to, expired=_REQUEUE, give_up=_REQUEUE)
        self._call = call
        self._rpc = rpc

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        specs = {k.id: kernel_spec(s, k) for s in targets for k in s.kernels if k.status == self._call.kernel}
        sizes = {kid: len(spec.model_dump_json()) + 1 for kid, spec in specs.items()}  # and its comma

        async def send(target: Target, items: Items) -> object:
            agent_id, addr = target
            return await self._call.method(self._rpc, addr, [specs[k.id] for _, k in items], agent_id)

        return await fan_out(targets, lambda k: k.status == self._call.kernel, send, lambda k: sizes[k.id])
