"""Which GPUs a placed kernel gets (CONTRACT section 15): whole devices of its agent, by UUID.

Placement counts `cuda.device` like any slot (an agent offers its healthy devices only, so a
plan that fits by count has that many healthy devices free: devices taken by live kernels, even
ones that turned unhealthy under them, are counted as used). In the allocator's transaction, after
the bind and with the agents still locked, each bound kernel that asks for N devices gets N of its
agent's healthy devices no live kernel holds, lowest index first, and they are written on the
kernel (`kernels.devices`) and in its scheduling history (source `allocator`). A kernel's devices
are free again as soon as it no longer holds slots.
So no device is ever given twice, whichever manager placed the kernels: the agents' row locks
order every allocator that touches them. An agent that names `cuda.device` in its slots but
reports no devices gives its kernels none (nothing to bind).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.gpu import DEVICE_SLOT, HEALTHY
from sokovan.orchestrator.provisioner.snapshot import Placement
from sokovan.state.occupancy import slot_holding

_AGENTS = text("SELECT id, devices FROM agents WHERE id = ANY(CAST(:agents AS text[]))")
_TAKEN = text(
    """
    SELECT d.uuid FROM kernels k CROSS JOIN LATERAL jsonb_array_elements_text(k.devices) AS d(uuid)
    WHERE k.agent_id = ANY(CAST(:agents AS text[])) AND k.status = ANY(CAST(:live AS text[]))
      AND k.id <> ALL(CAST(:kernels AS uuid[])) AND k.devices <> '[]'::jsonb
    """
)
# The devices on the kernel, and a row of its scheduling history naming them.
_WRITE = text(
    """
    WITH given AS (
        UPDATE kernels AS k SET devices = v.devices
        FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(id uuid, devices jsonb)
        WHERE k.id = v.id
        RETURNING k.id, k.session_id, k.devices
    )
    INSERT INTO kernel_scheduling_history (kernel_id, session_id, source, from_status, to_status, message)
    SELECT id, session_id, 'allocator', NULL, NULL,
           'devices: ' || (SELECT string_agg(d, ',') FROM jsonb_array_elements_text(devices) AS d)
    FROM given ORDER BY id
    """
)


def wanted(placements: Sequence[Placement]) -> dict[uuid.UUID, tuple[str, int]]:
    """Kernel → (agent, devices) for the kernels of `placements` that ask for GPUs."""
    out: dict[uuid.UUID, tuple[str, int]] = {}
    for placement in placements:
        count = int(placement.slots_per_kernel.get(DEVICE_SLOT, 0))
        if count > 0:
            for kernel_id, agent_id in placement.kernels.items():
                out[kernel_id] = (agent_id, count)
    return out


def _index(device: dict[str, object]) -> int:
    _, _, number = str(device.get("id", "")).partition(":")
    return int(number) if number.isdigit() else 1 << 30


def choose(
    asked: dict[uuid.UUID, tuple[str, int]], devices: dict[str, list[dict[str, object]]], taken: set[str]
) -> dict[uuid.UUID, list[str]]:
    """Each asking kernel's devices (in kernel id order): its agent's healthy free ones, lowest
    index first; fewer than asked only where the agent reports fewer (no devices to bind)."""
    out: dict[uuid.UUID, list[str]] = {}
    for kernel_id in sorted(asked):
        agent_id, count = asked[kernel_id]
        free = [
            str(d["uuid"])
            for d in sorted(devices.get(agent_id, []), key=_index)
            if d.get("status", HEALTHY) == HEALTHY and str(d.get("uuid")) not in taken
        ]
        out[kernel_id] = free[:count]
        taken.update(out[kernel_id])
    return out


async def assign_devices(conn: AsyncConnection, placements: Sequence[Placement]) -> None:
    """Give the GPU-asking kernels of `placements` (just bound, agents locked) their devices."""
    asked = wanted(placements)
    if not asked:
        return
    agents = sorted({agent for agent, _ in asked.values()})
    rows = await conn.execute(_AGENTS, {"agents": agents})
    devices = {r.id: list(r.devices or []) for r in rows}
    params = {"agents": agents, "live": slot_holding(), "kernels": [str(k) for k in asked]}
    taken = set((await conn.execute(_TAKEN, params)).scalars())
    chosen = choose(asked, devices, taken)
    rows_json = [{"id": str(k), "devices": v} for k, v in chosen.items() if v]
    if rows_json:
        await conn.execute(_WRITE, {"rows": json.dumps(rows_json)})
