"""What the scheduler's foresight reads (`timeline`): the live sessions' kernels on the groups'
agents with their expected ends, and the learned run times of the owners and images involved.

A live session is expected to end at its RUNNING start plus its declared `max_duration`, else plus
the learned run time of its (access key, image): the median of that pair's sessions that ended
normally (TERMINATED) in the last `LEARN_WINDOW`, each from its move to RUNNING (its scheduling
history) to its end. A session not yet RUNNING counts from now; one TERMINATING ends now. The
learned times change slowly and cost a grouped read: each process keeps them `LEARNED_KEEP`.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import SessionStatus
from sokovan.orchestrator.provisioner.snapshot import Occupant, ScalingGroupSnapshot
from sokovan.state.occupancy import slot_holding

LEARN_WINDOW = dt.timedelta(days=7)
LEARNED_KEEP = 30.0  # seconds
LEARNED_MAX = 10_000  # pairs kept; past it the cache starts over

_LIVE = text(
    """
    SELECT s.id, s.scaling_group, s.access_key, s.image, s.max_duration, s.status,
           s.status_changed_at, k.agent_id, k.occupied_slots
    FROM sessions s JOIN kernels k ON k.session_id = s.id
    WHERE s.scaling_group = ANY(CAST(:groups AS text[])) AND s.status <> :pending
      AND k.agent_id IS NOT NULL AND k.status = ANY(CAST(:live AS text[]))
    """
)

_LEARNED = text(
    """
    SELECT s.access_key, s.image,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM s.terminated_at - r.at))
    FROM sessions s
    CROSS JOIN LATERAL (
        SELECT max(h.created_at) AS at FROM session_scheduling_history h
        WHERE h.session_id = s.id AND h.to_status = :running
    ) r
    WHERE (s.access_key, s.image) IN (
            SELECT * FROM unnest(CAST(:keys AS text[]), CAST(:images AS text[])))
      AND s.status = :terminated AND s.terminated_at > :since AND r.at IS NOT NULL
    GROUP BY s.access_key, s.image
    """
)

# (access key, image) → (median seconds or None, when it was read: monotonic)
_learned_cache: dict[tuple[str, str], tuple[float | None, float]] = {}


async def load_foresight(
    conn: AsyncConnection, snapshots: Sequence[ScalingGroupSnapshot], pairs: Iterable[tuple[str, str]]
) -> None:
    """Fill the snapshots' `occupants` and `learned` (for the live sessions and `pairs`, the
    waiting sessions' (access key, image))."""
    if not snapshots:
        return
    by_name = {s.name: s for s in snapshots}
    params = {"groups": list(by_name), "pending": SessionStatus.PENDING.value, "live": slot_holding()}
    rows = list((await conn.execute(_LIVE, params)).all())
    wanted = set(pairs) | {(r.access_key, r.image) for r in rows if r.max_duration is None}
    learned = await learned_run_times(conn, wanted)
    now = snapshots[0].now
    for snapshot in snapshots:
        snapshot.learned = learned
    for sg, occupants in _occupants(rows, learned, now).items():
        by_name[sg].occupants = occupants


def _occupants(
    rows: Sequence[Any], learned: dict[tuple[str, str], float], now: dt.datetime
) -> dict[str, list[Occupant]]:
    held: dict[tuple[uuid.UUID, str], list[Any]] = defaultdict(list)
    for row in rows:
        held[(row.id, row.agent_id)].append(row)
    out: dict[str, list[Occupant]] = defaultdict(list)
    for (session_id, agent_id), kernels in held.items():
        first = kernels[0]
        slots = ResourceSlots.total(ResourceSlots.from_json(k.occupied_slots) for k in kernels)
        out[first.scaling_group].append(
            Occupant(session_id, agent_id, slots, len(kernels), expected_end(first, learned, now))
        )
    return out


def expected_end(row: Any, learned: dict[tuple[str, str], float], now: dt.datetime) -> dt.datetime | None:
    """When a live session's kernels are expected to free their room (None: nothing bounds it)."""
    if row.status == SessionStatus.TERMINATING.value:
        return now
    seconds = row.max_duration if row.max_duration is not None else learned.get((row.access_key, row.image))
    if seconds is None:
        return None
    started = row.status_changed_at if row.status == SessionStatus.RUNNING.value else now
    return max(started + dt.timedelta(seconds=float(seconds)), now)


async def learned_run_times(
    conn: AsyncConnection, pairs: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], float]:
    """The learned run time of each (access key, image) that has one (see the module's docstring)."""
    clock = time.monotonic()
    if len(_learned_cache) > LEARNED_MAX:
        _learned_cache.clear()
    wanted = sorted(set(pairs))
    stale = [p for p in wanted if p not in _learned_cache or clock - _learned_cache[p][1] > LEARNED_KEEP]
    if stale:
        found: dict[tuple[str, str], float] = {}
        params = {
            "keys": [k for k, _ in stale],
            "images": [i for _, i in stale],
            "running": SessionStatus.RUNNING.value,
            "terminated": SessionStatus.TERMINATED.value,
            "since": dt.datetime.now(dt.UTC) - LEARN_WINDOW,
        }
        for key, image, seconds in await conn.execute(_LEARNED, params):
            found[(key, image)] = float(seconds)
        for pair in stale:
            _learned_cache[pair] = (found.get(pair), clock)
    out: dict[tuple[str, str], float] = {}
    for pair in wanted:
        seconds = _learned_cache[pair][0]
        if seconds is not None:
            out[pair] = seconds
    return out
