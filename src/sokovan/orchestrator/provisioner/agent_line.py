"""One agent's room over time, as the scheduler's timeline (`timeline`) sees it: free now,
released at each live session's expected end, taken by the plan's bookings."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot
from sokovan.state.session_reads import SessionWithKernels

_ZERO = Decimal(0)

# (end, slots, kernels) of a live session's kernels on one agent
Release = tuple[dt.datetime, ResourceSlots, int]


def run_time(session: SessionWithKernels, learned: dict[tuple[str, str], float]) -> float | None:
    """How long `session` is expected to run: its declared `max_duration`, else the learned run
    time of its owner's sessions of the same image, else None."""
    if session.max_duration is not None:
        return float(session.max_duration)
    return learned.get((session.access_key, session.image))


@dataclass(slots=True)
class Booking:
    start: dt.datetime
    end: dt.datetime | None
    slots: ResourceSlots
    kernels: int


@dataclass(slots=True)
class AgentLine:
    """One agent's room over time: free now, released at each known end, taken by bookings."""

    agent: AgentSnapshot
    # (end, slots, kernels) of the occupants whose end is known, earliest first once sorted
    releases: list[Release] = field(default_factory=list)
    bookings: list[Booking] = field(default_factory=list)
    # `_steps`' last answer and what it was computed from (releases and bookings only grow)
    _cached: tuple[object, ...] | None = None
    _step_points: list[dt.datetime] = field(default_factory=list)
    _step_frees: list[ResourceSlots] = field(default_factory=list)

    def _steps(
        self, now: dt.datetime, now_free: ResourceSlots
    ) -> tuple[list[dt.datetime], list[ResourceSlots]]:
        """The times from `now` at which this agent's room changes (`now`, each end after it,
        each booking's start and end after it), with the room from each until the next: a step
        function that the booked lines of a plan are asked about again and again."""
        key = (now, len(self.releases), len(self.bookings), now_free)
        if self._cached != key:
            changes: dict[dt.datetime, list[tuple[int, ResourceSlots]]] = defaultdict(list)
            for end, slots, _ in self.releases:
                if end > now:
                    changes[end].append((1, slots))
            for b in self.bookings:
                if b.start > now:
                    changes[b.start].append((-1, b.slots))
                if b.end is not None and b.end > now:
                    changes[b.end].append((1, b.slots))
            free = self.free_at(now, now_free)
            self._step_points, self._step_frees = [now], [free]
            for t in sorted(changes):
                for sign, slots in changes[t]:
                    free = free + slots if sign > 0 else free - slots
                self._step_points.append(t)
                self._step_frees.append(free)
            self._cached = key
        return self._step_points, self._step_frees

    def free_at(self, at: dt.datetime, now_free: ResourceSlots) -> ResourceSlots:
        free = now_free
        for end, slots, _ in self.releases:
            if end > at:
                break
            free = free + slots
        for b in self.bookings:
            if b.start <= at and (b.end is None or at < b.end):
                free = free - b.slots
        return free

    def released_by(self, at: dt.datetime) -> tuple[ResourceSlots, int]:
        slots, kernels = ResourceSlots(), 0
        for end, held, count in self.releases:
            if end > at:
                break
            slots, kernels = slots + held, kernels + count
        return slots, kernels

    def room_at_first(self, need: ResourceSlots, now: dt.datetime, now_free: ResourceSlots) -> bool:
        """Whether `need` fits at `now` (bookings that have begun counted)."""
        if not self.bookings:
            return need.fits_in(self.free_at(now, now_free))
        return need.fits_in(self._steps(now, now_free)[1][0])

    def unbooked_earliest(
        self, need: ResourceSlots, now: dt.datetime, now_free: ResourceSlots
    ) -> dt.datetime | None:
        """`earliest` as if nothing were booked here: room only grows, so the first time it fits
        it stays fitting, whatever the duration. Bookings only take room, so with them the answer
        is never earlier than this."""
        short = {k: v - now_free.get(k, _ZERO) for k, v in need.items() if v > 0}
        short = {k: v for k, v in short.items() if v > 0}
        if not short:
            return now
        for end, slots, _ in self.releases:  # only the short slots are counted down
            for k in list(short):
                left = short[k] - slots.get(k, _ZERO)
                if left > 0:
                    short[k] = left
                else:
                    del short[k]
            if not short:
                return max(end, now)
        return None

    def earliest(
        self,
        need: ResourceSlots,
        now: dt.datetime,
        duration: float | None,
        now_free: ResourceSlots,
    ) -> dt.datetime | None:
        """The first time from `now` at which `need` fits here and stays fitting for `duration`
        seconds (for ever when None); None when no known end makes room. Releases may end
        before `now` (a live session past its expected end): they count as released at `now`."""
        if not need.fits_in(self.agent.available):
            return None
        if not self.releases and not self.bookings:  # the common case: room now or never
            return now if need.fits_in(now_free) else None
        if not self.bookings:
            return self.unbooked_earliest(need, now, now_free)
        points, frees = self._steps(now, now_free)
        fits = [need.fits_in(free) for free in frees]
        for i, t in enumerate(points):
            if not fits[i]:
                continue
            until = None if duration is None else t + dt.timedelta(seconds=duration)
            j = i + 1
            while j < len(points) and (until is None or points[j] < until) and fits[j]:
                j += 1
            if j == len(points) or (until is not None and points[j] >= until):
                return t
        return None
