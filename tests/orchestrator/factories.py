"""In-memory sessions and agents for the pure tests."""

from __future__ import annotations

import datetime as dt
import uuid

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, KernelStatus, SessionStatus
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, ScalingGroupSnapshot
from sokovan.state.session_reads import KernelInfo, SessionWithKernels

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PROJECT = uuid.UUID(int=1)


def kernel(status: KernelStatus = KernelStatus.PENDING, **kw: object) -> KernelInfo:
    values: dict[str, object] = {
        "id": uuid.uuid4(),
        "status": status,
        "agent_id": None,
        "agent_addr": None,
        "cluster_role": "main",
        "cluster_idx": 0,
        "occupied_slots": ResourceSlots.parse({"cpu": 1}),
        "exit_code": None,
        "status_info": {},
    }
    values.update(kw)
    return KernelInfo(**values)  # type: ignore[arg-type]


def session(
    *,
    cpu: int = 1,
    mem: str = "1g",
    size: int = 1,
    mode: str = "single-node",
    priority: int = 10,
    created: int = 0,
    owner: str = "AK1",
    image: str = "python:3",
    kernels: list[KernelInfo] | None = None,
    status: SessionStatus = SessionStatus.PENDING,
    user: uuid.UUID | None = None,
    project: uuid.UUID | None = None,
    type: str = "batch",
    command: str | None = "true",
    depends_on: tuple[uuid.UUID, ...] = (),
) -> SessionWithKernels:
    slots = ResourceSlots.parse({"cpu": cpu, "mem": mem})
    return SessionWithKernels(
        id=uuid.uuid4(),
        name="s",
        access_key=owner,
        user_id=user or uuid.uuid4(),
        project_id=project or PROJECT,
        domain_name="default",
        scaling_group="default",
        pending_timeout=0,
        type=type,
        image=image,
        command=command,
        environ={},
        resources=slots,
        cluster_size=size,
        cluster_mode=mode,
        priority=priority,
        status=status,
        status_info={},
        status_changed_at=T0,
        phase_attempts=0,
        created_at=T0 + dt.timedelta(seconds=created),
        kernels=tuple(kernels or [kernel(cluster_idx=i, occupied_slots=slots) for i in range(size)]),
        depends_on=depends_on,
    )


def agent(
    name: str,
    cpu: int = 4,
    mem: str = "8g",
    *,
    used_cpu: int = 0,
    status: AgentStatus = AgentStatus.READY,
    images: tuple[str, ...] = ("python:3", "shell"),
    max_kernels: int | None = None,
) -> AgentSnapshot:
    return AgentSnapshot(
        id=name,
        status=status,
        schedulable=True,
        available=ResourceSlots.parse({"cpu": cpu, "mem": mem}),
        occupied=ResourceSlots.parse({"cpu": used_cpu}),
        kernel_count=0,
        max_kernels=max_kernels,
        images=frozenset(images),
    )


def snapshot(*agents: AgentSnapshot, **kw: object) -> ScalingGroupSnapshot:
    values: dict[str, object] = {"name": "default", "scheduler": "fifo", "agent_selection": "concentrated"}
    values.update(kw)
    return ScalingGroupSnapshot(agents=list(agents), **values)  # type: ignore[arg-type]
