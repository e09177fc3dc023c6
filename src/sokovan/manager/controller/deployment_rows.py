"""What the deployment controller's writes share: the locked row, a history row, the statuses
that end a deployment for the API, and access tokens."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.types import EndpointLifecycle, HandlerOutcome
from sokovan.db.models import Deployment, DeploymentHistory
from sokovan.manager.controller.errors import Conflict, NotFound
from sokovan.manager.repositories.deployments_read import visible
from sokovan.manager.repositories.tenancy import Principal

# Once a deployment is in one of these, nothing the API does brings it back.
ENDING = frozenset({EndpointLifecycle.DESTROYING, EndpointLifecycle.DESTROYED})
ENDING_VALUES = sorted(s.value for s in ENDING)


def new_token() -> tuple[str, str]:
    """A deployment access token and its sha256 (hex), which is all that is stored."""
    token = secrets.token_urlsafe(32)
    return token, token_digest(token)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def locked(conn: AsyncConnection, principal: Principal, deployment_id: uuid.UUID) -> Any:
    """The deployment's row as the caller may see it, held until the transaction ends."""
    row = (
        await conn.execute(
            select(*Deployment.__table__.c)
            .where(Deployment.id == deployment_id, visible(principal))
            .with_for_update()
        )
    ).first()
    if row is None:
        raise NotFound(f"deployment {deployment_id} not found")
    return row


def refuse_ending(row: Any, doing: str) -> EndpointLifecycle:
    """Its status; 409 once it is being destroyed."""
    status = EndpointLifecycle(row.status)
    if status in ENDING:
        raise Conflict(f"deployment {row.id} is {status.value}: it can no longer {doing}")
    return status


async def history(
    conn: AsyncConnection,
    deployment_id: uuid.UUID,
    handler: str,
    from_status: EndpointLifecycle | None,
    to_status: EndpointLifecycle,
    message: str,
) -> None:
    await conn.execute(
        insert(DeploymentHistory).values(
            deployment_id=deployment_id,
            handler=handler,
            result=HandlerOutcome.SUCCESS.value,
            from_status=from_status.value if from_status is not None else None,
            to_status=to_status.value,
            message=message,
        )
    )
