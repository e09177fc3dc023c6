"""A node lifecycle handler: its target statuses and where a verdict takes an agent.

The handlers and their moves (seed 002; the heartbeats' own moves are in `state.agent_beats`):

| Handler | From | To | When |
|---|---|---|---|
| DetectSilence | READY | DEGRADED | silent for longer than `heartbeat_timeout` |
| ConfirmDown | DEGRADED | DOWN | silent past the timeout plus its class's grace (held in a mass silence) |
| ExpireBoot | BOOTING | FAILED | BOOTING for longer than `boot_timeout` |
| CompleteDrain | DRAINING | DRAINED | no live kernel left (or silent past its grace: kernels ended) |
| CountAgents | (none) | (stay) | publishes the agents-by-status gauge (one count per status) |
| PublishDevices | (none) | (stay) | publishes the GPU gauges (per device, per kernel holding GPUs) |

A handler reports verdicts (agent id → why, and whether its kernels end); the node kind turns
them into guarded transitions to the handler's `moves_to`. A handler that can only act on some of
its statuses' agents says which in SQL (`narrow`), so a quiet fleet of thousands costs each cycle a
statement that finds nothing, not thousands of rows read and judged one by one.
"""

from __future__ import annotations

import abc
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, func
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import AgentStatus
from sokovan.db.models import Agent

A = AgentStatus


@dataclass(frozen=True)
class AgentRow:
    id: str
    status: str
    scaling_group: str
    agent_class: str
    last_heartbeat_at: dt.datetime | None
    status_changed_at: dt.datetime


@dataclass(frozen=True)
class Verdict:
    reason: str
    end_kernels: bool = False


@dataclass
class NodeResult:
    """Agents to move (id → verdict); `held` are agents that would have moved but were held back
    (id → why), kept in the logs only."""

    moves: dict[str, Verdict] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)


class NodeHandler(abc.ABC):
    """`name` is the class name; `reads` are the statuses whose agents it is given (its targets
    unless it says otherwise; only agents in `targets` move); `always_runs` runs it with no agent
    in them too."""

    name: ClassVar[str]
    targets: ClassVar[frozenset[AgentStatus]]
    reads: ClassVar[frozenset[AgentStatus] | None] = None
    moves_to: ClassVar[AgentStatus | None]
    always_runs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    def narrow(self, now: dt.datetime) -> ColumnElement[bool] | None:
        """A condition every agent it is given meets besides its status (None: no other): one
        that any agent it could act on meets, so leaving the others out changes nothing."""
        return None

    @abc.abstractmethod
    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult: ...


def silent_since(cutoff: dt.datetime) -> ColumnElement[bool]:
    """In SQL: the agent's last word (`silence`'s) is older than `cutoff`."""
    return func.coalesce(Agent.last_heartbeat_at, Agent.status_changed_at) < cutoff


def silence(row: AgentRow, now: dt.datetime) -> float:
    """Seconds since the agent's last heartbeat (since it became known when it never beat)."""
    last = row.last_heartbeat_at or row.status_changed_at
    return (now - last).total_seconds()


class FleetGauge(NodeHandler):
    """A handler that publishes gauges from its own reads: it is given no rows and moves nothing."""

    targets: ClassVar[frozenset[AgentStatus]] = frozenset()
    moves_to = None
    always_runs = True

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine  # its handlers read through `autocommit`: no transaction
