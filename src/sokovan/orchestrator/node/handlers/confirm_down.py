"""DEGRADED → DOWN: an agent silent for longer than `heartbeat_timeout` plus its class's grace
period. Its kernels end with AGENT_TRANSIENT in the same write (so native retry places their
sessions elsewhere). Held while its scaling group is in a mass silence (`mass_silence`); the hold
raises an `agents.mass_silence` event and the `sokovan_agents_mass_silence*` metrics, and its end
another event. The end of a hold counts as the last word of every agent of the group (`Holds`):
the agents whose reports come back last (a fleet resumes over about one heartbeat interval, and
the hold ends as soon as half of it has) are not declared DOWN in the moment before their first
beat arrives; one that stays silent is DOWN after a fresh timeout and grace (Kubernetes likewise
marks every node as just seen when a zone leaves full disruption)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import structlog
from sqlalchemy import ColumnElement, or_, select

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import MASS_SILENCE, MASS_SILENCE_HOLDS
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Agent
from sokovan.orchestrator.node.backlog import Backlog
from sokovan.orchestrator.node.handler import A, AgentRow, NodeHandler, NodeResult, Verdict, silent_since
from sokovan.orchestrator.node.mass_silence import MONITORED, GroupSilence, Holds, group_silence

log = structlog.get_logger(__name__)


class ConfirmDown(NodeHandler):
    targets = frozenset({A.DEGRADED})
    reads = MONITORED  # the whole group: to tell a mass silence
    moves_to = A.DOWN
    always_runs = True  # a hold ends when reports resume, with no DEGRADED agent left

    def __init__(
        self, config: ClusterConfig, backlog: Backlog, events: UserEventPublisher | None, holds: Holds
    ) -> None:
        self._config = config
        self._backlog = backlog
        self._events = events
        self._holds = holds

    def narrow(self, now: dt.datetime) -> ColumnElement[bool]:
        """The whole of each group that has an agent silent past the timeout by its row (only there
        can an agent be DOWN or a mass silence begin), and of each group held now (to tell its end)."""
        cutoff = now - dt.timedelta(seconds=self._config.node_lifecycle.heartbeat_timeout)
        silent_groups = select(Agent.scaling_group).where(
            Agent.status.in_(sorted(s.value for s in MONITORED)), silent_since(cutoff)
        )
        return or_(Agent.scaling_group.in_(silent_groups), Agent.scaling_group.in_(sorted(self._holds.held)))

    async def execute(self, rows: Sequence[AgentRow]) -> NodeResult:
        result = NodeResult()
        now = dt.datetime.now(dt.UTC)
        if self._holds.blind(now) or await self._backlog.lagging():
            return result
        settings = self._config.node_lifecycle
        groups = group_silence(rows, now, settings.heartbeat_timeout, self._holds.observed)
        await self._track_holds(groups, now)
        for row in rows:
            if row.status != A.DEGRADED:
                continue
            quiet = self._holds.silence(row, now)
            grace = settings.grace_period.of(row.agent_class)
            if quiet <= settings.heartbeat_timeout + grace:
                continue
            if row.scaling_group in self._holds.held:
                group = groups[row.scaling_group]
                result.held[row.id] = f"mass silence: {group.silent}/{group.agents} agents"
                continue
            result.moves[row.id] = Verdict(f"no heartbeat for {quiet:.1f}s (grace {grace:g}s ran out)")
        if result.held:
            log.warning("agents.down_held", agents=len(result.held), groups=sorted(self._holds.held))
        return result

    async def _track_holds(self, groups: dict[str, GroupSilence], now: dt.datetime) -> None:
        held = {name for name, group in groups.items() if group.held}
        was = self._holds.held
        events = []
        for name in sorted(held - was):
            group = groups[name]
            MASS_SILENCE_HOLDS.labels(scaling_group=name).inc()
            log.error("agents.mass_silence", scaling_group=name, silent=group.silent, agents=group.agents)
            events.append(_event(name, True, group))
        for name in sorted(was - held):
            log.warning("agents.mass_silence_over", scaling_group=name)
            self._holds.released[name] = now
            events.append(_event(name, False, groups.get(name)))
        for name in held | was:
            MASS_SILENCE.labels(scaling_group=name).set(1 if name in held else 0)
        self._holds.held = held
        await publish(self._events, events)


def _event(scaling_group: str, held: bool, group: GroupSilence | None) -> UserEvent:
    detail: dict[str, object] = {"scaling_group": scaling_group, "held": held}
    if group is not None:
        detail.update(silent=group.silent, agents=group.agents)
    return UserEvent(name="agents.mass_silence", detail=detail)
