"""Allocation invariants, checked against the database.

- Each agent's occupied slots (what the scheduler and the API use: `agent_occupancy`) equal the
  sum of the slots of its placed, non-terminal kernels, counted here independently, row by row.
- No agent holds more than its capacity or its kernel limit.
- No live kernel is left in a session that has ended (resources never leak).
- A placed live kernel sits on an agent of its session's scaling group.
Returns a list of violations (empty when all hold).
"""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.db.models import Agent, Kernel, Session
from sokovan.state.occupancy import agent_occupancy


async def check_invariants(conn: AsyncConnection) -> list[str]:
    problems: list[str] = []
    live = [s.value for s in KernelStatus.non_terminal()]
    rows = await conn.execute(
        select(Kernel.id, Kernel.agent_id, Kernel.occupied_slots, Session.status, Session.scaling_group)
        .join(Session, Session.id == Kernel.session_id)
        .where(Kernel.status.in_(live))
    )
    summed: dict[str, ResourceSlots] = defaultdict(ResourceSlots)
    counted: dict[str, int] = defaultdict(int)
    placed_in: dict[str, set[str]] = defaultdict(set)
    for kernel_id, agent_id, slots, session_status, sg in rows:
        if SessionStatus(session_status).is_terminal:
            problems.append(f"kernel {kernel_id} is live in a {session_status} session")
        if agent_id is not None:
            summed[agent_id] = summed[agent_id] + ResourceSlots.from_json(slots)
            counted[agent_id] += 1
            placed_in[agent_id].add(sg)
    occupied, counts = await agent_occupancy(conn)
    agents = {a.id: a for a in (await conn.execute(select(Agent))).all()}
    for agent_id in sorted(set(summed) | set(occupied)):
        mine = {k: v for k, v in summed.get(agent_id, ResourceSlots()).items() if v}
        theirs = {k: v for k, v in occupied.get(agent_id, ResourceSlots()).items() if v}
        if mine != theirs or counted.get(agent_id, 0) != counts.get(agent_id, 0):
            problems.append(f"agent {agent_id}: occupied {theirs} != sum of its live kernels {mine}")
        agent = agents.get(agent_id)
        if agent is None:
            problems.append(f"kernels placed on unknown agent {agent_id}")
            continue
        short = ResourceSlots(mine).shortfall(ResourceSlots.from_json(agent.available_slots))
        if short:
            problems.append(f"agent {agent_id} over capacity in {', '.join(short)}")
        if agent.max_kernels is not None and counted[agent_id] > agent.max_kernels:
            problems.append(f"agent {agent_id} holds {counted[agent_id]} kernels, limit {agent.max_kernels}")
        foreign = placed_in[agent_id] - {agent.scaling_group}
        if foreign:
            problems.append(f"agent {agent_id} ({agent.scaling_group}) holds kernels of {sorted(foreign)}")
    return problems
