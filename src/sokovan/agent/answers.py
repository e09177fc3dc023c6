"""The kernel events an RPC call caused, carried in its answer as well as on the bus.

`check_and_pull` and `create_kernels` emit their kernels' events while the call runs (an image
that is there is prepared at once, a hollow or process kernel runs at once). The manager waits
for those events to move the session on; through the bus they cost a hop (the outbox's batch, the
stream, the consumer's read, possibly the other manager worker). So the server runs these calls
`answering()`: every event the call's task emits through the outbox (`note`, after the outbox's
own dropper, so an event dropped on purpose is lost here too) is also put in the answer, and the
manager applies it as soon as it has written the call's transitions. The bus copy still goes out, in
emission order; that of a prepared or running kernel (`LATE_ON_BUS`: the manager moves the session
on with these in the call's own write) on a stream of its own (`bus.streams.answered_key`), which
the managers apply no sooner than `ANSWERED_DELAY` after Redis took it, so that the answer comes
first and the copy is a no-op (kernel events are guarded by the statuses they expect). Before, the
copy raced the answer: in a burst of 10,000 sessions it won for a quarter of the PREPARED and half
of the RUNNING moves, each then applied and followed twice. The copy is only the fallback for an
answer that was lost (a manager that died holding it); kernel events being guarded, one applied
late, after a later event of its kernel, is a no-op too.

An event is collected only from the call (a context variable: the task that runs it, and tasks it
starts) and only while the call runs: a delayed pull that finishes after the answer went goes by
the bus alone.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from sokovan.common.events import KERNEL_EVENT_TYPES, KernelPrepared, KernelRunning


class Answer:
    """The events collected for one call's answer (JSON objects, as the bus would carry them)."""

    __slots__ = ("events", "open")

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.open = True


_ANSWER: contextvars.ContextVar[Answer | None] = contextvars.ContextVar("sokovan_rpc_answer", default=None)


# The answered events whose bus copy is only a fallback: the manager's call moves the session on
# with them in its own write (`answered_moves`). Any other answered event (pulling, a failure, an
# end) still goes out at once: a kernel's PULLING shows while the pull runs, and the manager's
# handling of the rest does not wait on the answer.
LATE_ON_BUS = (KernelPrepared, KernelRunning)


def note(event: BaseModel) -> bool:
    """Add a kernel event to the answer of the call that emitted it, if any; whether the event's
    bus copy may go late (`LATE_ON_BUS`: it went into an answer, and the answer moves on with it)."""
    answer = _ANSWER.get()
    if answer is not None and answer.open and isinstance(event, KERNEL_EVENT_TYPES):
        answer.events.append(event.model_dump(mode="json"))
        return isinstance(event, LATE_ON_BUS)
    return False


@contextlib.contextmanager
def answering() -> Iterator[Answer]:
    """Collect the kernel events this task emits until the block ends."""
    answer = Answer()
    token = _ANSWER.set(answer)
    try:
        yield answer
    finally:
        answer.open = False
        _ANSWER.reset(token)
