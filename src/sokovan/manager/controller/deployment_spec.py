"""The validated requests of `/v2/deployments`: create (`POST`) and scale (`PATCH`).

Field-level checks live here (pydantic turns them into 422 field errors); what depends on the
type (which of image, command and model it needs) is the definition generators' business, and
what needs the database (scaling group, image, capacity, a live name taken) the controller's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, field_validator

from sokovan.bus.routing import HealthCheck
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import DeploymentType
from sokovan.manager.controller.session_spec import (
    parse_command,
    parse_environ,
    parse_resources,
    with_default_resources,
)

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"
MAX_REPLICAS = 1000


class DeploymentCreateRequest(BaseModel):
    """Body of `POST /v2/deployments`. `resources` are per replica, as for sessions' kernels."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=NAME_PATTERN,
        description="1-40 lower-case letters, digits or '-', starting with a letter or digit; "
        "unique among live (not DESTROYED) deployments; the proxy serves it at /<name>/",
    )
    type: DeploymentType = Field(description="custom, vllm, tgi or sglang")
    replicas: StrictInt = Field(default=1, ge=0, le=MAX_REPLICAS, description="target number of replicas")
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="required for custom; a model type defaults to the image named like the type",
    )
    command: str | None = Field(
        default=None,
        max_length=65536,
        description="custom only (required): the server's command line, listening on $PORT; "
        "at most 64 KiB (UTF-8)",
    )
    model: str | None = Field(
        default=None, min_length=1, max_length=512, description="required for vllm, tgi and sglang"
    )
    resources: dict[str, StrictInt | StrictFloat | StrictStr] | None = Field(
        default=None,
        description="Per-replica slots; slots left out take the defaults cpu=1, mem=256m.",
        json_schema_extra={"example": {"cpu": 1, "mem": "512m"}},
    )
    environ: dict[str, str] = Field(
        default_factory=dict,
        description="at most 128 names matching [A-Za-z_][A-Za-z0-9_]*, at most 64 KiB in all",
    )
    scaling_group: str = Field(default="default", min_length=1, max_length=64)
    health_check: HealthCheck = Field(default_factory=HealthCheck)

    _parse_resources = field_validator("resources")(parse_resources)
    _parse_environ = field_validator("environ")(parse_environ)
    _parse_command = field_validator("command")(parse_command)

    def per_replica_slots(self) -> ResourceSlots:
        """The per-replica request: the session defaults overlaid with what the caller gave."""
        return with_default_resources(self.resources)


class DeploymentScaleRequest(BaseModel):
    """Body of `PATCH /v2/deployments/{id}`."""

    model_config = ConfigDict(extra="forbid")

    replicas: StrictInt = Field(ge=0, le=MAX_REPLICAS, description="the new target number of replicas")
