"""Derived occupancy: what each agent holds is the sum over its placed, live kernels, never a stored
counter, so every terminal path releases exactly what was held."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal

from sqlalchemy import Numeric, cast, func, literal_column, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus
from sokovan.db.models import Kernel


def slot_holding() -> list[str]:
    """`KernelStatus.slot_holding()` as SQL parameters: with `agent_id` set, a kernel in one of these
    holds slots on its agent."""
    return [s.value for s in KernelStatus.slot_holding()]


async def agent_occupancy(
    conn: AsyncConnection, agent_ids: Sequence[str] | None = None
) -> tuple[dict[str, ResourceSlots], dict[str, int]]:
    """Derived occupancy: slots and kernel counts held by non-terminal placed kernels, per agent."""
    slot = func.jsonb_each_text(Kernel.occupied_slots).table_valued("key", "value").alias("slot")
    where = [Kernel.agent_id.is_not(None), Kernel.status.in_(slot_holding())]
    if agent_ids is not None:
        where.append(Kernel.agent_id.in_(agent_ids))
    slot_rows = await conn.execute(
        select(Kernel.agent_id, slot.c.key, func.sum(cast(slot.c.value, Numeric)))
        .select_from(Kernel)
        .join(slot, literal_column("true"))
        .where(*where)
        .group_by(Kernel.agent_id, slot.c.key)
    )
    occupied: dict[str, ResourceSlots] = defaultdict(ResourceSlots)
    for agent_id, key, total in slot_rows:
        occupied[agent_id][key] = Decimal(total)
    count_rows = await conn.execute(
        select(Kernel.agent_id, func.count()).where(*where).group_by(Kernel.agent_id)
    )
    counts = {str(agent_id): int(n) for agent_id, n in count_rows}
    return dict(occupied), counts
