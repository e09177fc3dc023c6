"""`sokovan trace export`: the cluster's recent history read from PostgreSQL as a `Trace`.

The sessions are those alive at some moment since `since`: created since then, or not yet ended,
or ended since then. Each carries its owners (ids and names), what it asked for, when it was
created, when it entered RUNNING (its latest `session_scheduling_history` row to RUNNING: a
requeued session's last run), when and how it ended, its declared `max_duration`, the agents its
kernels were placed on and what it depends on. The agents are those that take or hold kernels
(READY, DEGRADED, DRAINING) and any other a session of the trace ran on; the scaling groups, domains
and projects are those they name. Five statements, in one read-only transaction.

The fair-share settings live in etcd, not here: the trace carries none (the simulator then uses
the defaults); add a `fair_share` line to replay other ones (docs/trace-format.md).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionStatus
from sokovan.sim.trace import (
    Trace,
    TraceAgent,
    TraceDomain,
    TraceGroup,
    TraceHeader,
    TraceProject,
    TraceSession,
)

_SESSIONS = text(
    """
    SELECT s.id, s.name, s.scaling_group, s.access_key, s.user_id, u.name AS user_name,
           s.project_id, p.name AS project_name, s.domain_name, s.type, s.image, s.resources,
           s.cluster_size, s.cluster_mode, s.priority, s.created_at, r.at AS started_at,
           s.terminated_at, s.status, s.result, s.max_duration,
           (SELECT coalesce(json_agg(k.agent_id ORDER BY k.cluster_idx), '[]'::json) FROM kernels k
             WHERE k.session_id = s.id AND k.agent_id IS NOT NULL) AS agents,
           (SELECT coalesce(json_agg(CAST(d.depends_on AS text) ORDER BY d.depends_on), '[]'::json)
              FROM session_dependencies d WHERE d.session_id = s.id) AS depends_on
    FROM sessions s
    LEFT JOIN users u ON u.id = s.user_id
    LEFT JOIN projects p ON p.id = s.project_id
    CROSS JOIN LATERAL (
        SELECT max(h.created_at) AS at FROM session_scheduling_history h
        WHERE h.session_id = s.id AND h.to_status = :running
    ) r
    WHERE s.created_at >= :since OR s.terminated_at IS NULL OR s.terminated_at >= :since
    ORDER BY s.created_at, s.id
    """
)
_AGENTS = text(
    "SELECT id, scaling_group, available_slots, images, max_kernels, status FROM agents ORDER BY id"
)
_GROUPS = text(
    """
    SELECT name, scheduler, queue_policy, agent_selection, resource_priority, allowed_session_types
    FROM scaling_groups WHERE name = ANY(CAST(:names AS text[])) ORDER BY name
    """
)
_DOMAINS = text(
    "SELECT name, fair_share_weight FROM domains WHERE name = ANY(CAST(:names AS text[])) ORDER BY name"
)
_PROJECTS = text(
    """
    SELECT CAST(id AS text), name, domain_name, fair_share_weight FROM projects
    WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY id
    """
)
# Agents whose capacity counts for placement, whatever the sessions did.
SERVING = frozenset({AgentStatus.READY.value, AgentStatus.DEGRADED.value, AgentStatus.DRAINING.value})


async def export_trace(conn: AsyncConnection, since: dt.datetime, now: dt.datetime | None = None) -> Trace:
    now = now or dt.datetime.now(dt.UTC)
    rows = (await conn.execute(_SESSIONS, {"since": since, "running": SessionStatus.RUNNING.value})).all()
    sessions = [_session(r) for r in rows]
    ran_on = {a for s in sessions for a in s.agents}
    agents = [
        TraceAgent(
            id=a.id,
            scaling_group=a.scaling_group,
            available=ResourceSlots.from_json(a.available_slots),
            images=sorted(str(i) for i in a.images or ()),
            max_kernels=a.max_kernels,
            status=a.status,
        )
        for a in (await conn.execute(_AGENTS)).all()
        if a.status in SERVING or a.id in ran_on
    ]
    names = sorted({a.scaling_group for a in agents} | {s.scaling_group for s in sessions})
    groups = [
        TraceGroup(
            name=g.name,
            scheduler=g.scheduler,
            queue_policy=g.queue_policy,
            agent_selection=g.agent_selection,
            resource_priority=list(g.resource_priority or ()),
            allowed_session_types=list(g.allowed_session_types or ()),
        )
        for g in (await conn.execute(_GROUPS, {"names": names})).all()
    ]
    domains = [
        TraceDomain(name=d.name, fair_share_weight=d.fair_share_weight)
        for d in (await conn.execute(_DOMAINS, {"names": sorted({s.domain for s in sessions})})).all()
    ]
    projects = [
        TraceProject(id=p[0], name=p.name, domain=p.domain_name, fair_share_weight=p.fair_share_weight)
        for p in (await conn.execute(_PROJECTS, {"ids": sorted({s.project for s in sessions})})).all()
    ]
    header = TraceHeader(exported_at=now, since=since, until=now)
    return Trace(header, None, domains, projects, groups, agents, sessions)


def _session(r: Any) -> TraceSession:
    return TraceSession(
        id=str(r.id),
        name=r.name,
        scaling_group=r.scaling_group,
        access_key=r.access_key,
        user=str(r.user_id),
        user_name=r.user_name,
        project=str(r.project_id),
        project_name=r.project_name,
        domain=r.domain_name,
        type=r.type,
        image=r.image,
        resources=ResourceSlots.from_json(r.resources),
        cluster_size=r.cluster_size,
        cluster_mode=r.cluster_mode,
        priority=r.priority,
        created_at=r.created_at,
        started_at=r.started_at,
        terminated_at=r.terminated_at,
        status=r.status,
        result=r.result,
        max_duration=r.max_duration,
        agents=[str(a) for a in r.agents],
        depends_on=[str(d) for d in r.depends_on],
    )
