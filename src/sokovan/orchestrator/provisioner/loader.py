"""Builds the snapshots for one scheduling cycle in a fixed handful of statements.

The reads that need only the sessions' groups and owners run at once, the nominations among them
(PENDING sessions carrying one; whether it is still in force is judged here), so that an ordinary
cycle waits for one round trip of reads. Preemption adds up to two, after them: the groups'
RUNNING preemptible sessions with their placed kernels (only for groups whose mode is not off; an
invalid stored `preemption` counts as off) and, when a nomination is in force, the room its
victims still occupy, from which each nominated agent's hold is derived."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.fair_share import FairShareConfig
from sokovan.common.preemption import (
    NOMINATED_AGENTS,
    NOMINATED_UNTIL,
    PREEMPTS,
    PreemptionMode,
    PreemptionSettings,
)
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import SessionStatus
from sokovan.db import nominated_rows
from sokovan.db.models import (
    Kernel,
    Session,
)
from sokovan.orchestrator.provisioner.agent_statics import AGENT_STATICS
from sokovan.orchestrator.provisioner.snapshot import (
    NOTHING,
    AgentSnapshot,
    Candidate,
    Hold,
    Nomination,
    ScalingGroupSnapshot,
    Tenancy,
    VictimKernel,
)
from sokovan.orchestrator.provisioner.tenancy_reads import (
    load_dependencies,
    load_keypairs,
    load_scopes,
    load_usage,
    slot_usage,
)
from sokovan.state.fair_share_usage import FAIR_SHARE_USAGE
from sokovan.state.occupancy import agent_occupancy, slot_holding
from sokovan.state.session_reads import SessionWithKernels

log = structlog.get_logger(__name__)


def preemption_settings(raw: Any, scaling_group: str = "") -> PreemptionSettings:
    """A group's stored `preemption`, validated; an invalid value is logged and counts as off."""
    try:
        return PreemptionSettings.model_validate(raw or {})
    except ValidationError as exc:
        log.warning("schedule.invalid_preemption", scaling_group=scaling_group, error=str(exc))
        return PreemptionSettings(mode=PreemptionMode.OFF)


async def load_snapshots(
    conn: AsyncConnection,
    sessions: Sequence[SessionWithKernels],
    now: dt.datetime | None = None,
    reads: AsyncEngine | None = None,
    fair_share: FairShareConfig | None = None,
) -> dict[str, ScalingGroupSnapshot]:
    """The snapshots of the sessions' scaling groups. With `reads` (an engine without transactions,
    `db.engine.autocommit`), the statements that do not depend on each other run at once, each on
    a connection of its own: two round trips' time instead of one per statement. Nothing here needs
    one snapshot of the database across statements (each already sees its own under READ
    COMMITTED); the allocator re-checks every agent's room under its row lock. `fair_share`: the
    live settings of the `fair_share` scheduler; without them (a dry run, which orders one
    session) its view is not read."""
    names = sorted({s.scaling_group for s in sessions})
    run = _Reads(conn, reads)
    tenancy = Tenancy()
    keys = sorted({s.access_key for s in sessions})
    projects = sorted({s.project_id for s in sessions})
    domains = sorted({s.domain_name for s in sessions})
    dep_ids = sorted({d for s in sessions for d in s.depends_on})
    first: list[Read] = [
        functools.partial(load_keypairs, tenancy=tenancy, keys=keys),
        functools.partial(load_scopes, tenancy=tenancy, projects=projects, domains=domains),
        agent_occupancy,
        functools.partial(AGENT_STATICS.read, scaling_groups=names),
        functools.partial(_read_groups, names=names),
        functools.partial(_read_nominated, names=names),
    ]
    if dep_ids:
        first.append(functools.partial(load_dependencies, tenancy=tenancy, ids=dep_ids))
    _, _, (occupied, counts), statics, groups, nominated, *_ = await run.all(first)
    agents_by_sg: dict[str, list[AgentSnapshot]] = {n: [] for n in names}
    # A thousand agents are read every placement cycle: their capacity and images are parsed
    # once per change (`agent_statics`), and each snapshot is built positionally.
    occupied_of, count_of = occupied.get, counts.get
    for a in statics:
        agents_by_sg[a.scaling_group].append(
            AgentSnapshot(
                a.id,
                a.status,
                a.schedulable,
                a.statics.available,
                occupied_of(a.id, NOTHING),
                count_of(a.id, 0),
                a.max_kernels,
                a.statics.images,
            )
        )
    out: dict[str, ScalingGroupSnapshot] = {}
    for sg in groups:
        snapshot = ScalingGroupSnapshot(
            name=sg.name,
            scheduler=sg.scheduler,
            agent_selection=sg.agent_selection,
            agents=agents_by_sg.get(sg.name, []),
            queue_policy=sg.queue_policy,
            resource_priority=tuple(sg.resource_priority or ()),
            allowed_session_types=frozenset(sg.allowed_session_types or ()),
            roundrobin_cursor=sg.roundrobin_cursor,
            tenancy=tenancy,
            preemption=preemption_settings(sg.preemption, sg.name),
            now=now or dt.datetime.now(dt.UTC),
        )
        out[sg.name] = snapshot
    # What depends on the first reads: each only when some group or owner needs it.
    second: list[Read] = []
    nominations = _nominations(out, nominated)
    if nominations:
        second.append(functools.partial(_load_holds, snapshots=out, nominations=nominations))
    if tenancy.project_quotas or tenancy.domain_quotas or any(p.quota for p in tenancy.keypairs.values()):
        second.append(functools.partial(load_usage, t=tenancy, keys=keys, projects=projects, domains=domains))
    if any(s.scheduler == "drf" for s in out.values()):
        second.append(functools.partial(_load_user_allocations, snapshots=out))
    if fair_share is not None and any(s.scheduler == "fair_share" for s in out.values()):
        second.append(functools.partial(_load_fair_share, snapshots=out, config=fair_share))
    if any(s.preemption.mode != PreemptionMode.OFF for s in out.values()):
        second.append(functools.partial(_load_candidates, snapshots=out))
    await run.all(second)
    return out


Read = Callable[[AsyncConnection], Awaitable[Any]]


class _Reads:
    """Runs reads on `conn` one after another, or, with `engine`, at once, each on a connection of
    its own."""

    def __init__(self, conn: AsyncConnection, engine: AsyncEngine | None) -> None:
        self._conn = conn
        self._engine = engine

    async def all(self, reads: Sequence[Read]) -> list[Any]:
        if self._engine is None or len(reads) < 2:
            return [await read(self._conn) for read in reads]
        engine = self._engine

        async def alone(read: Read) -> Any:
            async with engine.connect() as conn:
                return await read(conn)

        return list(await asyncio.gather(*(alone(read) for read in reads)))


_GROUPS = text(
    """
    SELECT name, scheduler, agent_selection, queue_policy, resource_priority, allowed_session_types,
           roundrobin_cursor, preemption
    FROM scaling_groups WHERE name = ANY(CAST(:names AS text[]))
    """
)


async def _read_groups(conn: AsyncConnection, names: Sequence[str]) -> list[Any]:
    return list((await conn.execute(_GROUPS, {"names": list(names)})).all())


async def _load_candidates(conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot]) -> None:
    """RUNNING preemptible sessions of the groups that preempt, with their placed live kernels."""
    groups = [n for n, s in snapshots.items() if s.preemption.mode != PreemptionMode.OFF]
    if not groups:
        return
    rows = await conn.execute(
        select(
            Session.id,
            Session.scaling_group,
            Session.priority,
            Session.created_at,
            Kernel.agent_id,
            Kernel.occupied_slots,
        )
        .join(Kernel, Kernel.session_id == Session.id)
        .where(
            Session.scaling_group.in_(groups),
            Session.status == SessionStatus.RUNNING.value,
            Session.preemptible.is_(True),
            Kernel.agent_id.is_not(None),
            Kernel.status.in_(slot_holding()),
        )
        .order_by(Session.id, Kernel.cluster_idx)
    )
    found: dict[uuid.UUID, tuple[str, int, dt.datetime, list[VictimKernel]]] = {}
    for sid, sg, priority, created_at, agent_id, slots in rows:
        entry = found.setdefault(sid, (sg, priority, created_at, []))
        entry[3].append(VictimKernel(agent_id, ResourceSlots.from_json(slots)))
    for sid, (sg, priority, created_at, kernels) in found.items():
        snapshots[sg].candidates.append(Candidate(sid, priority, True, created_at, tuple(kernels)))


# PENDING sessions of the groups that carry a nomination (whether still in force is judged here),
# through the partial index that holds only them (`db.nominated_rows`).
_NOMINATED = text(
    f"""
    SELECT id, scaling_group, priority, resources, status_info FROM sessions
    WHERE scaling_group = ANY(CAST(:names AS text[])) AND {nominated_rows.NOMINATED}
    ORDER BY id
    """
)


async def _read_nominated(conn: AsyncConnection, names: Sequence[str]) -> list[Any]:
    """The rows of `_NOMINATED`: read with the first reads, as it needs only the groups' names."""
    return list((await conn.execute(_NOMINATED, {"names": list(names)})).all())


Nominated = list[tuple[str, Nomination, ResourceSlots]]


def _nominations(snapshots: dict[str, ScalingGroupSnapshot], rows: Sequence[Any]) -> Nominated:
    """The nominations in force among `rows`, noted in their groups' snapshots."""
    nominations: Nominated = []
    for sid, sg, priority, resources, info in rows:
        snapshot = snapshots[sg]
        try:
            until = dt.datetime.fromisoformat(str(info.get(NOMINATED_UNTIL)))
            agents = tuple(str(a) for a in info[NOMINATED_AGENTS])
            victims = tuple(uuid.UUID(str(v)) for v in info.get(PREEMPTS) or ())
        except (TypeError, ValueError):
            continue  # not a nomination this version wrote: it is treated as lapsed
        if until <= snapshot.now:
            continue
        nomination = Nomination(sid, priority, agents, victims)
        snapshot.nominations[sid] = nomination
        nominations.append((sg, nomination, ResourceSlots.from_json(resources)))
    return nominations


async def _load_holds(
    conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot], nominations: Nominated
) -> None:
    """On each nominated agent, the room held for the nominee: its need there less what its
    victims still occupy there."""
    victim_ids = sorted({v for _, n, _ in nominations for v in n.victims})
    still: dict[tuple[uuid.UUID, str], tuple[ResourceSlots, int]] = defaultdict(lambda: (ResourceSlots(), 0))
    if victim_ids:
        for sid, agent_id, slots in await conn.execute(
            select(Kernel.session_id, Kernel.agent_id, Kernel.occupied_slots).where(
                Kernel.session_id.in_(victim_ids),
                Kernel.agent_id.is_not(None),
                Kernel.status.in_(slot_holding()),
            )
        ):
            held, n = still[(sid, agent_id)]
            still[(sid, agent_id)] = (held + ResourceSlots.from_json(slots), n + 1)
    for sg, nomination, per_kernel in nominations:
        for agent in snapshots[sg].agents:
            count = nomination.agents.count(agent.id)
            if not count:
                continue
            occupied, occupied_n = ResourceSlots(), 0
            for victim in nomination.victims:
                slots, n = still.get((victim, agent.id), (ResourceSlots(), 0))
                occupied, occupied_n = occupied + slots, occupied_n + n
            need = per_kernel.scaled(count) - occupied
            agent.held.append(
                Hold(
                    nomination.session_id,
                    nomination.priority,
                    ResourceSlots({k: v for k, v in need.items() if v > 0}),
                    max(0, count - occupied_n),
                )
            )


# What each user's live kernels hold in the groups that share by DRF.
_USER_USAGE = slot_usage("s.scaling_group, s.user_id", "s.scaling_group = ANY(CAST(:groups AS text[]))")


async def _load_user_allocations(conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot]) -> None:
    drf = [name for name, s in snapshots.items() if s.scheduler == "drf"]
    if not drf:
        return
    params = {"live": slot_holding(), "groups": drf}
    for sg, user_id, key, total in await conn.execute(_USER_USAGE, params):
        snap = snapshots[sg]
        snap.user_allocated[user_id] = snap.user_allocated[user_id] + ResourceSlots({key: Decimal(total)})


async def _load_fair_share(
    conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot], config: FairShareConfig
) -> None:
    """The cluster's fair-share view (one for every group that shares by it; `fair_share_usage`)."""
    groups = [s for s in snapshots.values() if s.scheduler == "fair_share"]
    if not groups:
        return
    read = await FAIR_SHARE_USAGE.read(conn, config, groups[0].now)
    for snapshot in groups:
        snapshot.fair_share = read.view
