"""The trace: a cluster's sessions and agents over a period, as JSON Lines (docs/trace-format.md).

One JSON object per line, told apart by `kind`: first the header (`trace`), then any of
`fair_share`, `domain`, `project`, `scaling_group`, `agent` and `session`, in any order. Slot amounts
are written as strings of decimals (as the API writes them); on reading, memory also takes units
("8g"). Times are ISO 8601; a time without a zone is UTC. Reading checks each line and then the
whole (unique ids, every scaling group named is defined), and says where a line is wrong.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    ValidationError,
)

from sokovan.common.fair_share import FairShareConfig
from sokovan.common.foresight import iso
from sokovan.common.slots import ResourceSlots, SlotError


def _slots(value: Any) -> ResourceSlots:
    if not isinstance(value, dict):
        raise ValueError("expected an object of slot name → amount")
    try:
        return ResourceSlots.parse(value)
    except SlotError as exc:
        raise ValueError(str(exc)) from None


def _utc(value: Any) -> Any:
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


Slots = Annotated[
    ResourceSlots,
    PlainValidator(_slots),
    PlainSerializer(lambda s: s.to_json(), return_type=dict[str, str]),
]
Time = Annotated[dt.datetime, BeforeValidator(_utc), PlainSerializer(iso, return_type=str)]
OptionalTime = Annotated[
    dt.datetime | None, BeforeValidator(_utc), PlainSerializer(iso, return_type=str | None)
]


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceHeader(_Line):
    """The first line: what the file is, and the period it covers (`since` to `until`)."""

    kind: Literal["trace"] = "trace"
    format: Literal["sokovan-trace"] = "sokovan-trace"
    version: Literal[1] = 1
    exported_at: OptionalTime = None
    since: OptionalTime = None
    until: OptionalTime = None


class TraceFairShare(_Line):
    """The `fair_share` scheduler's settings (etcd `config/manager/fair_share`); absent: defaults."""

    kind: Literal["fair_share"] = "fair_share"
    half_life_hours: float = Field(168.0, gt=0)
    weights: dict[str, float] = Field(default_factory=lambda: dict(FairShareConfig().weights))

    def config(self) -> FairShareConfig:
        return FairShareConfig(half_life_hours=self.half_life_hours, weights=self.weights)


class TraceDomain(_Line):
    kind: Literal["domain"] = "domain"
    name: str
    fair_share_weight: float = 1.0


class TraceProject(_Line):
    kind: Literal["project"] = "project"
    id: str
    name: str | None = None
    domain: str
    fair_share_weight: float = 1.0


class TraceGroup(_Line):
    """A scaling group and the policies it ran under."""

    kind: Literal["scaling_group"] = "scaling_group"
    name: str
    scheduler: str = "fifo"
    queue_policy: str = "backfill"
    agent_selection: str = "concentrated"
    resource_priority: list[str] = Field(default_factory=lambda: ["cuda.device", "cpu", "mem"])
    allowed_session_types: list[str] = Field(default_factory=lambda: ["batch", "interactive", "inference"])


class TraceAgent(_Line):
    """An agent: the slots it offers (`available`) and the images it holds (a session is placed
    only where its image is offered, as on the cluster). The simulator treats every agent as READY
    for the whole trace; `status` is what it was when exported."""

    kind: Literal["agent"] = "agent"
    id: str
    scaling_group: str
    available: Slots
    images: list[str]
    max_kernels: int | None = Field(None, ge=0)
    status: str = "READY"


class TraceSession(_Line):
    """A session as it was created, and what happened to it: when it started RUNNING (`started_at`,
    null if it never did), when it ended (`terminated_at`), how (`status`, `result`) and on which
    agents its kernels ran (`agents`, one per kernel). `resources` are per kernel. `run_seconds`,
    for made-up traces: how long it runs once started (else `terminated_at` - `started_at`)."""

    kind: Literal["session"] = "session"
    id: str
    name: str | None = None
    scaling_group: str
    access_key: str
    user: str
    user_name: str | None = None
    project: str
    project_name: str | None = None
    domain: str = "default"
    type: str = "batch"
    image: str
    resources: Slots
    cluster_size: int = Field(1, ge=1)
    cluster_mode: Literal["single-node", "multi-node"] = "single-node"
    priority: int = 10
    created_at: Time
    started_at: OptionalTime = None
    terminated_at: OptionalTime = None
    status: str | None = None
    result: str | None = None
    max_duration: int | None = Field(None, ge=1)
    run_seconds: float | None = Field(None, ge=0)
    agents: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)

    @property
    def requested(self) -> ResourceSlots:
        """Its whole request: per kernel x kernels."""
        return self.resources.scaled(self.cluster_size)

    @property
    def owner(self) -> str:
        """How reports name its user."""
        return self.user_name or self.user


Line = Annotated[
    TraceHeader | TraceFairShare | TraceDomain | TraceProject | TraceGroup | TraceAgent | TraceSession,
    Field(discriminator="kind"),
]
_LINE: TypeAdapter[Line] = TypeAdapter(Line)


class TraceError(ValueError):
    """A trace that cannot be read: the message names the file and line."""


@dataclass
class Trace:
    header: TraceHeader = field(default_factory=TraceHeader)
    fair_share: TraceFairShare | None = None
    domains: list[TraceDomain] = field(default_factory=list)
    projects: list[TraceProject] = field(default_factory=list)
    groups: list[TraceGroup] = field(default_factory=list)
    agents: list[TraceAgent] = field(default_factory=list)
    sessions: list[TraceSession] = field(default_factory=list)

    def lines(self) -> Iterator[_Line]:
        yield self.header
        if self.fair_share is not None:
            yield self.fair_share
        yield from self.domains
        yield from self.projects
        yield from self.groups
        yield from self.agents
        yield from self.sessions

    def dumps(self) -> str:
        return "".join(
            json.dumps(line.model_dump(mode="json"), separators=(",", ":")) + "\n" for line in self.lines()
        )

    def check(self) -> None:
        """TraceError when the lines do not make one trace (see the module's docstring)."""
        for what, ids in (
            ("scaling group", [g.name for g in self.groups]),
            ("agent", [a.id for a in self.agents]),
            ("session", [s.id for s in self.sessions]),
        ):
            seen: set[str] = set()
            for one in ids:
                if one in seen:
                    raise TraceError(f"{what} {one!r} appears twice")
                seen.add(one)
        groups = {g.name for g in self.groups}
        for named, by in [(a.scaling_group, f"agent {a.id!r}") for a in self.agents] + [
            (s.scaling_group, f"session {s.id!r}") for s in self.sessions
        ]:
            if named not in groups:
                raise TraceError(f"{by} names scaling group {named!r}, which no scaling_group line defines")


def parse_lines(lines: Iterable[str], source: str = "<trace>") -> Trace:
    trace = Trace()
    header_seen = False
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            line = _LINE.validate_python(json.loads(text))
        except json.JSONDecodeError as exc:
            raise TraceError(f"{source}:{n}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            raise TraceError(f"{source}:{n}: {_first_error(exc)}") from None
        if not header_seen:
            if not isinstance(line, TraceHeader):
                raise TraceError(
                    f'{source}:{n}: the first line must be the header ({{"kind": "trace", ...}})'
                )
            trace.header, header_seen = line, True
            continue
        if isinstance(line, TraceHeader):
            raise TraceError(f"{source}:{n}: a second header")
        if isinstance(line, TraceFairShare):
            trace.fair_share = line
        elif isinstance(line, TraceDomain):
            trace.domains.append(line)
        elif isinstance(line, TraceProject):
            trace.projects.append(line)
        elif isinstance(line, TraceGroup):
            trace.groups.append(line)
        elif isinstance(line, TraceAgent):
            trace.agents.append(line)
        else:
            trace.sessions.append(line)
    if not header_seen:
        raise TraceError(f"{source}: empty: no header line")
    try:
        trace.check()
    except TraceError as exc:
        raise TraceError(f"{source}: {exc}") from None
    return trace


def read_trace(path: Path) -> Trace:
    """The trace in `path`; TraceError (also for a file that cannot be read) when it is not one."""
    try:
        with path.open(encoding="utf-8") as f:
            return parse_lines(f, str(path))
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not UTF-8 text") from None


def write_trace(trace: Trace, path: Path) -> None:
    path.write_text(trace.dumps(), encoding="utf-8")


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
