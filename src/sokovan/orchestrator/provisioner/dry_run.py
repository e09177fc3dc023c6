"""Where a session would go now, or why not: the real pipeline over the current snapshot,
written nowhere. A session that fits only by preempting is placeable on its nominated agents,
and `preempts` names the sessions it would evict (empty otherwise)."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.orchestrator.provisioner.reasons import WAITING, rejected, unknown_scaling_group
from sokovan.state.session_reads import KernelInfo, SessionWithKernels


@dataclass(frozen=True)
class DryRunRequest:
    """The placement-relevant fields of a create request."""

    access_key: str
    user_id: uuid.UUID
    project_id: uuid.UUID
    domain_name: str
    scaling_group: str
    type: str
    image: str
    resources: ResourceSlots
    command: str | None = None
    cluster_size: int = 1
    cluster_mode: str = "single-node"
    priority: int = 10
    depends_on: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True)
class DryRunResult:
    placeable: bool
    agents: list[str]  # one agent id per kernel, in cluster order
    pending_reason: str | None
    preempts: list[str] = field(default_factory=list)  # the sessions it would evict


async def dry_run(conn: AsyncConnection, req: DryRunRequest) -> DryRunResult:
    now = dt.datetime.now(dt.UTC)
    kernels = tuple(
        KernelInfo(
            id=uuid.uuid4(),
            status=KernelStatus.PENDING,
            agent_id=None,
            agent_addr=None,
            cluster_role="main" if i == 0 else "sub",
            cluster_idx=i,
            occupied_slots=req.resources,
            exit_code=None,
            status_info={},
        )
        for i in range(req.cluster_size)
    )
    session = SessionWithKernels(
        id=uuid.uuid4(),
        name="dry-run",
        access_key=req.access_key,
        user_id=req.user_id,
        project_id=req.project_id,
        domain_name=req.domain_name,
        scaling_group=req.scaling_group,
        pending_timeout=0,
        type=req.type,
        image=req.image,
        command=req.command,
        environ={},
        resources=req.resources,
        cluster_size=req.cluster_size,
        cluster_mode=req.cluster_mode,
        priority=req.priority,
        status=SessionStatus.PENDING,
        status_info={},
        status_changed_at=now,
        phase_attempts=0,
        created_at=now,
        kernels=kernels,
        depends_on=req.depends_on,
    )
    snapshots = await load_snapshots(conn, [session])
    snapshot = snapshots.get(req.scaling_group)
    if snapshot is None:
        return DryRunResult(False, [], unknown_scaling_group(req.scaling_group))
    plan = provisioner_for(snapshot).plan([session], snapshot)
    if plan.placements:
        placement = plan.placements[0]
        return DryRunResult(True, [placement.kernels[k.id] for k in kernels], None)
    for preemption in plan.preemptions:
        if preemption.session_id == session.id:
            return DryRunResult(True, list(preemption.agents), None, [str(v) for v in preemption.victims])
    if session.id in plan.rejected:
        cause, message = plan.rejected[session.id]
        return DryRunResult(False, [], rejected(message, cause))
    return DryRunResult(False, [], plan.waiting.get(session.id, WAITING))
