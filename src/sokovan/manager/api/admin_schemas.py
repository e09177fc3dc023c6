"""Pydantic models of the admin side of REST v2: resource policies, projects, domains, scaling
groups and agents. The same classes validate requests, shape responses and make the OpenAPI
document."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from sokovan.common.gpu import DeviceInfo
from sokovan.common.preemption import PreemptionSettings
from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionType
from sokovan.manager.controller.stages import check_scheduler, check_selector

DefaultForUnspecified = Literal["limited", "unlimited"]
QueuePolicy = Literal["backfill", "block", "reserve"]
SlotName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")]
SlotAmount = StrictInt | StrictFloat | StrictStr

MAX_COUNT = 1_000_000  # sessions: far above any real limit, well inside the INTEGER columns
MAX_SECONDS = 10**9  # about 31 years: inside INTEGER columns and datetime arithmetic
MAX_FAIR_SHARE_WEIGHT = 1e6

_SLOTS_DOC = (
    "Slot name → amount (`mem` takes bytes or '8g'). Null or left out: no limit. A slot it does not "
    "name counts as 0 unless default_for_unspecified is 'unlimited'; a slot given as null counts as "
    "not named."
)


def _parse_limit_slots(value: dict[str, Any] | None) -> dict[str, str] | None:
    """Slots of a quota as stored: decimal strings; a slot given as null is left out."""
    if value is None:
        return None
    return ResourceSlots.parse({k: v for k, v in value.items() if v is not None}).to_json()


class ResourcePolicyPut(BaseModel):
    """Body of `PUT /v2/resource-policies/{name}`: the whole policy (fields left out take defaults).
    A count left out or null is unlimited; 0 means zero."""

    model_config = ConfigDict(extra="forbid")

    total_resource_slots: dict[str, SlotAmount | None] | None = Field(default=None, description=_SLOTS_DOC)
    default_for_unspecified: DefaultForUnspecified = "limited"
    max_concurrent_sessions: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    max_pending_sessions: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    max_session_lifetime: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        description="seconds a session may run before it is ended (LIFETIME_EXCEEDED); null or 0: no limit",
    )

    @field_validator("total_resource_slots")
    @classmethod
    def _slots(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _parse_limit_slots(value)


class ResourcePolicyOut(BaseModel):
    name: str
    total_resource_slots: dict[str, str] | None
    default_for_unspecified: DefaultForUnspecified
    max_concurrent_sessions: int | None
    max_pending_sessions: int | None
    max_session_lifetime: int | None
    created_at: dt.datetime


class TenantLimitsPut(BaseModel):
    """Body of `PUT /v2/projects/{name}` and `PUT /v2/domains/{name}`. Fields left out keep their
    value (or take the default when the project or domain is created); null clears."""

    model_config = ConfigDict(extra="forbid")

    total_resource_slots: dict[str, SlotAmount | None] | None = Field(default=None, description=_SLOTS_DOC)
    default_for_unspecified: DefaultForUnspecified = "limited"
    retry_policy_default: RetryPolicy | None = None
    fair_share_weight: StrictInt | StrictFloat = Field(
        default=1.0,
        gt=0,
        le=MAX_FAIR_SHARE_WEIGHT,
        allow_inf_nan=False,
        description="its entitlement under the `fair_share` scheduler, against its siblings' (a "
        "domain's against the other domains', a project's against its domain's other projects')",
    )

    @field_validator("total_resource_slots")
    @classmethod
    def _slots(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _parse_limit_slots(value)

    def changes(self) -> dict[str, Any]:
        """The columns this request sets: only the fields it names."""
        values = {
            "total_resource_slots": self.total_resource_slots,
            "default_for_unspecified": self.default_for_unspecified,
            # Only the fields given are stored, so that retry defaults merge field by field
            # (session > project > domain > cluster); the response shows them filled in.
            "retry_policy_default": (
                self.retry_policy_default.model_dump(mode="json", exclude_unset=True)
                if self.retry_policy_default
                else None
            ),
            "fair_share_weight": float(self.fair_share_weight),
        }
        return {k: v for k, v in values.items() if k in self.model_fields_set}


class DomainOut(BaseModel):
    name: str
    total_resource_slots: dict[str, str] | None
    default_for_unspecified: DefaultForUnspecified
    retry_policy_default: dict[str, Any] | None
    fair_share_weight: float
    created_at: dt.datetime

    @field_validator("retry_policy_default")
    @classmethod
    def _filled(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else RetryPolicy.model_validate(value).model_dump(mode="json")


class ProjectOut(DomainOut):
    id: uuid.UUID
    domain: str


def _unique(value: list[Any] | None) -> list[Any] | None:
    if value is not None and len(set(value)) != len(value):
        raise ValueError("names must not repeat")
    return value


_PREEMPTION_DOC = (
    '{"mode": "off" | "terminate" | "requeue", "grace_period": seconds between SIGTERM and SIGKILL '
    "for a victim's kernels, 0-3600}; mode off (the default) never preempts"
)


def _strict_preemption(value: Any) -> Any:
    """JSON types as given, before `PreemptionSettings` (which would read "30" or true as a number)."""
    if isinstance(value, dict):
        grace = value.get("grace_period")
        if "grace_period" in value and (isinstance(grace, bool) or not isinstance(grace, int | float)):
            raise ValueError("preemption.grace_period must be a number of seconds")
        if "mode" in value and not isinstance(value["mode"], str):
            raise ValueError("preemption.mode must be a string: off, terminate or requeue")
    return value


class ScalingGroupPatch(BaseModel):
    """Body of `PATCH /v2/scaling-groups/{name}`: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    scheduler: str | None = Field(
        default=None,
        description="a registered sequencer: fifo, lifo, drf, fair_share",
        json_schema_extra={"example": "fifo"},
    )
    agent_selection: str | None = Field(
        default=None,
        description="a registered selector: concentrated, dispersed, roundrobin",
        json_schema_extra={"example": "concentrated"},
    )
    pending_timeout: float | None = Field(
        default=None,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a session may wait in PENDING; 0 = forever",
    )
    allowed_session_types: list[SessionType] | None = Field(default=None, min_length=1)
    queue_policy: QueuePolicy | None = None
    resource_priority: list[SlotName] | None = Field(
        default=None, min_length=1, description="slot names in the order selectors compare agents by"
    )
    preemption: PreemptionSettings | None = Field(
        default=None,
        description=_PREEMPTION_DOC + "; the keys given replace the stored ones, the others are kept",
        json_schema_extra={"example": {"mode": "terminate", "grace_period": 30}},
    )

    @field_validator("preemption", mode="before")
    @classmethod
    def _strict_preemption(cls, value: Any) -> Any:
        return _strict_preemption(value)

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, value: str | None) -> str | None:
        return check_scheduler(value)

    @field_validator("agent_selection")
    @classmethod
    def _known_selector(cls, value: str | None) -> str | None:
        return check_selector(value)

    @field_validator("allowed_session_types", "resource_priority")
    @classmethod
    def _no_repeats(cls, value: list[Any] | None) -> list[Any] | None:
        return _unique(value)

    @model_validator(mode="after")
    def _no_nulls(self) -> Self:
        nulls = sorted(n for n in self.model_fields_set if getattr(self, n) is None)
        if nulls:
            raise ValueError(f"{', '.join(nulls)} may not be null (leave a field out to keep it)")
        return self

    def changes(self) -> dict[str, Any]:
        """Column values for the fields this request names (a null one is refused upstream)."""
        out: dict[str, Any] = {}
        for name in sorted(self.model_fields_set):
            value = getattr(self, name)
            if name == "allowed_session_types":
                value = [t.value for t in value]
            elif name == "preemption":  # only the keys given: merged over the stored object
                value = value.model_dump(mode="json", exclude_unset=True)
            out[name] = value
        return out


class ScalingGroupCreate(ScalingGroupPatch):
    """Body of `POST /v2/scaling-groups`; fields left out take the defaults shown."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    scheduler: str = Field(default="fifo", description="a registered sequencer: fifo, lifo, drf, fair_share")
    agent_selection: str = Field(
        default="concentrated", description="a registered selector: concentrated, dispersed, roundrobin"
    )
    pending_timeout: float = Field(
        default=0,
        ge=0,
        le=MAX_SECONDS,
        allow_inf_nan=False,
        description="seconds a session may wait; 0 = forever",
    )
    allowed_session_types: list[SessionType] = Field(default_factory=lambda: list(SessionType), min_length=1)
    queue_policy: QueuePolicy = "backfill"
    resource_priority: list[SlotName] = Field(
        default_factory=lambda: ["cuda.device", "cpu", "mem"], min_length=1
    )
    preemption: PreemptionSettings = Field(
        default_factory=PreemptionSettings,
        description=_PREEMPTION_DOC + "; keys left out take their defaults (grace_period 30)",
        json_schema_extra={"example": {"mode": "terminate", "grace_period": 30}},
    )

    def values(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "scheduler": self.scheduler,
            "agent_selection": self.agent_selection,
            "pending_timeout": self.pending_timeout,
            "allowed_session_types": [t.value for t in self.allowed_session_types],
            "queue_policy": self.queue_policy,
            "resource_priority": list(self.resource_priority),
            "preemption": self.preemption.model_dump(mode="json"),
        }


class ScalingGroupOut(BaseModel):
    name: str
    scheduler: str
    agent_selection: str
    pending_timeout: float
    allowed_session_types: list[SessionType]
    queue_policy: QueuePolicy
    resource_priority: list[str]
    preemption: PreemptionSettings = Field(
        description="what a session that finds no room may do to lower-priority preemptible ones"
    )
    created_at: dt.datetime


class ScalingGroupList(BaseModel):
    items: list[ScalingGroupOut]
    next_cursor: str | None


class AgentOut(BaseModel):
    """An agent. Slots are decimal strings; `occupied_slots` and `running_kernels` are derived
    from its placed kernels that have not ended. `schedulable`: it takes new kernels now (READY
    and not held off scheduling)."""

    id: str
    status: AgentStatus
    status_changed_at: dt.datetime
    status_info: dict[str, Any] = Field(
        description="why it is in its status: reason, handler (what moved it), by (the operator)"
    )
    agent_class: str = Field(description="standard, sensitive or borrowed: picks its grace period")
    scaling_group: str
    available_slots: dict[str, str]
    occupied_slots: dict[str, str]
    last_heartbeat_at: dt.datetime | None
    heartbeat_seq: int
    boot_id: str
    health: dict[str, Any] = Field(description="the health summary of its last heartbeat")
    rejected_beats: int = Field(description="heartbeats refused as replays")
    disabled: bool = Field(description="an operator's disable: DOWN until enabled")
    running_kernels: int
    schedulable: bool
    images: list[str] = Field(
        description="the images it holds; for those of its default registry also their short names"
    )
    registries: list[str] = Field(
        default_factory=list, description="the registries it may pull from (none for process agents)"
    )
    backend: str = Field(default="process", description="how it runs kernels: container, process or hollow")
    rpc_addr: str | None = Field(description="where it serves RPC; null for a caller that is not an admin")
    devices: list[DeviceInfo] = Field(
        default_factory=list, description="its GPUs with their health, as its last heartbeat reported them"
    )


class AgentList(BaseModel):
    items: list[AgentOut]
    next_cursor: str | None


class AgentActionRequest(BaseModel):
    """Body of `POST /v2/agents/{id}/undrain|disable|enable` (optional): why, for the audit log
    and the agent's history."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, min_length=1, max_length=1000)


class AgentDrainRequest(AgentActionRequest):
    """Body of `POST /v2/agents/{id}/drain` (optional). `urgent` also terminates every session
    with a live kernel on the agent (cause NODE_DRAINED, retry-eligible); an agent already
    DRAINING may be drained urgently."""

    urgent: bool = False


class AgentHistoryItem(BaseModel):
    """One status change of an agent (from = to: an action that kept its status)."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    from_status: AgentStatus | None = Field(alias="from")
    to_status: AgentStatus | None = Field(alias="to")
    handler: str = Field(description="what moved it: a lifecycle handler, a heartbeat, api.<action>")
    result: str
    reason: str | None
    actor: str | None = Field(description="the operator's access key; null for the system")
    at: dt.datetime


class AgentHistoryList(BaseModel):
    items: list[AgentHistoryItem] = Field(description="newest first")
    next_cursor: str | None
