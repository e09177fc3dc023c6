"""Agents as the manager learns them from heartbeats.

A batch of heartbeats is written in one transaction: the agents' rows are locked in id order,
each beat is checked against the agent's boot and sequence and the time it was signed (a beat
whose sequence does not grow within its boot, or that the agent signed before the last beat
accepted from it, whatever its boot, is a replay: refused and counted, on the agent and in
`sokovan_heartbeats_replayed_total`; so an old registration's beat cannot bring the agent
back), and the status moves the beat makes (`agent_beats`) are
written with their history. Silence is judged elsewhere (the orchestrator's node lifecycle lane).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import bindparam, insert, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent
from sokovan.common import json_text
from sokovan.common.events import AGENT_BACKENDS, AgentHeartbeat
from sokovan.common.image_refs import stored_images
from sokovan.common.metrics import AGENT_TRANSITIONS, HEARTBEATS_REPLAYED
from sokovan.common.types import AgentClass, AgentStatus
from sokovan.db.models import Agent, AgentHistory
from sokovan.state.agent_beats import on_heartbeat
from sokovan.state.agent_writes import agent_event, history_row

log = structlog.get_logger(__name__)
HEARTBEAT = "heartbeat"  # the handler name agent history gives a move a heartbeat made


@dataclass
class BeatsRecorded:
    """What a batch of heartbeats did: agents refreshed, agents that became READY (new room),
    status events, and beats refused as replays."""

    refreshed: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    events: list[UserEvent] = field(default_factory=list)
    replayed: int = 0


def _by_agent(beats: Sequence[AgentHeartbeat]) -> dict[str, list[AgentHeartbeat]]:
    """Each agent's beats in stream order, agents in id order (managers writing overlapping
    batches then lock agents in one order)."""
    out: dict[str, list[AgentHeartbeat]] = {}
    for hb in beats:
        out.setdefault(hb.agent_id, []).append(hb)
    return dict(sorted(out.items()))


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def _accepted(
    beats: Sequence[AgentHeartbeat], boot: str | None, seq: int, signed_at: dt.datetime | None = None
) -> tuple[AgentHeartbeat | None, int]:
    """The beat that counts (the last one that is not a replay) and how many were replays: a beat
    signed before the last one accepted (stored or earlier in the batch), and within one boot a
    beat whose sequence is not above every one seen before it."""
    last: AgentHeartbeat | None = None
    replays = 0
    for hb in beats:
        at = _aware(hb.at)
        if (signed_at is not None and at < signed_at) or (hb.boot_id == boot and hb.seq <= seq):
            replays += 1
            continue
        last, boot, seq, signed_at = hb, hb.boot_id, hb.seq, at
    return last, replays


_CLASSES = frozenset(c.value for c in AgentClass)


def _agent_class(value: str) -> str:
    return value if value in _CLASSES else AgentClass.STANDARD.value


_BACKENDS = frozenset(AGENT_BACKENDS)


def _backend(value: str) -> str:
    return value if value in _BACKENDS else "process"


@functools.lru_cache(maxsize=4096)
def _stored(images: tuple[str, ...], registries: tuple[str, ...]) -> tuple[str, ...]:
    """An agent's stored image list (`image_refs.stored_images`), built once per distinct pair of
    lists: an agent beats the same lists again and again, and a hollow fleet shares one."""
    return tuple(stored_images(images, registries))


def _beat_columns(hb: AgentHeartbeat, now: dt.datetime) -> dict[str, Any]:
    return {
        "scaling_group": hb.scaling_group,
        "available_slots": hb.available_slots,
        "rpc_addr": hb.rpc_addr,
        "images": list(_stored(tuple(hb.images), tuple(hb.registries))),
        "backend": _backend(hb.backend),
        "boot_id": hb.boot_id,
        "heartbeat_seq": hb.seq,
        "heartbeat_signed_at": _aware(hb.at),
        "last_heartbeat_at": now,
        "max_kernels": hb.max_kernels,
        "running_kernels": hb.running_kernels,
        "agent_class": _agent_class(hb.agent_class),
        "health": hb.health.model_dump(mode="json"),
        "devices": [d.model_dump(mode="json") for d in hb.devices],
    }


async def record_heartbeats(engine: AsyncEngine, beats: Sequence[AgentHeartbeat]) -> BeatsRecorded:
    """Register or refresh agents, apply the status moves their beats make, refuse replays.

    Beats naming a scaling group that does not exist are left out (logged)."""
    out = BeatsRecorded()
    grouped = _by_agent(beats)
    if not grouped:
        return out
    now = dt.datetime.now(dt.UTC)
    async with engine.begin() as conn:
        groups = sorted({b[-1].scaling_group for b in grouped.values()})
        known = set((await conn.execute(_KNOWN_GROUPS, {"names": groups})).scalars())
        for agent_id, agent_beats in grouped.items():
            if agent_beats[-1].scaling_group not in known:
                group = agent_beats[-1].scaling_group
                log.warning("agent.unknown_scaling_group", agent_id=agent_id, scaling_group=group)
        grouped = {k: b for k, b in grouped.items() if b[-1].scaling_group in known}
        rows = {r.id: r for r in await conn.execute(_LOCK_AGENTS, {"ids": sorted(grouped)})}
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []
        replays: dict[str, int] = {}
        for agent_id, agent_beats in grouped.items():
            row = rows.get(agent_id)
            hb, replayed = _accepted(
                agent_beats,
                row.boot_id if row is not None else None,
                row.heartbeat_seq if row is not None else 0,
                row.heartbeat_signed_at if row is not None else None,
            )
            if replayed:
                replays[agent_id] = replayed
            if hb is None:
                continue
            outcome = on_heartbeat(
                AgentStatus(row.status) if row is not None else None,
                disabled=bool(row.disabled) if row is not None else False,
                new_boot=row is not None and row.boot_id != hb.boot_id,
                healthy=hb.health.ok,
                problems="; ".join(hb.health.problems) or "unhealthy",
                boot_failures=row.boot_failures if row is not None else 0,
            )
            columns = _beat_columns(hb, now)
            columns["status"] = outcome.status.value
            columns["boot_failures"] = outcome.boot_failures
            if outcome.moves:
                last = outcome.moves[-1]
                columns["status_info"] = {"reason": last.reason, "handler": HEARTBEAT}
            for move in outcome.moves:
                src = move.src.value if move.src is not None else None
                history.append(history_row(agent_id, HEARTBEAT, src, move.dst.value, move.reason, None, now))
                out.events.append(agent_event(agent_id, src, move.dst.value, move.reason, None))
            if outcome.status == AgentStatus.READY and any(m.dst == AgentStatus.READY for m in outcome.moves):
                out.ready.append(agent_id)
            out.refreshed.append(agent_id)
            if row is None:
                inserts.append({"id": agent_id, "status_changed_at": now, **columns})
            else:
                changed = now if outcome.moves else None
                updates.append({"id": agent_id, "changed": changed, "moved": bool(outcome.moves), **columns})
        if inserts:
            # Another manager may register the same new agent at the same moment: its row wins, and
            # this beat's history is dropped with it (the agent's next beat is judged normally).
            inserted = set(
                (
                    await conn.execute(
                        pg_insert(Agent)
                        .values(inserts)
                        .on_conflict_do_nothing(index_elements=[Agent.id])
                        .returning(Agent.id)
                    )
                ).scalars()
            )
            lost = {i["id"] for i in inserts} - inserted
            if lost:
                history = [h for h in history if h["agent_id"] not in lost]
                out.events = [e for e in out.events if e.agent_id not in lost]
                out.ready = [a for a in out.ready if a not in lost]
        if updates:
            await _update_rows(conn, updates)
        if history:
            await conn.execute(insert(AgentHistory), history)
        refused = {a: n for a, n in replays.items() if a in rows or a in out.refreshed}
        if refused:
            await conn.execute(
                update(Agent)
                .where(Agent.id == bindparam("b_id"))
                .values(rejected_beats=Agent.rejected_beats + bindparam("b_n"))
                .execution_options(synchronize_session=False),
                [{"b_id": a, "b_n": n} for a, n in refused.items()],
            )
    for event in out.events:
        AGENT_TRANSITIONS.labels(from_status=event.from_status or "NONE", to_status=event.to_status).inc()
    out.replayed = sum(replays.values())
    if out.replayed:
        HEARTBEATS_REPLAYED.inc(out.replayed)
        log.warning("agent.heartbeats_replayed", beats=out.replayed, agents=sorted(replays))
    return out


# Heartbeats' reads and writes, as kept text statements: a fleet of 1,000 agents beats about 500
# times a second, and building these through the ORM (an executemany of an ORM update) had cost a
# tenth of a core.
_KNOWN_GROUPS = text("SELECT name FROM scaling_groups WHERE name = ANY(CAST(:names AS text[]))")
_LOCK_AGENTS = text(
    """
    SELECT id, status, boot_id, heartbeat_seq, heartbeat_signed_at, disabled, boot_failures
    FROM agents WHERE id = ANY(CAST(:ids AS text[])) ORDER BY id FOR UPDATE
    """
)
_REFRESH = text(
    """
    UPDATE agents AS a SET
        status = v.status, scaling_group = v.scaling_group, available_slots = v.available_slots,
        rpc_addr = v.rpc_addr, images = v.images, boot_id = v.boot_id, heartbeat_seq = v.heartbeat_seq,
        heartbeat_signed_at = v.heartbeat_signed_at, last_heartbeat_at = v.last_heartbeat_at,
        max_kernels = v.max_kernels, running_kernels = v.running_kernels, agent_class = v.agent_class,
        health = v.health, boot_failures = v.boot_failures, backend = v.backend, devices = v.devices,
        status_info = CASE WHEN v.moved THEN v.status_info ELSE a.status_info END,
        status_changed_at = CASE WHEN v.moved THEN v.changed ELSE a.status_changed_at END
    FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS v(
        id text, status text, scaling_group text, available_slots jsonb, rpc_addr text, images jsonb,
        boot_id text, heartbeat_seq bigint, heartbeat_signed_at timestamptz,
        last_heartbeat_at timestamptz, max_kernels int, running_kernels jsonb, agent_class text,
        health jsonb, boot_failures int, backend text, devices jsonb, status_info jsonb, moved bool,
        changed timestamptz)
    WHERE a.id = v.id AND a.id IN (SELECT unnest(CAST(:ids AS text[])))
    """
)


async def _update_rows(conn: Any, updates: list[dict[str, Any]]) -> None:
    """One statement for every refreshed agent: a beat that moved one also writes its status time
    and reason. The rows go as one JSON document (`json_text`: a tenth of `json.dumps`'s time with a
    `default` for the datetimes, some 6 µs a beat, every beat of the fleet)."""
    params = {"rows": json_text.dumps(updates), "ids": [u["id"] for u in updates]}
    await conn.execute(_REFRESH, params)
