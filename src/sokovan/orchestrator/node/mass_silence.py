"""Correlated silence: when more than half of a scaling group's agents fell silent within one
`heartbeat_timeout` of each other, the manager (its network, its Redis) is the likelier culprit
than the fleet, so no agent of that group is declared DOWN until reports resume (Kubernetes'
unhealthy-zone rule does the same). A single silent agent is never a mass silence: one node of a
one-node group that dies still goes DOWN.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sokovan.orchestrator.node.handler import A, AgentRow, silence
from sokovan.orchestrator.node.watch import Watch

# Agents expected to beat: their silence counts (BOOTING, DOWN, FAILED and UNKNOWN ones do not).
MONITORED = frozenset({A.READY, A.DEGRADED, A.DRAINING, A.DRAINED})


@dataclass(frozen=True)
class GroupSilence:
    scaling_group: str
    agents: int  # monitored agents of the group
    silent: int  # of them, silent for longer than the timeout, within one timeout of each other

    @property
    def held(self) -> bool:
        return self.silent >= 2 and 2 * self.silent > self.agents


def group_silence(
    agents: Sequence[AgentRow],
    now: dt.datetime,
    timeout: float,
    quiet: Callable[[AgentRow, dt.datetime], float] = silence,
) -> dict[str, GroupSilence]:
    """Each group's silence, each agent's measured by `quiet`."""
    groups: dict[str, list[AgentRow]] = defaultdict(list)
    for agent in agents:
        if agent.status in MONITORED:
            groups[agent.scaling_group].append(agent)
    out = {}
    for name, members in groups.items():
        silent = [q for a in members if (q := quiet(a, now)) > timeout]
        together = 0
        if silent:
            newest = min(silent)  # the one that fell silent last
            together = sum(1 for q in silent if q - newest <= timeout)
        out[name] = GroupSilence(name, len(members), together)
    return out


class Holds:
    """The groups in a mass silence now, and when each group's last hold ended: shared by the
    handlers that act on silence (ConfirmDown keeps it, CompleteDrain reads it).

    The end of a hold counts as the last word of every agent of the group: their silence is
    measured from then at most, so the agents whose reports come back last (the hold ends as soon
    as half of the group is back) are not judged in the moment before their first beat arrives.

    `watch` says whether the agents' reports reach this manager at all (`watch`): while they do
    not, no silence is judged, and none is counted from before they resumed."""

    def __init__(self, watch: Watch | None = None) -> None:
        self.held: set[str] = set()
        self.released: dict[str, dt.datetime] = {}
        self.watch = watch

    def blind(self, now: dt.datetime) -> bool:
        return self.watch is not None and self.watch.blind(now)

    def observed(self, row: AgentRow, now: dt.datetime) -> float:
        """`row`'s silence, never from before this manager's reads of the reports resumed."""
        quiet = silence(row, now)
        return quiet if self.watch is None else self.watch.clamp(quiet, now)

    def silence(self, row: AgentRow, now: dt.datetime) -> float:
        """`row`'s silence as the lane judges it: also never from before its group's last hold
        ended."""
        quiet = self.observed(row, now)
        released = self.released.get(row.scaling_group)
        return quiet if released is None else min(quiet, (now - released).total_seconds())
