"""Pydantic models of REST v2: the same classes validate requests, shape responses and make
the OpenAPI document."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sokovan.common.types import (
    ClusterMode,
    KernelStatus,
    Role,
    SessionResult,
    SessionStatus,
    SessionType,
)
from sokovan.manager.controller.session_spec import SessionCreateRequest

__all__ = [
    "DryRunResponse",
    "HealthResponse",
    "HistoryItem",
    "HistoryList",
    "KernelLogs",
    "KernelOut",
    "KeypairCreateRequest",
    "KeypairCreateResponse",
    "KeypairSecretResponse",
    "LogsResponse",
    "ProblemDetails",
    "SessionCreateRequest",
    "SessionList",
    "SessionOut",
]

TENANT_NAME = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"


class FieldError(BaseModel):
    field: str
    message: str
    type: str


class ProblemDetails(BaseModel):
    """RFC 9457 problem details (`application/problem+json`)."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None


class KernelOut(BaseModel):
    id: uuid.UUID
    status: KernelStatus
    agent_id: str | None
    exit_code: int | None
    cluster_role: str
    service_addr: str | None = Field(
        default=None, description="where the kernel's HTTP server answers (inference kernels), once running"
    )
    image: str | None = Field(
        default=None,
        description="the image the kernel runs: the reference its agent resolved (a short name placed in "
        "the agent's default registry), or the session's image until a container agent reports it",
    )
    image_digest: str | None = Field(
        default=None, description="the manifest digest (sha256:…) of the image it runs; null when unknown"
    )
    devices: list[str] = Field(
        default_factory=list, description="the UUIDs of the GPUs it was given (empty: none)"
    )


class SessionOut(BaseModel):
    """A session. `resources` are per kernel, as slot strings; timestamps are ISO 8601 UTC."""

    id: uuid.UUID
    name: str
    owner: str
    access_key: str
    status: SessionStatus
    result: SessionResult | None
    status_info: dict[str, Any] = Field(
        description="cause, message, pending_reason, retry; with preemption: preempted_by, preempt_mode "
        "and kill_grace on a victim, preempted_count on a requeued session, nominated_agents, "
        "nominated_until and preempts on a preemptor waiting for its victims"
    )
    type: SessionType
    image: str
    command: str | None
    resources: dict[str, str]
    cluster_size: int
    cluster_mode: ClusterMode
    scaling_group: str
    priority: int = Field(description="0-100, higher first")
    preemptible: bool = Field(
        description="a higher-priority session may evict it when its scaling group's preemption is on"
    )
    max_duration: int | None = Field(
        default=None, description="its declared run time in seconds (null: none); past it, it ends"
    )
    environ: dict[str, str]
    depends_on: list[uuid.UUID]
    kernels: list[KernelOut]
    created_at: dt.datetime
    status_changed_at: dt.datetime
    terminated_at: dt.datetime | None
    creation_id: str | None
    parent_session_id: uuid.UUID | None
    retry_count: int
    max_retries: int
    retry_policy: dict[str, Any] | None
    retry_cause: str | None
    retry_state: str = Field(description='"attempt N of M", M = 1 + max_retries')
    retry_child_id: uuid.UUID | None = Field(description="the next attempt, if this one was retried")
    retry_chain: list[uuid.UUID] = Field(description="every attempt's id, oldest first")


class SessionList(BaseModel):
    items: list[SessionOut]
    next_cursor: str | None


class HistoryItem(BaseModel):
    handler: str
    result: str
    from_status: str | None
    to_status: str | None
    message: str | None
    attempt: int
    created_at: dt.datetime


class HistoryList(BaseModel):
    items: list[HistoryItem]
    next_cursor: str | None


class KernelLogs(BaseModel):
    kernel_id: uuid.UUID
    stdout: str
    stderr: str
    error: str | None = Field(default=None, description="set when the kernel's agent could not be asked")


class LogsResponse(BaseModel):
    items: list[KernelLogs]


class KeypairCreateRequest(BaseModel):
    """Creates the user and the project (in `domain`) if they are missing; the domain must exist."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(pattern=TENANT_NAME)
    project: str = Field(pattern=TENANT_NAME)
    domain: str = Field(default="default", pattern=TENANT_NAME)
    role: Role = Role.USER
    resource_policy: str | None = Field(default=None, min_length=1, max_length=64)


class KeypairCreateResponse(BaseModel):
    access_key: str
    token: str = Field(description="shown once: only its hash is stored")
    secret_key: str | None = Field(
        description="shown once: the secret of Backend.AI's request signatures, stored sealed under the "
        "cluster secret; null when the manager has no cluster secret"
    )


class KeypairSecretResponse(BaseModel):
    """A keypair's new secret key (its old one signs nothing any more)."""

    access_key: str
    secret_key: str = Field(description="shown once: stored sealed under the cluster secret")


class HealthResponse(BaseModel):
    status: str = Field(description='"ok" or "unavailable"')
    checks: dict[str, str] = Field(description='per dependency: "ok" or what failed')


class DryRunResponse(BaseModel):
    """`POST /v2/sessions?dry_run=true`: where the session would go now, or why it would wait.
    Computed against the current cluster and written nowhere."""

    placeable: bool
    agents: list[str] = Field(description="the agent of each kernel, in cluster order; [] if not placeable")
    pending_reason: str | None = Field(description="why it would wait in PENDING; null if placeable")
    preempts: list[str] = Field(default_factory=list, description="the sessions it would preempt to fit")
