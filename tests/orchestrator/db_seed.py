"""Rows for coordinator tests, inserted straight into the test database."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import Row, Select, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import AgentStatus, EndpointLifecycle, KernelStatus, SessionStatus
from sokovan.db.models import Agent, Deployment, Domain, Kernel, Keypair, Project, ScalingGroup, Session, User


async def read_one(engine: AsyncEngine, query: Select[Any]) -> Row[Any]:
    """The one row `query` reads (on a connection of its own)."""
    async with engine.connect() as conn:
        return (await conn.execute(query)).one()


async def read_column(engine: AsyncEngine, query: Select[Any]) -> list[Any]:
    """The first column of every row `query` reads, in its order (on a connection of its own)."""
    async with engine.connect() as conn:
        return list((await conn.execute(query)).scalars())


async def session_kernel(engine: AsyncEngine, sid: uuid.UUID, column: Any) -> tuple[uuid.UUID, str, Any]:
    """(id, status, `column`) of the one kernel of the session `sid`."""
    row = await read_one(engine, select(Kernel.id, Kernel.status, column).where(Kernel.session_id == sid))
    return row[0], row[1], row[2]


def session_row(**values: Any) -> dict[str, Any]:
    """A `sessions` row of the default domain and scaling group, running `python:3`: `values` give the
    rest (id, name, owner, type, resources, status, ...)."""
    return dict(domain_name="default", scaling_group="default", image="python:3", **values)


class Seed:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.user_id = uuid.uuid4()
        self.project_id = uuid.uuid4()

    async def tenancy(self, *, pending_timeout: float = 0) -> Seed:
        async with self.engine.begin() as conn:
            await conn.execute(insert(Domain).values(name="default"))
            await conn.execute(
                insert(Project).values(id=self.project_id, name="default", domain_name="default")
            )
            await conn.execute(insert(User).values(id=self.user_id, name="alice", domain_name="default"))
            await conn.execute(
                insert(Keypair).values(
                    access_key="AK1",
                    token_hash="h1",
                    user_id=self.user_id,
                    project_id=self.project_id,
                    role="user",
                )
            )
            await conn.execute(insert(ScalingGroup).values(name="default", pending_timeout=pending_timeout))
        return self

    async def deployment(self, status: EndpointLifecycle) -> uuid.UUID:
        """A deployment of the seeded user in `status` (one replica, nothing running)."""
        did = uuid.uuid4()
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(Deployment).values(
                    id=did,
                    name=f"d-{did.hex[:8]}",
                    type="custom",
                    access_key="AK1",
                    user_id=self.user_id,
                    project_id=self.project_id,
                    domain_name="default",
                    scaling_group="default",
                    replicas=1,
                    definition={"image": "python:3", "command": "true", "resources": {}},
                    health_check={},
                    status=status.value,
                )
            )
        return did

    async def agent(self, agent_id: str, cpu: int = 4, status: AgentStatus = AgentStatus.READY) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(Agent).values(
                    id=agent_id,
                    status=status.value,
                    scaling_group="default",
                    available_slots={"cpu": str(cpu), "mem": str(8 * 2**30)},
                    rpc_addr="127.0.0.1:1",
                    images=["python:3", "shell"],
                    boot_id="b",
                )
            )

    async def session(
        self,
        *,
        cpu: int = 1,
        size: int = 1,
        status: SessionStatus = SessionStatus.PENDING,
        kernel_status: KernelStatus | None = None,
        agent_id: str | None = None,
        **extra: Any,
    ) -> uuid.UUID:
        sid = uuid.uuid4()
        slots = {"cpu": str(cpu), "mem": str(2**30)}
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(Session).values(
                    session_row(
                        id=sid,
                        name=f"s-{sid.hex[:8]}",
                        access_key="AK1",
                        user_id=self.user_id,
                        project_id=self.project_id,
                        type="batch",
                        command="true",
                        resources=slots,
                        cluster_size=size,
                        status=status.value,
                        **extra,
                    )
                )
            )
            await conn.execute(
                insert(Kernel),
                [
                    {
                        "session_id": sid,
                        "cluster_idx": i,
                        "cluster_role": "main" if i == 0 else "sub",
                        "status": (kernel_status or KernelStatus(status.value)).value,
                        "occupied_slots": slots,
                        "agent_id": agent_id,
                    }
                    for i in range(size)
                ],
            )
        return sid
