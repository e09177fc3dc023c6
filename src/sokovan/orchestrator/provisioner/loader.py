"""Builds the snapshots for one scheduling cycle in a fixed handful of statements.

Preemption adds up to three: the groups' RUNNING preemptible sessions with their placed kernels
(only for groups whose mode is not off; an invalid stored `preemption` counts as off), the
nominations in force (PENDING sessions whose `nominated_until` has not passed) and the room their
victims still occupy, from which each nominated agent's hold is derived."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import Numeric, Text, cast, func, literal, literal_column, select, union_all
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.preemption import (
    NOMINATED_AGENTS,
    NOMINATED_UNTIL,
    PREEMPTS,
    PreemptionMode,
    PreemptionSettings,
)
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import SessionStatus
from sokovan.db.models import (
    Domain,
    Kernel,
    Keypair,
    KeypairResourcePolicy,
    Project,
    ScalingGroup,
    Session,
)
from sokovan.orchestrator.provisioner.agent_statics import AGENT_STATICS
from sokovan.orchestrator.provisioner.snapshot import (
    AgentSnapshot,
    Candidate,
    Hold,
    KeypairPolicy,
    Nomination,
    ScalingGroupSnapshot,
    Tenancy,
    VictimKernel,
)
from sokovan.state.occupancy import agent_occupancy, slot_holding
from sokovan.state.quota import quota_of
from sokovan.state.session_reads import SessionWithKernels

log = structlog.get_logger(__name__)

_ACTIVE = [s.value for s in SessionStatus.non_terminal() - {SessionStatus.PENDING}]


def preemption_settings(raw: Any, scaling_group: str = "") -> PreemptionSettings:
    """A group's stored `preemption`, validated; an invalid value is logged and counts as off."""
    try:
        return PreemptionSettings.model_validate(raw or {})
    except ValidationError as exc:
        log.warning("schedule.invalid_preemption", scaling_group=scaling_group, error=str(exc))
        return PreemptionSettings(mode=PreemptionMode.OFF)


async def load_snapshots(
    conn: AsyncConnection, sessions: Sequence[SessionWithKernels], now: dt.datetime | None = None
) -> dict[str, ScalingGroupSnapshot]:
    names = sorted({s.scaling_group for s in sessions})
    tenancy = await _load_tenancy(conn, sessions)
    occupied, counts = await agent_occupancy(conn)
    agents_by_sg: dict[str, list[AgentSnapshot]] = {n: [] for n in names}
    # A thousand agents are read every placement cycle: their capacity and images are parsed
    # once per change (`agent_statics`).
    for a in await AGENT_STATICS.read(conn, names):
        agents_by_sg[a.scaling_group].append(
            AgentSnapshot(
                id=a.id,
                status=a.status,
                schedulable=a.schedulable,
                available=a.statics.available,
                occupied=occupied.get(a.id, ResourceSlots()),
                kernel_count=counts.get(a.id, 0),
                max_kernels=a.max_kernels,
                images=a.statics.images,
            )
        )
    out: dict[str, ScalingGroupSnapshot] = {}
    groups = await conn.execute(
        select(
            ScalingGroup.name,
            ScalingGroup.scheduler,
            ScalingGroup.agent_selection,
            ScalingGroup.queue_policy,
            ScalingGroup.resource_priority,
            ScalingGroup.allowed_session_types,
            ScalingGroup.roundrobin_cursor,
            ScalingGroup.preemption,
        ).where(ScalingGroup.name.in_(names))
    )
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
    await _load_user_allocations(conn, out)
    await _load_candidates(conn, out)
    await _load_nominations(conn, out)
    return out


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


async def _load_nominations(conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot]) -> None:
    """The nominations in force and, on each nominated agent, the room held for the nominee: its
    need there less what its victims still occupy there."""
    rows = (
        await conn.execute(
            select(
                Session.id, Session.scaling_group, Session.priority, Session.resources, Session.status_info
            )
            .where(
                Session.scaling_group.in_(list(snapshots)),
                Session.status == SessionStatus.PENDING.value,
                Session.status_info.has_key(NOMINATED_AGENTS),
            )
            .order_by(Session.id)
        )
    ).all()
    nominations: list[tuple[str, Nomination, ResourceSlots]] = []
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
    if not nominations:
        return
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


async def _load_tenancy(conn: AsyncConnection, sessions: Sequence[SessionWithKernels]) -> Tenancy:
    """The owners' policies and quotas, their placed sessions and their usage: Core statements of
    their columns (no ORM objects), the keypairs with their active-session counts in one."""
    tenancy = Tenancy()
    keys = sorted({s.access_key for s in sessions})
    projects = sorted({s.project_id for s in sessions})
    domains = sorted({s.domain_name for s in sessions})
    policy = KeypairResourcePolicy
    active = (
        select(Session.access_key, func.count().label("n"))
        .where(Session.access_key.in_(keys), Session.status.in_(_ACTIVE))
        .group_by(Session.access_key)
        .subquery("active")
    )
    rows = await conn.execute(
        select(
            Keypair.access_key,
            policy.name,
            policy.total_resource_slots,
            policy.default_for_unspecified,
            policy.max_concurrent_sessions,
            policy.max_pending_sessions,
            active.c.n,
        )
        .outerjoin(policy, policy.name == Keypair.resource_policy)
        .outerjoin(active, active.c.access_key == Keypair.access_key)
        .where(Keypair.access_key.in_(keys))
    )
    for access_key, name, total, default, max_concurrent, max_pending, n in rows:
        if n:
            tenancy.active_sessions[access_key] = int(n)
        if name is None:
            tenancy.keypairs[access_key] = KeypairPolicy()
            continue
        tenancy.keypairs[access_key] = KeypairPolicy(
            name=name,
            quota=quota_of(f"keypair policy {name!r}", total, default),
            max_concurrent_sessions=max_concurrent,
            max_pending_sessions=max_pending,
        )
    scopes = union_all(
        select(
            literal("project"),
            cast(Project.id, Text),
            Project.name,
            Project.total_resource_slots,
            Project.default_for_unspecified,
        ).where(Project.id.in_(projects)),
        select(
            literal("domain"),
            Domain.name,
            Domain.name,
            Domain.total_resource_slots,
            Domain.default_for_unspecified,
        ).where(Domain.name.in_(domains)),
    )
    for scope, key, name, total, default in await conn.execute(scopes):
        quota = quota_of(f"{scope} {name!r}", total, default)
        if quota is None:
            continue
        if scope == "project":
            tenancy.project_quotas[uuid.UUID(key)] = quota
        else:
            tenancy.domain_quotas[key] = quota
    await _load_usage(conn, tenancy, keys, projects, domains)
    dep_ids = sorted({d for s in sessions for d in s.depends_on})
    if dep_ids:
        for sid, status, result in await conn.execute(
            select(Session.id, Session.status, Session.result).where(Session.id.in_(dep_ids))
        ):
            tenancy.dependencies[sid] = (status, result)
    return tenancy


def _slot_usage_query(*group: Any) -> Any:
    """Slots held by placed, live kernels, summed per `group` columns and slot name."""
    slot = func.jsonb_each_text(Kernel.occupied_slots).table_valued("key", "value").alias("slot")
    return (
        select(*group, slot.c.key, func.sum(cast(slot.c.value, Numeric)))
        .select_from(Kernel)
        .join(Session, Session.id == Kernel.session_id)
        .join(slot, literal_column("true"))
        .where(Kernel.agent_id.is_not(None), Kernel.status.in_(slot_holding()))
        .group_by(*group, slot.c.key)
    )


async def _load_usage(
    conn: AsyncConnection,
    t: Tenancy,
    keys: Iterable[str],
    projects: Iterable[uuid.UUID],
    domains: Iterable[str],
) -> None:
    if not (t.project_quotas or t.domain_quotas or any(p.quota for p in t.keypairs.values())):
        return  # nobody has a quota: usage is not needed
    query = _slot_usage_query(Session.access_key, Session.project_id, Session.domain_name).where(
        (Session.access_key.in_(list(keys)))
        | (Session.project_id.in_(list(projects)))
        | (Session.domain_name.in_(list(domains)))
    )
    for access_key, project_id, domain, key, total in await conn.execute(query):
        amount = ResourceSlots({key: Decimal(total)})
        t.keypair_usage[access_key] = t.keypair_usage[access_key] + amount
        t.project_usage[project_id] = t.project_usage[project_id] + amount
        t.domain_usage[domain] = t.domain_usage[domain] + amount


async def _load_user_allocations(conn: AsyncConnection, snapshots: dict[str, ScalingGroupSnapshot]) -> None:
    drf = [name for name, s in snapshots.items() if s.scheduler == "drf"]
    if not drf:
        return
    query = _slot_usage_query(Session.scaling_group, Session.user_id).where(Session.scaling_group.in_(drf))
    for sg, user_id, key, total in await conn.execute(query):
        snap = snapshots[sg]
        snap.user_allocated[user_id] = snap.user_allocated[user_id] + ResourceSlots({key: Decimal(total)})
