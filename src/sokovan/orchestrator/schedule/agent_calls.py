"""Fan a batch of kernels out to their agents: all agents concurrently, calls of a size the agent
takes to each (usually one)."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sokovan.common.events import KERNEL_EVENT_TYPES, parse_event
from sokovan.common.rpc import KernelSpec
from sokovan.orchestrator.hooks import hook_for
from sokovan.orchestrator.schedule.handler import SessionResultT
from sokovan.orchestrator.schedule.rpc_batches import Packed, pack, send_bisecting, too_large
from sokovan.state.kernel_events import KernelEvent
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
        cluster_size=session.cluster_size,
        devices=list(kernel.devices),
    )


def answered(raw: Sequence[dict[str, Any]], agent_id: str, kernel_ids: set[str]) -> list[KernelEvent]:
    """The kernel events an agent's answer carried (`agent.answers`) that may be applied: valid
    ones, from the agent called, about the kernels sent to it; any other is dropped unread, as a
    forged event on the bus would be refused."""
    out: list[KernelEvent] = []
    for data in raw:
        event = parse_event(data)
        if (
            isinstance(event, KERNEL_EVENT_TYPES)
            and event.agent_id == agent_id
            and event.kernel_id in kernel_ids
        ):
            out.append(event)
    return out


Calls = Sequence["asyncio.Future[dict[uuid.UUID, str]]"]  # one session's calls (agent → failures)
Late = Callable[[uuid.UUID, "asyncio.Future[str | None]"], None]


async def fan_out(
    sessions: Sequence[SessionWithKernels],
    pick: Callable[[KernelInfo], bool],
    call: Callable[[Target, Items], Awaitable[object]],
    size: Callable[[KernelInfo], int] | None = None,
    *,
    wait: float | None = None,
    late: Late | None = None,
) -> SessionResultT:
    """Call `call((agent_id, agent_addr), [(session, kernel), ...])` for the kernels `pick` selects.

    With `size` (the bytes a kernel takes in a request body), the kernels for one agent go in
    calls of whole sessions that stay under the body limit, one after another (`rpc_batches`);
    without, in one call. A session succeeds when every call that carried one of its kernels
    succeeded; a session with no kernel to send succeeds at once. A kernel placed on an agent that
    is unknown fails, and so does a session too large for one call (alone).

    With `wait` (and `late`), the answers are awaited that long only: a session whose agents have
    not all answered by then is left out of the result and handed to `late(session id, outcome)`,
    a future of its failure reason (None: it succeeded), so one slow agent never holds the others'
    sessions back.
    """
    result = SessionResultT()
    per_agent: dict[Target, dict[uuid.UUID, Items]] = defaultdict(dict)
    agents_of: dict[uuid.UUID, dict[Target, None]] = {}  # the agents each session's kernels go to
    failed: dict[uuid.UUID, str] = {}
    for session in sessions:
        for kernel in session.kernels:
            if not pick(kernel):
                continue
            if kernel.agent_addr is None or kernel.agent_id is None:
                failed[session.id] = f"kernel {kernel.id} has no reachable agent"
                continue
            target = (kernel.agent_id, kernel.agent_addr)
            per_agent[target].setdefault(session.id, []).append((session, kernel))
            agents_of.setdefault(session.id, {})[target] = None
    calls = {t: asyncio.ensure_future(_to_agent(t, items, call, size)) for t, items in per_agent.items()}
    if calls:
        await asyncio.wait(calls.values(), timeout=wait if late is not None else None)
    for session in sessions:
        mine = [calls[t] for t in agents_of.get(session.id, {})]
        if session.id not in failed and not all(task.done() for task in mine):
            assert late is not None
            late(session.id, asyncio.ensure_future(_outcome(session.id, mine)))
            continue
        reason = failed.get(session.id) or _failure_of(session.id, mine)
        if reason is not None:
            result.failures[session.id] = reason
        else:
            result.successes.append(session.id)
    return result


def _failure_of(session_id: uuid.UUID, calls: Calls) -> str | None:
    for call in calls:
        reason = call.result().get(session_id)
        if reason is not None:
            return reason
    return None


async def _outcome(session_id: uuid.UUID, calls: Calls) -> str | None:
    await asyncio.wait(calls)
    return _failure_of(session_id, calls)


async def _to_agent(
    target: Target,
    by_session: dict[uuid.UUID, Items],
    call: Callable[[Target, Items], Awaitable[object]],
    size: Callable[[KernelInfo], int] | None,
) -> dict[uuid.UUID, str]:
    """The calls to one agent, one after another: the sessions that failed, with why."""
    if size is None:
        packed: Packed[uuid.UUID] = Packed(calls=[list(by_session)])
    else:
        packed = pack([(sid, sum(size(k) for _, k in items)) for sid, items in by_session.items()])
    failed = {sid: too_large(target[0], n) for sid, n in packed.oversized.items()}

    async def send(session_ids: list[uuid.UUID]) -> object:
        return await call(target, [item for sid in session_ids for item in by_session[sid]])

    for session_ids in packed.calls:
        failed.update(await send_bisecting(target[0], session_ids, send))
    return failed
