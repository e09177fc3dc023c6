"""Helpers for the deployment API tests: an agent offering the model servers' images, creating
deployments, counting what was written, and rows the coordinators would write."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, insert, select, update

from sokovan.common.types import EndpointLifecycle
from sokovan.db.models import AuditLog, Deployment, DeploymentHistory, Route, RouteHistory, Session
from tests.api.conftest import Api, add_agent
from tests.orchestrator.db_seed import session_row

MODEL_IMAGES = ["vllm", "tgi", "sglang"]
CUSTOM = {"type": "custom", "image": "python:3", "command": "python3 -m http.server $PORT"}


async def add_model_agent(api: Api, agent_id: str = "gpu-1") -> None:
    await add_agent(api.engine, agent_id, images=[*MODEL_IMAGES, "python:3"])


async def create(api: Api, headers: dict[str, str], **body: Any) -> Any:
    payload = {"name": "web", **CUSTOM, **body}
    return await api.client.post("/v2/deployments", json=payload, headers=headers)


async def created(api: Api, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    resp = await create(api, headers, **body)
    assert resp.status == 201, await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


async def counts(api: Api) -> tuple[int, int, int]:
    """(deployments, deployment history rows, audit rows)."""
    async with api.engine.connect() as conn:
        return (
            (await conn.execute(select(func.count()).select_from(Deployment))).scalar_one(),
            (await conn.execute(select(func.count()).select_from(DeploymentHistory))).scalar_one(),
            (await conn.execute(select(func.count()).select_from(AuditLog))).scalar_one(),
        )


async def set_status(api: Api, deployment_id: str, status: EndpointLifecycle) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Deployment).where(Deployment.id == uuid.UUID(deployment_id)).values(status=status.value)
        )


async def add_route(api: Api, deployment_id: str, status: str, **values: Any) -> uuid.UUID:
    route_id = uuid.uuid4()
    async with api.engine.begin() as conn:
        await conn.execute(
            insert(Route).values(id=route_id, deployment_id=uuid.UUID(deployment_id), status=status, **values)
        )
    return route_id


async def add_route_history(
    api: Api, route_id: uuid.UUID, handler: str, result: str, src: str, dst: str
) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(
            insert(RouteHistory).values(
                route_id=route_id, handler=handler, result=result, from_status=src, to_status=dst
            )
        )


async def add_replica_session(
    api: Api, deployment_id: str, user: str, status: str, info: dict[str, Any]
) -> None:
    """An inference session of the deployment, as the coordinator would create it."""
    async with api.engine.begin() as conn:
        dep = (
            await conn.execute(
                select(Deployment.access_key, Deployment.user_id, Deployment.project_id).where(
                    Deployment.id == uuid.UUID(deployment_id)
                )
            )
        ).one()
        await conn.execute(
            insert(Session).values(
                session_row(
                    id=uuid.uuid4(),
                    name=f"{user}-replica",
                    access_key=dep.access_key,
                    user_id=dep.user_id,
                    project_id=dep.project_id,
                    type="inference",
                    resources={"cpu": "1"},
                    status=status,
                    status_info=info,
                    deployment_id=uuid.UUID(deployment_id),
                )
            )
        )
