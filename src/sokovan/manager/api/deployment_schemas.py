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


class RolloutOut(BaseModel):
    """The update in progress (while DEPLOYING)."""

    from_revision: int = Field(description="the last good revision: what a rollback restores")
    to_revision: int
    strategy: dict[str, Any] = Field(
        description='{"type": "rolling", "max_surge": "1", "max_unavailable": "0"} or {"type": "blue_green"}'
    )
    rollback_after: float = Field(description="seconds the new revision may go without a HEALTHY replica")
    started_at: dt.datetime | None
    rollback_at: dt.datetime | None = Field(description="started_at + rollback_after")
    rolled_back: bool = Field(description="true: this is the way back from a failed revision")


class AutoscalingOut(BaseModel):
    """The autoscaler's rules (seconds for the times)."""

    metric: str = Field(description="inflight or rps")
    target: float
    min_replicas: int
    max_replicas: int
    scale_up_cooldown: float
    scale_down_cooldown: float
    scale_to_zero_after: float | None
    activation_timeout: float


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
    revision: int = Field(description="1 at creation, one more per update")
    rollout: RolloutOut | None = Field(description="the update in progress; null when none")
    serving_revision: int | None = Field(
        description="blue-green: the one revision the routing table serves until the switch; null: all"
    )
    autoscaling: AutoscalingOut | None = Field(description="null: replicas are set by hand")
    open_to_public: bool = Field(description="true: the proxy takes requests without the access token")
    backoff_until: dt.datetime | None = Field(description="replacement replicas wait until then")
    drain_timeout: float = Field(description="seconds a replica taken out of service may finish requests")


class DeploymentCreated(DeploymentOut):
    """`POST /v2/deployments`' answer: the deployment, and its access token (shown only here)."""

    token: str | None = Field(
        default=None,
        description="the deployment's access token (Authorization: Bearer through the proxy); "
        "shown once; absent when open_to_public",
    )


class TokenOut(BaseModel):
    """A deployment's new access token, shown once; the old one stops working within seconds."""

    token: str


class DeploymentList(BaseModel):
    items: list[DeploymentOut]
    next_cursor: str | None


class DeploymentDryRunResponse(BaseModel):
    """`POST /v2/deployments?dry_run=true`: what would be stored, after the same checks, and
    whether one replica could be placed now; written nowhere."""

    definition: DeploymentDefinition
    placeable: bool = Field(description="one replica could be placed on the cluster as it is now")
    pending_reason: str | None = Field(
        description="why not (no agent offers the image, a quota, no room now); null when placeable"
    )


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
    revision: int = Field(description="the deployment revision its replica runs")


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
