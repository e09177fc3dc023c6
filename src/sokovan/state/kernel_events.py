"""Applies agents' kernel events to kernels: guarded, so a repeated or late event is a no-op,
and only the agent a kernel is placed on can move it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.events import (
    KernelCreationFailed,
    KernelImagePullFailed,
    KernelPrepared,
    KernelPulling,
    KernelRunning,
    KernelTerminated,
)
from sokovan.common.types import FailureCause, KernelStatus
from sokovan.db.engine import autocommit
from sokovan.state.kernel_writes import KernelMove, KernelTransition, apply_kernel_transitions

K = KernelStatus
KernelEvent = (
    KernelPulling
    | KernelPrepared
    | KernelImagePullFailed
    | KernelRunning
    | KernelCreationFailed
    | KernelTerminated
)

_BEFORE_PULL = frozenset({K.SCHEDULED, K.PREPARING})
_WHILE_PREPARING = frozenset({K.SCHEDULED, K.PREPARING, K.PULLING})
_WHILE_STARTING = frozenset({K.PREPARED, K.CREATING})
_LIVE = K.non_terminal()
SERVICE_ADDR_WIDTH = 256  # kernels.service_addr is VARCHAR(256)
IMAGE_REF_WIDTH = 512  # kernels.image_ref is VARCHAR(512)
IMAGE_DIGEST_WIDTH = 128  # kernels.image_digest is VARCHAR(128)


def _storable(value: str | None, width: int = SERVICE_ADDR_WIDTH) -> bool:
    """A value that fits its column; a longer one is dropped rather than failing the batch it came
    in (it could not be a valid `http://host:port`, image reference or digest anyway)."""
    return value is not None and 0 < len(value) <= width


def _running(event: KernelRunning) -> dict[str, Any]:
    """What a running kernel's event writes besides its status: where its server answers, and the
    image it runs with that image's digest (container agents), each only when it fits."""
    extra: dict[str, Any] = {}
    if _storable(event.service_addr):
        extra["service_addr"] = event.service_addr
    if _storable(event.image, IMAGE_REF_WIDTH):
        extra["image_ref"] = event.image
    if _storable(event.image_digest, IMAGE_DIGEST_WIDTH):
        extra["image_digest"] = event.image_digest
    return extra


def _failure(cause: FailureCause, message: str) -> dict[str, Any]:
    return {"status_info": {"cause": cause.value, "message": message}, "message": message}


def _plan(event: KernelEvent) -> tuple[frozenset[KernelStatus], KernelStatus, dict[str, Any]]:
    """(expected statuses, new status, extra fields) for one event."""
    match event:
        case KernelPulling():
            return _BEFORE_PULL, K.PULLING, {}
        case KernelPrepared():
            return _WHILE_PREPARING, K.PREPARED, {}
        case KernelImagePullFailed():
            return _WHILE_PREPARING, K.ERROR, _failure(FailureCause.IMAGE_PULL_FAILURE, event.message)
        case KernelRunning():
            return _WHILE_STARTING, K.RUNNING, _running(event)
        case KernelCreationFailed():
            return _WHILE_STARTING, K.ERROR, _failure(FailureCause.UNKNOWN, event.message)
    assert isinstance(event, KernelTerminated)
    code = {"exit_code": event.exit_code}
    if event.reason == "oom":
        return (
            _LIVE,
            K.ERROR,
            code | _failure(FailureCause.OOM_KILLED, "kernel was killed for lack of memory"),
        )
    if event.reason == "exited" and event.exit_code not in (0, None):
        message = f"kernel exited with code {event.exit_code}"
        return _LIVE, K.ERROR, code | _failure(FailureCause.KERNEL_NONZERO_EXIT, message)
    if event.reason == "lost":
        message = f"agent {event.agent_id} does not run the kernel any more"
        return _LIVE, K.ERROR, code | _failure(FailureCause.AGENT_TRANSIENT, message)
    if event.reason == "unknown":
        # Agents say "unknown" only in answer to a destroy we sent; it may overtake our own
        # write of TERMINATING, so it ends the kernel from any live status.
        return _LIVE, K.TERMINATED, code | {"message": "agent does not know the kernel"}
    return _LIVE, K.TERMINATED, code | {"message": f"kernel {event.reason}"}


def transition_for(event: KernelEvent) -> KernelTransition | None:
    """The kernel move an event stands for (pure: table-tested)."""
    try:
        kernel_id = uuid.UUID(event.kernel_id)
    except ValueError:
        return None
    expected, to_status, extra = _plan(event)
    return KernelTransition(
        kernel_id=kernel_id,
        expected=expected,
        to_status=to_status,
        source=f"agent:{event.name}",
        agent_id=event.agent_id,
        **extra,
    )


class KernelEventApplier:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._reads = autocommit(engine)

    async def apply(self, event: KernelEvent) -> bool:
        """True when the event moved its kernel."""
        return bool(await self.apply_many([event]))

    async def apply_many(self, events: Sequence[KernelEvent]) -> list[KernelMove]:
        """Apply a batch at once; returns the kernels that moved.

        Events of one kernel apply in their order: the batch is cut into rounds holding at most
        one event per kernel, and each round is one statement; several rounds share a transaction.
        """
        transitions = _coalesce([t for t in map(transition_for, events) if t is not None])
        if not transitions:
            return []
        rounds = _rounds(transitions)
        if len(rounds) == 1:  # one statement: no transaction around it (no BEGIN and COMMIT)
            async with self._reads.connect() as conn:
                return await apply_kernel_transitions(conn, rounds[0])
        moved: list[KernelMove] = []
        async with self._engine.begin() as conn:
            for round_ in rounds:
                moved += await apply_kernel_transitions(conn, round_)
        return moved


def _coalesce(transitions: Sequence[KernelTransition]) -> list[KernelTransition]:
    """Drop a step that the kernel's next event in the batch makes moot.

    A transition that carries nothing but a status (no exit code, no status_info) is dropped when
    the next transition of the same kernel would accept the kernel both before and after it —
    e.g. pulling then prepared: the kernel goes straight to PREPARED, one write instead of two.
    A service address, image and digest of the dropped step go with the next one (running then
    terminated).
    """
    out: list[KernelTransition] = []
    last: dict[uuid.UUID, int] = {}
    for t in transitions:
        i = last.get(t.kernel_id)
        if i is not None:
            prev = out[i]
            bare = prev.exit_code is None and not prev.status_info
            if bare and prev.expected | {prev.to_status} <= t.expected:
                t = _carried(prev, t)
                out[i] = t
                continue
        last[t.kernel_id] = len(out)
        out.append(t)
    return out


def _carried(prev: KernelTransition, t: KernelTransition) -> KernelTransition:
    """`t` with what the dropped step `prev` would have written and `t` does not."""
    if not (prev.service_addr or prev.image_ref or prev.image_digest):
        return t
    return replace(
        t,
        service_addr=t.service_addr or prev.service_addr,
        image_ref=t.image_ref or prev.image_ref,
        image_digest=t.image_digest or prev.image_digest,
    )


def _rounds(transitions: Sequence[KernelTransition]) -> list[list[KernelTransition]]:
    rounds: list[list[KernelTransition]] = []
    depth: dict[uuid.UUID, int] = {}
    for t in transitions:
        n = depth.get(t.kernel_id, 0)
        depth[t.kernel_id] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(t)
    return rounds
