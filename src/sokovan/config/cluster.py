"""Cluster settings in etcd: validated by pydantic, watched, applied live.

Each section is one JSON value at `<prefix>/config/<section>` (an object for most; a bare
`true`/`false` for the retry kill switch `manager/retry_enabled`). A value that fails validation
is ignored with a logged error and the previous value stays in force: never half-applied.
A deleted key falls back to the defaults.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable
from typing import Any

import aetcd
import structlog
from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError, model_validator

from sokovan.common.fair_share import FairShareConfig
from sokovan.common.outages import is_outage
from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.supervise import Backoff, describe

log = structlog.get_logger(__name__)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoopSettings(_Strict):
    """Coordinator loop timings, in seconds."""

    long_cycle_interval: float = Field(2.0, gt=0, le=3600)
    short_cycle_debounce: float = Field(0.005, ge=0, le=5)


class PhaseLimit(_Strict):
    """How long a session may stay in a phase (0 = forever) and how many tries it gets."""

    timeout: float = Field(ge=0)  # 0: no timeout
    max_tries: int | None = Field(default=None, ge=1)  # None: no limit


class Phase(enum.StrEnum):
    """The stages a session's handlers work in; each has its limits in `manager/phases`."""

    SCHEDULE = "schedule"
    PREPARE = "prepare"
    PULLING = "pulling"
    START = "start"
    CREATING = "creating"
    TERMINATE = "terminate"


class PhaseSettings(_Strict):
    """Per-phase limits (one field per `Phase`). `schedule` has no timeout here: the scaling
    group's pending_timeout rules."""

    schedule: PhaseLimit = PhaseLimit(timeout=0, max_tries=None)
    prepare: PhaseLimit = PhaseLimit(timeout=300, max_tries=3)
    pulling: PhaseLimit = PhaseLimit(timeout=900, max_tries=3)
    start: PhaseLimit = PhaseLimit(timeout=300, max_tries=3)
    creating: PhaseLimit = PhaseLimit(timeout=300, max_tries=3)
    terminate: PhaseLimit = PhaseLimit(timeout=120, max_tries=None)

    def get(self, phase: Phase) -> PhaseLimit:
        limits: dict[Phase, PhaseLimit] = {
            Phase.SCHEDULE: self.schedule,
            Phase.PREPARE: self.prepare,
            Phase.PULLING: self.pulling,
            Phase.START: self.start,
            Phase.CREATING: self.creating,
            Phase.TERMINATE: self.terminate,
        }
        return limits[phase]


class MaintenanceSettings(_Strict):
    """Self-healing, in seconds: a kernel left this long in a transient status (or missing from its
    agent's heartbeat) is reconciled with its agent."""

    reconcile_after: float = Field(10.0, gt=0)


class GracePeriods(_Strict):
    """Seconds a DEGRADED (silent) agent of each class is given before it is DOWN."""

    standard: float = Field(60.0, ge=0, le=86400)
    sensitive: float = Field(300.0, ge=0, le=86400)
    borrowed: float = Field(30.0, ge=0, le=86400)

    def of(self, agent_class: str) -> float:
        """The grace of `agent_class`; an unknown class gets the standard one."""
        return {"sensitive": self.sensitive, "borrowed": self.borrowed}.get(agent_class, self.standard)


class NodeLifecycleSettings(_Strict):
    """Heartbeat timings (seed 002), in seconds. Agents beat every `heartbeat_interval`; an agent
    silent for longer than `heartbeat_timeout` is DEGRADED, and for longer than that plus its
    class's grace period DOWN; one BOOTING for longer than `boot_timeout` is FAILED."""

    heartbeat_interval: float = Field(10.0, gt=0, le=3600)
    heartbeat_timeout: float = Field(30.0, gt=0, le=86400)
    grace_period: GracePeriods = GracePeriods()
    boot_timeout: float = Field(600.0, gt=0, le=86400)

    @model_validator(mode="after")
    def _timeout_outlasts_interval(self) -> NodeLifecycleSettings:
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError("heartbeat_timeout must be longer than heartbeat_interval")
        return self


class RetentionSettings(_Strict):
    """How long terminal sessions (with their kernels and history) are kept after they ended, in
    days (fractions allowed); older ones are removed by the maintenance lane. The audit log stays."""

    retention_days: float = Field(30.0, gt=0, le=36500, allow_inf_nan=False)


class PlacementWindowSettings(_Strict):
    """The placement lane's read: at most `limit` pending sessions a cycle, owners taken in turn (so
    no owner's queue hides another's), and at most `per_owner` of them from one keypair in one
    scaling group (by default no cap below `limit`: the turns already make it fair, and a lower cap
    would only slow an owner who is alone in the queue)."""

    limit: int = Field(5000, ge=1, le=100000)
    per_owner: int = Field(5000, ge=1, le=100000)


# section → the type its JSON value must validate as; the live attribute is the last path part.
SECTIONS: dict[str, Any] = {
    "manager/loops": LoopSettings,
    "manager/phases": PhaseSettings,
    "manager/maintenance": MaintenanceSettings,
    "manager/node_lifecycle": NodeLifecycleSettings,
    # Native session retry: the cluster retry default (a bare RetryPolicy object) and the kill switch.
    "manager/retry_policy_default": RetryPolicy,
    "manager/retry_enabled": StrictBool,
    "manager/retention": RetentionSettings,
    "manager/placement_window": PlacementWindowSettings,
    # The `fair_share` scheduler: the half-life of past usage and the slots' weights.
    "manager/fair_share": FairShareConfig,
}
RETRY_POLICY_DEFAULT = "manager/retry_policy_default"
RETRY_ENABLED = "manager/retry_enabled"
NODE_LIFECYCLE = "manager/node_lifecycle"
FAIR_SHARE = "manager/fair_share"

_ADAPTERS: dict[str, TypeAdapter[Any]] = {name: TypeAdapter(tp) for name, tp in SECTIONS.items()}
# What a section is when its key is absent (models: their defaults).
_DEFAULTS: dict[str, Callable[[], Any]] = {RETRY_ENABLED: lambda: True}


def section_default(section: str) -> Any:
    factory = _DEFAULTS.get(section)
    return factory() if factory is not None else SECTIONS[section]()


class ClusterConfig:
    """The live view of the cluster settings; read its attributes at the point of use."""

    def __init__(self) -> None:
        self.loops = LoopSettings()
        self.phases = PhaseSettings()
        self.maintenance = MaintenanceSettings()
        self.node_lifecycle = NodeLifecycleSettings()
        # Native session retry. Shipped default: max_retries 0, so nothing is retried unless asked for.
        self.retry_policy_default: RetryPolicy = RetryPolicy()
        self.retry_enabled: bool = True  # the kill switch: False stops every new retry at once
        self.retention = RetentionSettings()
        self.placement_window = PlacementWindowSettings()
        self.fair_share = FairShareConfig()

    def apply(self, section: str, raw: bytes | None) -> bool:
        """Validate and apply one section; False (and nothing changed) when the value is invalid."""
        adapter = _ADAPTERS.get(section)
        if adapter is None:
            return False
        try:
            value: Any = section_default(section) if raw is None else adapter.validate_json(raw)
        except (ValidationError, ValueError) as exc:
            log.error("cluster_config.invalid", section=section, error=str(exc))
            return False
        setattr(self, section.split("/")[-1], value)
        log.info("cluster_config.applied", section=section)
        return True


def validate_section(section: str, value: Any) -> Any:
    """For writers (API, CLI): raise ValueError on an unknown section or an invalid value
    (a pydantic ValidationError is a ValueError)."""
    adapter = _ADAPTERS.get(section)
    if adapter is None:
        raise ValueError(f"unknown config section {section!r}")
    return adapter.validate_python(value)


class EtcdConfigWatcher:
    """Loads every section once, then follows changes under `<prefix>/config/`.

    When etcd goes away, `run` reconnects with backoff (0.1 s doubling to 5 s, with jitter) and,
    once etcd answers, reads every section again before watching: a change, or a deletion, made
    while the watch was down takes effect then."""

    def __init__(self, client: aetcd.Client, prefix: str, config: ClusterConfig) -> None:
        self._client = client
        self._root = f"{prefix}/config/"
        self._config = config
        self._present: set[str] = set()  # sections set in etcd at the last load or event

    def _section(self, key: bytes) -> str:
        return key.decode()[len(self._root) :]

    async def load(self) -> int:
        """Apply every section as it is now (a section gone since the last load falls back to its
        defaults); the etcd revision it was read at."""
        result = await self._client.get_prefix(self._root.encode())
        present: set[str] = set()
        for kv in result:
            section = self._section(kv.key)
            present.add(section)
            self._config.apply(section, kv.value)
        for section in self._present - present:
            self._config.apply(section, None)
        self._present = present
        return int(result.header.revision)

    async def run(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            try:
                await self._watch(stop, backoff)
            except Exception as exc:
                if is_outage(exc):
                    log.warning("cluster_config.etcd_unreachable", error=describe(exc))
                else:
                    log.exception("cluster_config.watch_failed")
                if await backoff.sleep(stop):
                    return

    async def _watch(self, stop: asyncio.Event, backoff: Backoff) -> None:
        # Catch up on anything missed while (re)connecting, then watch from just after what was
        # read, so a change made between the read and the watch is not lost.
        revision = await self.load()
        watch = await self._client.watch_prefix(self._root.encode(), start_revision=revision + 1)
        backoff.reset()
        iterator = watch.__aiter__()
        stopper = asyncio.create_task(stop.wait())
        nxt: asyncio.Future[Any] | None = None
        try:
            while not stop.is_set():
                nxt = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    break
                event = nxt.result()
                deleted = "DELETE" in str(getattr(event, "kind", "")).upper()
                section = self._section(event.kv.key)
                self._config.apply(section, None if deleted else event.kv.value)
                if deleted:
                    self._present.discard(section)
                else:
                    self._present.add(section)
        finally:
            stopper.cancel()
            if nxt is not None:
                _abandon(nxt)
            with contextlib.suppress(Exception):
                await watch.cancel()


def _abandon(read: asyncio.Future[Any]) -> None:
    """Cancel a pending read of a watch that is being closed, and take whatever it ends with.

    Left pending (the watcher's task cancelled at shutdown, as the agent's is), it would read the
    end that `watch.cancel()` queues and end with StopAsyncIteration, which nobody retrieves:
    asyncio then logs "Task exception was never retrieved" at error level on every stop."""
    read.cancel()
    read.add_done_callback(lambda f: None if f.cancelled() else f.exception())
