"""Response models of `/v2/deployments` and `/v2/routes`: they shape the answers and the OpenAPI
document (the request models live with the controller, in `deployment_spec`)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from pydantic import BaseModel, Field

from sokovan.bus.routing import HealthCheck
from sokovan.common.types import DeploymentType, EndpointLifecycle, RouteStatus


class DeploymentDefinition(BaseModel):
    """What every replica session of a deployment is made from, as its type's generator made it."""

    image: str
    command: str = Field(description="run under /bin/sh -c; the server listens on $PORT")
    environ: dict[str, str]
    resources: dict[str, str] = Field(description="per replica, as slot strings")
    health_check: HealthCheck


class DeploymentOut(BaseModel):
    """A deployment. Timestamps are ISO 8601 UTC."""

    id: uuid.UUID
    name: str
    type: DeploymentType
    owner: str = Field(description="the owner's user name")
    status: EndpointLifecycle
    status_info: dict[str, Any] = Field(
        description="pending_reason: why the first waiting replica session is not placed yet"
    )
    replicas: int = Field(description="the target number of replicas")
    ready_replicas: int = Field(description="routes HEALTHY now")
    definition: DeploymentDefinition
    health_check: HealthCheck
    endpoint: str | None = Field(
        description="<app proxy URL>/<name>: where the deployment is served; null when no proxy registered"
    )
    scaling_group: str
    created_at: dt.datetime
    status_changed_at: dt.datetime
    destroyed_at: dt.datetime | None


class DeploymentList(BaseModel):
    items: list[DeploymentOut]
    next_cursor: str | None


class DeploymentDryRunResponse(BaseModel):
    """`POST /v2/deployments?dry_run=true`: what would be stored, after the same checks; written nowhere."""

    definition: DeploymentDefinition


class RouteHealth(BaseModel):
    """The app proxy's last probes of the route (zeros and nulls until it is probed)."""

    consecutive_successes: int
    consecutive_failures: int
    last_checked_at: dt.datetime | None
    last_status: str | None = Field(description='"200", "503", "timeout", "connection refused", ...')


class RouteOut(BaseModel):
    """One replica's route: its session, where it answers, and its health."""

    id: uuid.UUID
    session_id: uuid.UUID | None
    status: RouteStatus
    status_info: dict[str, Any]
    endpoint: str | None = Field(description="the replica's service address (http://host:port)")
    health: RouteHealth
    created_at: dt.datetime
    status_changed_at: dt.datetime
    terminated_at: dt.datetime | None


class RouteList(BaseModel):
    items: list[RouteOut] = Field(description="oldest first")
    next_cursor: str | None


class HandlerRun(BaseModel):
    """One handler run that touched a deployment or a route."""

    handler: str
    result: str = Field(description="SUCCESS, FAILURE, or (routes) STALE")
    from_status: str | None
    to_status: str | None
    message: str | None
    created_at: dt.datetime


class HandlerRunList(BaseModel):
    items: list[HandlerRun] = Field(description="oldest first")
    next_cursor: str | None
