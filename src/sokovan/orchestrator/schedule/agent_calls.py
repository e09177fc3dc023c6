"""Fan a batch of kernels out to their agents: one RPC per agent, all agents concurrently."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence

from sokovan.common.rpc import KernelSpec, RPCError
from sokovan.orchestrator.handler_types import HandlerResult, KernelInfo, SessionWithKernels

Call = Callable[[str, list[KernelInfo], list[SessionWithKernels]], Awaitable[object]]


def kernel_spec(session: SessionWithKernels, kernel: KernelInfo) -> KernelSpec:
    return KernelSpec(
        kernel_id=str(kernel.id),
        session_id=str(session.id),
        image=session.image,
        session_type=session.type,
        command=session.command,
        environ=session.environ,
        slots=kernel.occupied_slots.to_json(),
        cluster_role=kernel.cluster_role,
        cluster_idx=kernel.cluster_idx,
    )


async def fan_out(
    sessions: Sequence[SessionWithKernels],
    pick: Callable[[KernelInfo], bool],
    call: Callable[[str, list[tuple[SessionWithKernels, KernelInfo]]], Awaitable[object]],
) -> HandlerResult:
    """Call `call(agent_addr, [(session, kernel), ...])` for the kernels `pick` selects.

    A session succeeds when every call that carried one of its kernels succeeded; a session
    with no kernel to send succeeds at once. A kernel placed on an agent that is unknown fails.
    """
    result = HandlerResult()
    per_agent: dict[str, list[tuple[SessionWithKernels, KernelInfo]]] = defaultdict(list)
    failed: dict[uuid.UUID, str] = {}
    for session in sessions:
        for kernel in session.kernels:
            if not pick(kernel):
                continue
            if kernel.agent_addr is None:
                failed[session.id] = f"kernel {kernel.id} has no reachable agent"
                continue
            per_agent[kernel.agent_addr].append((session, kernel))
    addrs = list(per_agent)
    outcomes = await asyncio.gather(*(call(a, per_agent[a]) for a in addrs), return_exceptions=True)
    for addr, outcome in zip(addrs, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            reason = str(outcome) if isinstance(outcome, RPCError) else f"{addr}: {outcome!r}"
            for session, _ in per_agent[addr]:
                failed.setdefault(session.id, reason)
    for session in sessions:
        if session.id in failed:
            result.failures[session.id] = failed[session.id]
        else:
            result.successes.append(session.id)
    return result
