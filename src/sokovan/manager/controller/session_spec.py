"""The validated request to create a session: what `POST /v2/sessions` accepts.

Field-level checks live here (pydantic turns them into 422 field errors); checks that need the
database (scaling group, image, capacity, dependencies) live in the SchedulingController.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from sokovan.common.preemption import default_preemptible
from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.slots import ResourceSlots, positive_request
from sokovan.common.types import ClusterMode, SessionType
from sokovan.manager.controller.request_bounds import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    check_command,
    check_environ,
)

DEFAULT_RESOURCES: dict[str, object] = {"cpu": 1, "mem": "256m"}
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
MAX_DURATION = 366 * 86400  # a declared run time longer than a year is a mistake, not a plan


def parse_resources(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """The validator of a `resources` field (sessions' per kernel, deployments' per replica):
    every slot given must be a positive amount within the bounds of `ResourceSlots`."""
    if value is None:
        return None
    # SlotError is a ValueError: a field error
    return positive_request(ResourceSlots.parse(value)).to_json()


def parse_environ(value: dict[str, str]) -> dict[str, str]:
    """The validator of an `environ` field (sessions and deployments)."""
    check_environ(value)
    return value


def parse_command(value: str | None) -> str | None:
    """The validator of a `command` field (sessions and deployments)."""
    check_command(value)
    return value


def with_default_resources(resources: dict[str, Any] | None) -> ResourceSlots:
    """What one kernel asks for: the defaults overlaid with the `resources` the caller gave."""
    return positive_request(ResourceSlots.parse({**DEFAULT_RESOURCES, **(resources or {})}))


class SessionCreateRequest(BaseModel):
    """Body of `POST /v2/sessions`. `resources` are per kernel; `mem` takes bytes or "512m"/"4g"."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    image: str = Field(min_length=1, max_length=256)
    type: SessionType = SessionType.BATCH
    command: str | None = Field(
        default=None, max_length=65536, validate_default=True, description="at most 64 KiB (UTF-8)"
    )
    resources: dict[str, StrictInt | StrictFloat | StrictStr] | None = Field(
        default=None,
        description="Per-kernel slots; slots left out take the defaults cpu=1, mem=256m.",
        json_schema_extra={"example": {"cpu": 1, "mem": "512m"}},
    )
    cluster_size: int = Field(default=1, ge=1, le=1024)
    cluster_mode: ClusterMode = ClusterMode.SINGLE_NODE
    scaling_group: str = Field(default="default", min_length=1, max_length=64)
    environ: dict[str, str] = Field(
        default_factory=dict,
        description="at most 128 names matching [A-Za-z_][A-Za-z0-9_]*, at most 64 KiB in all",
    )
    depends_on: list[uuid.UUID] = Field(default_factory=list, max_length=256)
    priority: int = Field(
        default=DEFAULT_PRIORITY,
        ge=0,
        le=MAX_PRIORITY,
        description=f"higher first; above {DEFAULT_PRIORITY} for admins only (403 for a user)",
    )
    preemptible: StrictBool | None = Field(
        default=None,
        description="may a higher-priority session's scheduling evict it; left out: true for batch, "
        "false for interactive and inference",
    )
    max_duration: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DURATION,
        description="the longest it may run, in seconds: past it, it ends with cause LIFETIME_EXCEEDED "
        "(the `reserve` queue policy and start-time estimates count on it)",
    )
    retry_policy: RetryPolicy | None = None
    creation_id: str | None = Field(default=None, min_length=1, max_length=128)

    _parse_resources = field_validator("resources")(parse_resources)
    _parse_environ = field_validator("environ")(parse_environ)

    @field_validator("command")
    @classmethod
    def _batch_needs_command(cls, value: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("type") == SessionType.BATCH and not (value and value.strip()):
            raise ValueError("a batch session needs a command")
        return parse_command(value)

    def effective_preemptible(self) -> bool:
        """`preemptible` as given, else the default of the session's type."""
        return default_preemptible(self.type) if self.preemptible is None else self.preemptible

    def per_kernel_slots(self) -> ResourceSlots:
        """The per-kernel request: the defaults overlaid with what the caller gave."""
        return with_default_resources(self.resources)
