"""A trace's sessions as the placement pipeline sees them, and how long each runs once started.

Each trace session becomes the `SessionWithKernels` the loader would have read while it was
PENDING (its kernels unplaced), built once and offered cycle after cycle. Ids that are not UUIDs
(hand-written traces) are mapped to stable UUIDs.

Run time once started in the simulation (`SimSession.run`):

- it ran in the trace: `terminated_at - started_at` (still running at export: until the trace's
  `until`), or `run_seconds` where the trace gives one; either way at most its `max_duration`, as
  the manager ends a session that runs past it (`cut`);
- it never ran (cancelled while pending, or still pending at export): a run time drawn with the
  seed from the recorded run times of the same (access key, image), else from all of the trace's,
  else its `max_duration`, else 0. Drawn once per trace and seed, before any run, so that every
  policy compared runs it for the same time. If it was cancelled while pending, it is withdrawn at
  its `terminated_at` should it still be waiting then (the user, or its pending timeout, gave up).
"""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sokovan.common.types import KernelStatus, SessionResult, SessionStatus
from sokovan.sim.trace import Trace, TraceSession
from sokovan.state.session_reads import KernelInfo, SessionWithKernels

_NAMESPACE = uuid.UUID("5c0e0b1e-7a3a-4c55-9d7e-51a1c0ffee00")
COMMAND = "replayed"  # a batch session needs a command to pass its hook; the trace has none


def as_uuid(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        return uuid.uuid5(_NAMESPACE, text)


@dataclass(slots=True)
class SimSession:
    trace: TraceSession
    spec: SessionWithKernels
    order: int  # its place in the trace (creation order): ties between equal times
    run: float  # seconds it runs once started (inf: it never ends)
    cut: bool  # its run was capped at its max_duration
    withdraw_at: dt.datetime | None  # cancelled while pending in the trace: leaves then if still waiting
    drawn: bool = False  # it never ran in the trace: its run time was drawn

    @property
    def pair(self) -> tuple[str, str]:
        return self.spec.access_key, self.spec.image

    @property
    def learns(self) -> bool:
        """Its run counts toward its (access key, image)'s learned run time: only runs the trace
        recorded that ended normally (not cut, not an error), as the manager's `foresight_reads`
        counts them."""
        normal = self.trace.status in (None, SessionStatus.TERMINATED.value)
        return not self.drawn and not self.cut and normal

    def end_state(self) -> tuple[str, str | None]:
        """(status, result) once it has run (what a session depending on it sees)."""
        if self.cut:
            return SessionStatus.ERROR.value, SessionResult.FAILURE.value
        status = self.trace.status
        if not self.drawn and status in {s.value for s in SessionStatus.terminal()}:
            return status, self.trace.result
        return SessionStatus.TERMINATED.value, SessionResult.SUCCESS.value


def spec_of(s: TraceSession) -> SessionWithKernels:
    sid = as_uuid(s.id)
    kernels = tuple(
        KernelInfo(
            id=uuid.uuid5(sid, str(i)),
            status=KernelStatus.PENDING,
            agent_id=None,
            agent_addr=None,
            cluster_role="main" if i == 0 else "sub",
            cluster_idx=i,
            occupied_slots=s.resources,
            exit_code=None,
            status_info={},
        )
        for i in range(s.cluster_size)
    )
    return SessionWithKernels(
        id=sid,
        name=s.name or s.id,
        access_key=s.access_key,
        user_id=as_uuid(s.user),
        project_id=as_uuid(s.project),
        domain_name=s.domain,
        scaling_group=s.scaling_group,
        pending_timeout=0.0,
        type=s.type,
        image=s.image,
        command=COMMAND,
        environ={},
        resources=s.resources,
        cluster_size=s.cluster_size,
        cluster_mode=s.cluster_mode,
        priority=s.priority,
        status=SessionStatus.PENDING,
        status_info={},
        status_changed_at=s.created_at,
        phase_attempts=0,
        created_at=s.created_at,
        kernels=kernels,
        depends_on=tuple(as_uuid(d) for d in s.depends_on),
        preemptible=False,
        max_duration=s.max_duration,
    )


def recorded_run(s: TraceSession, until: dt.datetime | None) -> float | None:
    """How long it ran in the trace (None: it never started, or nothing says how long)."""
    if s.run_seconds is not None:
        return s.run_seconds
    if s.started_at is None:
        return None
    end = s.terminated_at or until
    if end is None:
        return math.inf
    return max((end - s.started_at).total_seconds(), 0.0)


def sim_sessions(trace: Trace, seed: int) -> list[SimSession]:
    """The trace's sessions in creation order, each with its run time (see the module's docstring)."""
    ordered = sorted(trace.sessions, key=lambda s: (s.created_at, s.id))
    recorded = [recorded_run(s, trace.header.until) for s in ordered]
    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    every: list[float] = []
    for s, run in zip(ordered, recorded, strict=True):
        if run is not None and math.isfinite(run):
            by_pair[(s.access_key, s.image)].append(run)
            every.append(run)
    rng = random.Random(seed)
    out: list[SimSession] = []
    for n, (s, run) in enumerate(zip(ordered, recorded, strict=True)):
        withdraw, drawn = None, run is None
        if run is None:
            run = _drawn(rng, by_pair.get((s.access_key, s.image)) or every, s.max_duration)
            withdraw = s.terminated_at
        if s.max_duration is not None and run > s.max_duration:
            run, cut = float(s.max_duration), True
        else:
            cut = False
        out.append(SimSession(s, spec_of(s), n, run, cut, withdraw, drawn))
    return out


def _drawn(rng: random.Random, runs: Sequence[float], max_duration: int | None) -> float:
    if runs:
        return rng.choice(runs)
    return float(max_duration) if max_duration is not None else 0.0
