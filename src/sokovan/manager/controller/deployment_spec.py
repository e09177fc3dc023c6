"""The validated requests of `/v2/deployments`: create (`POST`) and update (`PATCH`: scale,
autoscaling, a new definition with its rollout strategy).

Field-level checks live here (pydantic turns them into 422 field errors); what depends on the
type (which of image, command and model it needs) is the definition generators' business, and
what needs the database (scaling group, image, capacity, a live name taken) the controller's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

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
MAX_SECONDS = 86400.0
PERCENT_PATTERN = r"^(100|[1-9]?[0-9])%$"


class Autoscaling(BaseModel):
    """The autoscaler's rules: it owns `replicas` while they are set (seconds for the times)."""

    model_config = ConfigDict(extra="forbid")

    metric: Literal["inflight", "rps"] = Field(
        description="inflight: requests in flight; rps: requests per second (what the proxies measure)"
    )
    target: float = Field(gt=0, le=1e9, description="the metric's target per replica")
    min_replicas: StrictInt = Field(ge=0, le=MAX_REPLICAS)
    max_replicas: StrictInt = Field(ge=1, le=MAX_REPLICAS)
    scale_up_cooldown: float = Field(default=30.0, ge=0, le=MAX_SECONDS)
    scale_down_cooldown: float = Field(default=120.0, ge=0, le=MAX_SECONDS)
    scale_to_zero_after: float | None = Field(
        default=None, ge=0, le=MAX_SECONDS, description="idle seconds before 0 replicas; null: never"
    )
    activation_timeout: float = Field(
        default=60.0, gt=0, le=3600, description="how long the proxy holds a request while 0 replicas start"
    )

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self

    def clamp(self, replicas: int) -> int:
        return min(self.max_replicas, max(self.min_replicas, replicas))


Amount = Annotated[
    StrictInt | Annotated[str, Field(pattern=PERCENT_PATTERN)],
    Field(description='a number of replicas, or a percentage of the target ("25%")'),
]


def _amount(value: int | str) -> str:
    return str(value)


class RollingStrategy(BaseModel):
    """Replace replicas a few at a time: a new one HEALTHY before an old one goes."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["rolling"]
    max_surge: Amount = Field(default=1, description="replicas above the target while updating")
    max_unavailable: Amount = Field(default=0, description="HEALTHY replicas below the target allowed")

    @field_validator("max_surge", "max_unavailable")
    @classmethod
    def _not_negative(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 0 <= value <= MAX_REPLICAS:
            raise ValueError(f"must be 0-{MAX_REPLICAS} or a percentage")
        return value

    @model_validator(mode="after")
    def _progress(self) -> RollingStrategy:
        if _is_zero(self.max_surge) and _is_zero(self.max_unavailable):
            raise ValueError("max_surge and max_unavailable cannot both be 0: the update could never proceed")
        return self

    def stored(self) -> dict[str, str]:
        return {
            "type": "rolling",
            "max_surge": _amount(self.max_surge),
            "max_unavailable": _amount(self.max_unavailable),
        }


def _is_zero(value: int | str) -> bool:
    return value == 0 or value == "0%"


class BlueGreenStrategy(BaseModel):
    """A whole new set of replicas, HEALTHY, then one routing-table switch."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["blue_green"]

    def stored(self) -> dict[str, str]:
        return {"type": "blue_green"}


Strategy = Annotated[RollingStrategy | BlueGreenStrategy, Field(discriminator="type")]


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
    open_to_public: StrictBool = Field(
        default=False, description="true: no access token, anyone may call it through the proxy"
    )
    autoscaling: Autoscaling | None = Field(
        default=None, description="the autoscaler's rules (it then owns replicas, clamped to its bounds)"
    )
    drain_timeout: float = Field(
        default=30.0, ge=0, le=3600, description="seconds a replica taken out of service may finish requests"
    )

    _parse_resources = field_validator("resources")(parse_resources)
    _parse_environ = field_validator("environ")(parse_environ)
    _parse_command = field_validator("command")(parse_command)

    def per_replica_slots(self) -> ResourceSlots:
        """The per-replica request: the session defaults overlaid with what the caller gave."""
        return with_default_resources(self.resources)


DEFINITION_FIELDS = ("image", "model", "command", "environ", "resources", "health_check")


class DeploymentUpdateRequest(BaseModel):
    """Body of `PATCH /v2/deployments/{id}`: any of these, at least one. A definition field makes
    a new revision (rolled out by `strategy`); `replicas` alone scales."""

    model_config = ConfigDict(extra="forbid")

    replicas: StrictInt | None = Field(
        default=None, ge=0, le=MAX_REPLICAS, description="the new target (409 while autoscaling is set)"
    )
    image: str | None = Field(default=None, min_length=1, max_length=256)
    model: str | None = Field(default=None, min_length=1, max_length=512, description="model types only")
    command: str | None = Field(default=None, max_length=65536, description="custom only")
    environ: dict[str, str] | None = Field(default=None, description="replaces the environment")
    resources: dict[str, StrictInt | StrictFloat | StrictStr] | None = Field(
        default=None, description="per replica; replaces the resources (left-out slots take the defaults)"
    )
    health_check: HealthCheck | None = Field(
        default=None, description="the fields given replace the current ones"
    )
    strategy: Strategy | None = Field(
        default=None, description='how a new definition rolls out (default {"type": "rolling"})'
    )
    rollback_after: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="seconds a new revision may go without a HEALTHY replica (600)",
    )
    autoscaling: Autoscaling | None = Field(default=None, description="null removes it")
    drain_timeout: float | None = Field(default=None, ge=0, le=3600)

    _parse_resources = field_validator("resources")(parse_resources)
    _parse_command = field_validator("command")(parse_command)

    @field_validator("environ")
    @classmethod
    def _parse_environ(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return None if value is None else parse_environ(value)

    @model_validator(mode="after")
    def _something(self) -> DeploymentUpdateRequest:
        if not self.model_fields_set:
            raise ValueError("give at least one field to change")
        for name in ("replicas", "drain_timeout", *DEFINITION_FIELDS, "strategy", "rollback_after"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} may not be null")
        if not self.changes_definition() and ({"strategy", "rollback_after"} & self.model_fields_set):
            raise ValueError("strategy and rollback_after go with a new definition (image, command, ...)")
        return self

    def changes_definition(self) -> bool:
        return any(name in self.model_fields_set for name in DEFINITION_FIELDS)

    def stored_strategy(self) -> dict[str, Any] | None:
        return self.strategy.stored() if self.strategy is not None else None
