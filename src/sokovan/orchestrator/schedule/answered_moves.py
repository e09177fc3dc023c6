"""Two-step moves: a call's success and the promotion its agents' answers already complete, in one write.

A prepare (start) call whose agents answered that every kernel of a session is prepared (running)
leaves nothing to wait for: the promotion that follows (PromoteToPrepared, PromoteToRunning) is
already met. Instead of writing the call's move, then the answered kernel events, then reading the
session again for the promotion and writing that (four round trips), the call's success becomes
one guarded move with two history rows (`SessionTransition.then_to`): SCHEDULED → PREPARING →
PREPARED, the kernels straight to PREPARED (PREPARED → CREATING → RUNNING, kernels RUNNING).

Only a session whose kernels were all sent in this call, and whose every kernel answered with
events that carry nothing but a status, ending in the promotion's kernel status, is moved so (an
inference kernel's running event carries its service address, a container kernel's the image it
runs and its digest, a failure its cause: those take the ordinary path, as does everything else
the answers said).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from sokovan.common.types import KernelStatus, SchedulingResult
from sokovan.orchestrator.schedule.handlers.lifecycle.call_agents import AgentCall
from sokovan.state.kernel_events import KernelEvent, transition_for
from sokovan.state.kernel_writes import KernelTransition
from sokovan.state.session_reads import SessionWithKernels
from sokovan.state.session_writes import SessionTransition


def _bare(t: KernelTransition | None) -> bool:
    """A move that writes nothing but a status: one that also writes an exit code, status info, a
    service address or the image a kernel runs is applied as the event it came from."""
    return (
        t is not None
        and t.exit_code is None
        and not t.status_info
        and not t.service_addr
        and not t.image_ref
        and not t.image_digest
    )


def two_step_moves(
    call: AgentCall,
    changes: Sequence[SessionTransition],
    rows: Sequence[SessionWithKernels],
    answers: Sequence[KernelEvent],
) -> tuple[list[SessionTransition], list[SessionTransition], list[KernelEvent]]:
    """(the two-step moves, the other transitions as they were, the answered events still to apply)."""
    by_kernel: dict[str, list[KernelEvent]] = {}
    for event in answers:
        by_kernel.setdefault(event.kernel_id, []).append(event)
    rows_by_id = {r.id: r for r in rows}
    target = call.then.kernel_to
    two_step: list[SessionTransition] = []
    rest: list[SessionTransition] = []
    spent: set[str] = set()
    for change in changes:
        row = rows_by_id.get(change.session_id)
        done = _answered(call, row, by_kernel) if change.result is SchedulingResult.SUCCESS else None
        if row is None or done is None or change.to_status != call.to.session:
            rest.append(change)
            continue
        two_step.append(
            dataclasses.replace(
                change,
                then_to=call.then.spec.to,
                then_handler=call.then.spec.name,
                kernel_to=target,
                kernel_expected=frozenset({call.kernel}) | done,
            )
        )
        spent.update(str(k.id) for k in row.kernels)
    left = [e for e in answers if e.kernel_id not in spent]
    return two_step, rest, left


def _answered(
    call: AgentCall, row: SessionWithKernels | None, by_kernel: dict[str, list[KernelEvent]]
) -> frozenset[KernelStatus] | None:
    """The kernel statuses the answered events move from, when every kernel of `row` was sent and
    answered with bare events ending in the promotion's kernel status; else None."""
    if row is None or not row.kernels:
        return None
    expected: frozenset[KernelStatus] = frozenset()
    for kernel in row.kernels:
        if kernel.status != call.kernel:
            return None
        moves = [transition_for(e) for e in by_kernel.get(str(kernel.id), ())]
        last = moves[-1] if moves else None
        if last is None or not all(_bare(m) for m in moves) or last.to_status != call.then.kernel_to:
            return None
        expected |= last.expected
    return expected
