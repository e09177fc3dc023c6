"""Builds the snapshots for one scheduling cycle in a fixed handful of statements."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import Numeric, cast, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionStatus
from sokovan.db.models import (
    Agent,
    Domain,
    Kernel,
    Keypair,
    KeypairResourcePolicy,
    Project,
    ScalingGroup,
    Session,
)
from sokovan.orchestrator.provisioner.snapshot import (
    AgentSnapshot,
    KeypairPolicy,
    ScalingGroupSnapshot,
    Tenancy,
)
from sokovan.state.occupancy import agent_occupancy, slot_holding
from sokovan.state.quota import quota_of
from sokovan.state.session_reads import SessionWithKernels

_ACTIVE = [s.value for s in SessionStatus.non_terminal() - {SessionStatus.PENDING}]


async def load_snapshots(
    conn: AsyncConnection, sessions: Sequence[SessionWithKernels]
) -> dict[str, ScalingGroupSnapshot]:
    names = sorted({s.scaling_group for s in sessions})
    orm = AsyncSession(bind=conn)
    tenancy = await _load_tenancy(conn, orm, sessions)
    occupied, counts = await agent_occupancy(conn)
    agents_by_sg: dict[str, list[AgentSnapshot]] = {n: [] for n in names}
    agents = await orm.execute(select(Agent).where(Agent.scaling_group.in_(names)).order_by(Agent.id))
    for a in agents.scalars():
        agents_by_sg[a.scaling_group].append(
            AgentSnapshot(
                id=a.id,
                status=AgentStatus(a.status),
                schedulable=a.schedulable,
                available=ResourceSlots.from_json(a.available_slots),
                occupied=occupied.get(a.id, ResourceSlots()),
                kernel_count=counts.get(a.id, 0),
                max_kernels=a.max_kernels,
                images=frozenset(a.images or ()),
            )
        )
    out: dict[str, ScalingGroupSnapshot] = {}
    for sg in (await orm.execute(select(ScalingGroup).where(ScalingGroup.name.in_(names)))).scalars():
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
        )
        out[sg.name] = snapshot
    await _load_user_allocations(conn, out)
    return out


async def _load_tenancy(
    conn: AsyncConnection, orm: AsyncSession, sessions: Sequence[SessionWithKernels]
) -> Tenancy:
    tenancy = Tenancy()
    keys = sorted({s.access_key for s in sessions})
    projects = sorted({s.project_id for s in sessions})
    domains = sorted({s.domain_name for s in sessions})
    rows = await orm.execute(
        select(Keypair.access_key, KeypairResourcePolicy)
        .outerjoin(KeypairResourcePolicy, KeypairResourcePolicy.name == Keypair.resource_policy)
        .where(Keypair.access_key.in_(keys))
    )
    for access_key, policy in rows:
        if policy is None:
            tenancy.keypairs[access_key] = KeypairPolicy()
            continue
        tenancy.keypairs[access_key] = KeypairPolicy(
            name=policy.name,
            quota=quota_of(
                f"keypair policy {policy.name!r}", policy.total_resource_slots, policy.default_for_unspecified
            ),
            max_concurrent_sessions=policy.max_concurrent_sessions,
            max_pending_sessions=policy.max_pending_sessions,
        )
    for p in (await orm.execute(select(Project).where(Project.id.in_(projects)))).scalars():
        quota = quota_of(f"project {p.name!r}", p.total_resource_slots, p.default_for_unspecified)
        if quota is not None:
            tenancy.project_quotas[p.id] = quota
    for d in (await orm.execute(select(Domain).where(Domain.name.in_(domains)))).scalars():
        quota = quota_of(f"domain {d.name!r}", d.total_resource_slots, d.default_for_unspecified)
        if quota is not None:
            tenancy.domain_quotas[d.name] = quota
    await _load_usage(conn, tenancy, keys, projects, domains)
    for access_key, n in await conn.execute(
        select(Session.access_key, func.count())
        .where(Session.access_key.in_(keys), Session.status.in_(_ACTIVE))
        .group_by(Session.access_key)
    ):
        tenancy.active_sessions[access_key] = int(n)
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
