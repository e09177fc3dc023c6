"""Fan a batch of kernels out to their agents: one RPC per agent, all agents concurrently."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

from sokovan.common.rpc import KernelSpec, RPCError
from sokovan.orchestrator.hooks import hook_for
from sokovan.orchestrator.schedule.handler import SessionResultT
from sokovan.state.session_reads import KernelInfo, SessionWithKernels

Target = tuple[str, str]  # (agent id, rpc address)
Items = list[tuple[SessionWithKernels, KernelInfo]]


def kernel_spec(session: SessionWithKernels, kernel: KernelInfo) -> KernelSpec:
    hook = hook_for(session)
    environ = {**(hook.kernel_environ(session) if hook else {}), **session.environ}
    return KernelSpec(
        kernel_id=str(kernel.id),
        session_id=str(session.id),
        image=session.image,
        session_type=session.type,
        command=session.command,
        environ=environ,
        slots=kernel.occupied_slots.to_json(),
        cluster_role=kernel.cluster_role,
        cluster_idx=kernel.cluster_idx,
    )


async def fan_out(
    sessions: Sequence[SessionWithKernels],
    pick: Callable[[KernelInfo], bool],
    call: Callable[[Target, Items], Awaitable[object]],
) -> SessionResultT:
    """Call `call((agent_id, agent_addr), [(session, kernel), ...])` for the kernels `pick` selects.

    A session succeeds when every call that carried one of its kernels succeeded; a session
    with no kernel to send succeeds at once. A kernel placed on an agent that is unknown fails.
    """
    result = SessionResultT()
    per_agent: dict[Target, Items] = defaultdict(list)
    failed: dict[uuid.UUID, str] = {}
    for session in sessions:
        for kernel in session.kernels:
            if not pick(kernel):
                continue
            if kernel.agent_addr is None or kernel.agent_id is None:
                failed[session.id] = f"kernel {kernel.id} has no reachable agent"
                continue
            per_agent[(kernel.agent_id, kernel.agent_addr)].append((session, kernel))
    targets = list(per_agent)
    outcomes = await asyncio.gather(*(call(t, per_agent[t]) for t in targets), return_exceptions=True)
    for target, outcome in zip(targets, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            reason = str(outcome) if isinstance(outcome, RPCError) else f"agent {target[0]}: {outcome!r}"
            for session, _ in per_agent[target]:
                failed.setdefault(session.id, reason)
    for session in sessions:
        if session.id in failed:
            result.failures[session.id] = failed[session.id]
        else:
            result.successes.append(session.id)
    return result
