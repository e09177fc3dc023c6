"""Builds the scaling-group snapshots for one scheduling cycle, in a handful of statements."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionStatus
from sokovan.db.models import Agent, Keypair, KeypairResourcePolicy, ScalingGroup, Session
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, KeypairLimits, ScalingGroupSnapshot
from sokovan.orchestrator.schedule.repository import agent_occupancy

_ACTIVE = [s.value for s in SessionStatus.non_terminal() - {SessionStatus.PENDING}]


async def load_snapshots(
    conn: AsyncConnection, scaling_groups: Iterable[str], access_keys: Iterable[str]
) -> dict[str, ScalingGroupSnapshot]:
    names = sorted(set(scaling_groups))
    keys = sorted(set(access_keys))
    occupied, counts = await agent_occupancy(conn)
    orm = AsyncSession(bind=conn)
    agents_by_sg: dict[str, list[AgentSnapshot]] = {n: [] for n in names}
    for a in (
        await orm.execute(select(Agent).where(Agent.scaling_group.in_(names)).order_by(Agent.id))
    ).scalars():
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
    limits: dict[str, KeypairLimits] = {}
    for access_key, cap in await conn.execute(
        select(Keypair.access_key, KeypairResourcePolicy.max_concurrent_sessions)
        .outerjoin(KeypairResourcePolicy, KeypairResourcePolicy.name == Keypair.resource_policy)
        .where(Keypair.access_key.in_(keys))
    ):
        limits[access_key] = KeypairLimits(max_concurrent_sessions=cap)
    active: Counter[str] = Counter()
    for access_key, n in await conn.execute(
        select(Session.access_key, func.count())
        .where(Session.access_key.in_(keys), Session.status.in_(_ACTIVE))
        .group_by(Session.access_key)
    ):
        active[access_key] = int(n)
    out: dict[str, ScalingGroupSnapshot] = {}
    for sg in (await orm.execute(select(ScalingGroup).where(ScalingGroup.name.in_(names)))).scalars():
        out[sg.name] = ScalingGroupSnapshot(
            name=sg.name,
            scheduler=sg.scheduler,
            agent_selection=sg.agent_selection,
            agents=agents_by_sg.get(sg.name, []),
            limits=limits,
            active_sessions=Counter(active),
        )
    return out
