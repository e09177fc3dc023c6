"""Which operator action (seed 002: drain, undrain, disable, enable) is legal from which agent
status, and what it does there. Pure: `plan` turns (action, current state) into a `Step` or a
refusal, and the `NodeController` writes the step.

| action          | moves from          | to       | also                                               |
|-----------------|---------------------|----------|----------------------------------------------------|
| drain           | READY, DEGRADED     | DRAINING | urgent: its sessions end (NODE_DRAINED)            |
| drain, urgent   | DRAINING            | (stays)  | an escalation: its sessions end                    |
| undrain         | DRAINING, DRAINED   | READY    |                                                    |
| disable         | any but DOWN        | DOWN     | disabled; the DOWN write ends its kernels          |
| disable         | DOWN, not disabled  | (stays)  | disabled (no heartbeat brings it back)             |
| enable          | DOWN, FAILED        | BOOTING  | disabled and the boot failure count cleared        |

Anything else is refused with the current state named (409).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sokovan.common.types import AgentStatus
from sokovan.manager.controller.errors import ControllerError


class NodeAction(enum.StrEnum):
    DRAIN = "drain"
    UNDRAIN = "undrain"
    DISABLE = "disable"
    ENABLE = "enable"


@dataclass(frozen=True)
class Rule:
    """An action's move: from `sources` to `target`, writing `values` with it."""

    sources: frozenset[AgentStatus]
    target: AgentStatus
    values: Mapping[str, Any] = field(default_factory=dict)


RULES: dict[NodeAction, Rule] = {
    NodeAction.DRAIN: Rule(frozenset({AgentStatus.READY, AgentStatus.DEGRADED}), AgentStatus.DRAINING),
    NodeAction.UNDRAIN: Rule(frozenset({AgentStatus.DRAINING, AgentStatus.DRAINED}), AgentStatus.READY),
    NodeAction.DISABLE: Rule(
        frozenset(AgentStatus) - {AgentStatus.DOWN}, AgentStatus.DOWN, {"disabled": True}
    ),
    NodeAction.ENABLE: Rule(
        frozenset({AgentStatus.DOWN, AgentStatus.FAILED}),
        AgentStatus.BOOTING,
        {"disabled": False, "boot_failures": 0},
    ),
}


@dataclass(frozen=True)
class Step:
    """What an action does to an agent in a given state: move it to `target` (None: it stays where
    it is), write `values`, and end the sessions that have a live kernel on it (an urgent drain)."""

    target: AgentStatus | None
    values: Mapping[str, Any] = field(default_factory=dict)
    end_sessions: bool = False


class AgentStateConflict(ControllerError, status=409, slug="agent-state-conflict", title="Conflict"):
    """The action is not legal from the agent's current status; `agent_status` names it."""

    def __init__(self, detail: str, agent_status: AgentStatus) -> None:
        super().__init__(detail)
        self.agent_status = agent_status


def _names(statuses: frozenset[AgentStatus]) -> str:
    """In the enum's order: "READY or DEGRADED", "DOWN, DRAINING or FAILED"."""
    names = [s.value for s in AgentStatus if s in statuses]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def plan(agent_id: str, action: NodeAction, status: AgentStatus, *, disabled: bool, urgent: bool) -> Step:
    """The step `action` takes on agent `agent_id` now in `status`; AgentStateConflict if none."""
    rule = RULES[action]
    end_sessions = action == NodeAction.DRAIN and urgent
    if status in rule.sources:
        return Step(rule.target, rule.values, end_sessions)
    if end_sessions and status == AgentStatus.DRAINING:
        return Step(None, {}, end_sessions=True)
    if action == NodeAction.DISABLE and status == AgentStatus.DOWN:
        if not disabled:
            return Step(None, {"disabled": True})
        raise AgentStateConflict(f"agent {agent_id} is DOWN and already disabled", status)
    sources = rule.sources | ({AgentStatus.DRAINING} if end_sessions else set())
    what = "urgent drain" if end_sessions else action.value
    raise AgentStateConflict(f"agent {agent_id} is {status.value}; {what} needs {_names(sources)}", status)


__all__ = ["RULES", "AgentStateConflict", "NodeAction", "Rule", "Step", "plan"]
