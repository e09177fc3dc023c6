"""TERMINATING: ask the agents to destroy the session's live kernels.

Kernels move to TERMINATING when asked; the agents' terminated events end them and
PromoteToTerminated ends the session. A session whose kernels were all asked already is
skipped (it waits for the agents); past the terminate timeout the coordinator forces it to
its end. Handlers never decide the final status: `endings.final_status` does.

A preemption victim carries its `kill_grace` (`kill_grace`): its kernels are destroyed with that
grace (SIGTERM, SIGKILL after it; one destroy call per agent and grace), its straggler SIGKILL
waits until the grace has passed, and its TERMINATE timeout outlasts the grace (`judgement`).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence

from sokovan.common.rpc import AgentRPCClient
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import Phase
from sokovan.orchestrator.schedule.agent_calls import Items, Target, fan_out
from sokovan.orchestrator.schedule.handler import (
    KernelCondition,
    SessionHandler,
    SessionResultT,
    StatusTransitions,
    TransitionStatus,
)
from sokovan.orchestrator.schedule.kill_grace import force_after, kill_grace
from sokovan.state.session_reads import SessionWithKernels

_TO_DESTROY = KernelStatus.non_terminal() - {KernelStatus.TERMINATING}


class TerminateSessions(SessionHandler):
    targets = frozenset({SessionStatus.TERMINATING})
    kernels = KernelCondition(KernelStatus.non_terminal())
    phase = Phase.TERMINATE
    transitions = StatusTransitions(
        success=TransitionStatus(None, KernelStatus.TERMINATING),
        need_retry=None,
        expired=TransitionStatus(SessionStatus.TERMINATED, KernelStatus.TERMINATED),
        give_up=TransitionStatus(SessionStatus.TERMINATED, KernelStatus.TERMINATED),
    )

    def __init__(self, rpc: AgentRPCClient, force_after: Callable[[], float] = lambda: 60.0) -> None:
        self._rpc = rpc
        self._force_after = force_after

    async def execute(self, targets: Sequence[SessionWithKernels]) -> SessionResultT:
        to_ask = [s for s in targets if any(k.status in _TO_DESTROY for k in s.kernels)]
        waiting = {s.id: "waiting for agents to confirm termination" for s in targets if s not in to_ask}
        await self._force_stragglers([s for s in targets if s.id in waiting])

        async def call(target: Target, items: Items) -> object:
            agent_id, addr = target
            by_grace: dict[float | None, Items] = defaultdict(list)
            for session, kernel in items:
                by_grace[kill_grace(session.status_info)].append((session, kernel))
            for grace, group in by_grace.items():
                forced = any(bool(s.status_info.get("forced")) for s, _ in group)
                kernel_ids = [str(k.id) for _, k in group]
                await self._rpc.destroy_kernels(addr, kernel_ids, forced, agent_id, grace=grace)
            return None

        result = await fan_out(to_ask, lambda k: k.status in _TO_DESTROY and k.agent_id is not None, call)
        result.skipped.update(waiting)
        return result

    async def _force_stragglers(self, waiting: Sequence[SessionWithKernels]) -> None:
        """Sessions whose agents have not confirmed for a while get a forced destroy (SIGKILL) again:
        the first request may have been lost. Their status stays; the terminate timeout still rules.
        A session with a kill grace is not forced before its grace has passed."""
        now, default = dt.datetime.now(dt.UTC), self._force_after()

        def is_late(session: SessionWithKernels) -> bool:
            wait = force_after(default, kill_grace(session.status_info))
            return session.status_changed_at < now - dt.timedelta(seconds=wait)

        late = [s for s in waiting if is_late(s)]

        async def call(target: Target, items: Items) -> object:
            agent_id, addr = target
            return await self._rpc.destroy_kernels(addr, [str(k.id) for _, k in items], True, agent_id)

        if late:
            await fan_out(
                late, lambda k: k.status == KernelStatus.TERMINATING and k.agent_id is not None, call
            )
