"""Victim selection for preemption (CONTRACT section 9): a pure stage over the snapshot.

For a PENDING session that no agent has room for, which RUNNING sessions to evict so that it fits:

- candidates are preemptible, of strictly lower priority, in the same scaling group (the
  snapshot's `candidates`), and not already chosen for another preemptor in this plan;
- an agent is a target only if it could take the session at all (READY, schedulable, offers the
  image); room held for nominees of higher or equal priority is not free, kernel limits count;
- on one agent victims are taken lowest priority first, newest first among equal priorities,
  until the session fits; then every victim whose removal is unnecessary is dropped, checking
  from the highest priority / oldest back (never more victims than needed);
- among agents the one whose highest victim priority is lowest wins, then the one needing the
  fewest victims, then the snapshot's agent order;
- single-node: all kernels on one agent; multi-node: one kernel on each of `cluster_size`
  distinct agents (agents that fit without victims first), victims taken on each; a victim with
  kernels on several chosen agents frees room on all of them and is counted once;
- never to no avail: None unless the session fits once the victims are released.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from sokovan.common.image_refs import offers
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, ClusterMode
from sokovan.orchestrator.provisioner.snapshot import AgentSnapshot, Candidate, Preemption
from sokovan.state.session_reads import SessionWithKernels

_ZERO = Decimal(0)


@dataclass(frozen=True)
class _OnAgent:
    """What evicting `victim` releases on one agent."""

    victim: Candidate
    slots: ResourceSlots
    kernels: int


def victim_order(c: Candidate) -> tuple[int, float, str]:
    """The order victims are taken in: lowest priority first, newest first, then by id."""
    return c.priority, -c.created_at.timestamp(), str(c.id)


def select_victims(
    preemptor: SessionWithKernels,
    agents: Sequence[AgentSnapshot],
    candidates: Iterable[Candidate],
    taken: frozenset[uuid.UUID] | set[uuid.UUID] = frozenset(),
) -> Preemption | None:
    """The victims whose release makes `preemptor` fit, and its agents; None when none would."""
    eligible = [
        c for c in candidates if c.preemptible and c.priority < preemptor.priority and c.id not in taken
    ]
    if not eligible:
        return None
    eligible.sort(key=victim_order)
    on_agent: dict[str, list[_OnAgent]] = {}
    for c in eligible:  # in taking order, per agent
        per: dict[str, tuple[ResourceSlots, int]] = {}
        for k in c.kernels:
            slots, n = per.get(k.agent_id, (ResourceSlots(), 0))
            per[k.agent_id] = (slots + k.slots, n + 1)
        for agent_id, (slots, n) in per.items():
            on_agent.setdefault(agent_id, []).append(_OnAgent(c, slots, n))
    n_kernels = len(preemptor.kernels) or preemptor.cluster_size
    spread = preemptor.cluster_mode == ClusterMode.MULTI_NODE and n_kernels > 1
    fit = _Fit(
        preemptor,
        preemptor.resources if spread else preemptor.resources.scaled(n_kernels),
        1 if spread else n_kernels,
    )
    options: list[tuple[tuple[int, int, int], AgentSnapshot, list[_OnAgent]]] = []
    for index, agent in enumerate(agents):
        if not fit.target(agent):
            continue
        chosen = _victims_on(agent, on_agent.get(agent.id, []), fit)
        if chosen is None or (not chosen and not spread):
            continue
        top = max((v.victim.priority for v in chosen), default=-1)
        options.append(((top, len(chosen), index), agent, chosen))
    options.sort(key=lambda o: o[0])
    if not spread:
        if not options:
            return None
        _, agent, chosen = options[0]
        return _preemption(preemptor, [agent] * n_kernels, [v.victim for v in chosen], on_agent)
    if len(options) < n_kernels:
        return None
    picked = [agent for _, agent, _ in options[:n_kernels]]
    union = {v.victim.id: v.victim for _, _, chosen in options[:n_kernels] for v in chosen}
    if not union:
        return None  # it fits without anyone's eviction: not preemption's business
    victims = _minimal(picked, sorted(union.values(), key=victim_order), on_agent, fit)
    return _preemption(preemptor, picked, victims, on_agent)


@dataclass(frozen=True)
class _Fit:
    """Whether an agent takes the preemptor's share (`slots`, `kernels`) once some room is released."""

    session: SessionWithKernels
    slots: ResourceSlots
    kernels: int

    def target(self, agent: AgentSnapshot) -> bool:
        return (
            agent.status == AgentStatus.READY
            and agent.schedulable
            and offers(agent.images, self.session.image)
        )

    def fits(self, agent: AgentSnapshot, released: ResourceSlots, released_kernels: int) -> bool:
        free, count = agent.room_for(self.session.priority, self.session.id)
        if agent.max_kernels is not None and count - released_kernels + self.kernels > agent.max_kernels:
            return False
        return all(
            amount <= 0 or amount <= free.get(name, _ZERO) + released.get(name, _ZERO)
            for name, amount in self.slots.items()
        )


def _released(items: Iterable[_OnAgent]) -> tuple[ResourceSlots, int]:
    slots, n = ResourceSlots(), 0
    for item in items:
        slots, n = slots + item.slots, n + item.kernels
    return slots, n


def _victims_on(agent: AgentSnapshot, offered: Sequence[_OnAgent], fit: _Fit) -> list[_OnAgent] | None:
    """The fewest victims on `agent`, in taking order, that make room ([] if it fits already);
    None when even all of them would not."""
    if fit.fits(agent, ResourceSlots(), 0):
        return []
    chosen: list[_OnAgent] = []
    for item in offered:
        chosen.append(item)
        if fit.fits(agent, *_released(chosen)):
            break
    else:
        return None
    for item in reversed(list(chosen)):  # highest priority / oldest first: drop the unneeded
        rest = [c for c in chosen if c is not item]
        if fit.fits(agent, *_released(rest)):
            chosen = rest
    return chosen


def _minimal(
    agents: Sequence[AgentSnapshot],
    victims: list[Candidate],
    on_agent: dict[str, list[_OnAgent]],
    fit: _Fit,
) -> list[Candidate]:
    """Drop every victim the spread placement does not need, from the highest priority / oldest back."""

    def all_fit(keep: list[Candidate]) -> bool:
        ids = {v.id for v in keep}
        return all(
            fit.fits(a, *_released(i for i in on_agent.get(a.id, []) if i.victim.id in ids)) for a in agents
        )

    for victim in reversed(list(victims)):
        rest = [v for v in victims if v is not victim]
        if all_fit(rest):
            victims = rest
    return victims


def _preemption(
    preemptor: SessionWithKernels,
    agents: Sequence[AgentSnapshot],
    victims: Sequence[Candidate],
    on_agent: dict[str, list[_OnAgent]],
) -> Preemption | None:
    if not victims:
        return None
    chosen = {a.id for a in agents}
    ids = {v.id for v in victims}
    where: dict[uuid.UUID, list[str]] = {}
    for agent_id in sorted(chosen):
        for item in on_agent.get(agent_id, []):
            if item.victim.id in ids:
                where.setdefault(item.victim.id, []).append(agent_id)
    return Preemption(
        session_id=preemptor.id,
        priority=preemptor.priority,
        victims=tuple(v.id for v in victims),
        agents=tuple(a.id for a in agents),
        victim_agents={v: tuple(a) for v, a in where.items()},
    )
