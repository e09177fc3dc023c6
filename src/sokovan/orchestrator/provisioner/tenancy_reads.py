"""The owners' side of a placement snapshot: keypair policies and active-session counts, project
and domain quotas, the usage those quotas are charged against, and the states of the sessions
that pending ones depend on. Each function is one Core statement filling the cycle's `Tenancy`."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from decimal import Decimal

from sqlalchemy import TextClause, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import SessionStatus
from sokovan.db.models import Session
from sokovan.orchestrator.provisioner.snapshot import KeypairPolicy, Tenancy
from sokovan.state.occupancy import slot_holding
from sokovan.state.quota import quota_of

_ACTIVE = [s.value for s in SessionStatus.non_terminal() - {SessionStatus.PENDING}]


# The keypairs' policies with their owners' active-session counts. Only a policy with
# `max_concurrent_sessions` needs the count (`ConcurrencyValidator`): for the others the lateral
# count is skipped (a one-time filter), which spares a scan of the owner's sessions per cycle.
_KEYPAIRS = text(
    """
    SELECT kp.access_key, p.name, p.total_resource_slots, p.default_for_unspecified,
           p.max_concurrent_sessions, p.max_pending_sessions, a.n
    FROM keypairs kp
    LEFT JOIN keypair_resource_policies p ON p.name = kp.resource_policy
    LEFT JOIN LATERAL (
        SELECT count(*) AS n FROM sessions s
        WHERE p.max_concurrent_sessions IS NOT NULL
          AND s.access_key = kp.access_key AND s.status = ANY(CAST(:active AS text[]))
    ) a ON true
    WHERE kp.access_key = ANY(CAST(:keys AS text[]))
    """
)

# The projects' and the domains' quotas.
_SCOPES = text(
    """
    SELECT 'project' AS scope, CAST(id AS text) AS key, name, total_resource_slots,
           default_for_unspecified
    FROM projects WHERE id = ANY(CAST(:projects AS uuid[]))
    UNION ALL
    SELECT 'domain', name, name, total_resource_slots, default_for_unspecified
    FROM domains WHERE name = ANY(CAST(:domains AS text[]))
    """
)


async def load_keypairs(conn: AsyncConnection, tenancy: Tenancy, keys: Sequence[str]) -> None:
    """The owners' policies, with their active-session counts, in one statement."""
    rows = await conn.execute(_KEYPAIRS, {"keys": list(keys), "active": _ACTIVE})
    for access_key, name, total, default, max_concurrent, max_pending, n in rows:
        if n:
            tenancy.active_sessions[access_key] = int(n)
        if name is None:
            tenancy.keypairs[access_key] = KeypairPolicy()
            continue
        tenancy.keypairs[access_key] = KeypairPolicy(
            name=name,
            quota=quota_of(f"keypair policy {name!r}", total, default),
            max_concurrent_sessions=max_concurrent,
            max_pending_sessions=max_pending,
        )


async def load_scopes(
    conn: AsyncConnection, tenancy: Tenancy, projects: Sequence[uuid.UUID], domains: Sequence[str]
) -> None:
    """The projects' and domains' quotas in one statement."""
    rows = await conn.execute(_SCOPES, {"projects": list(projects), "domains": list(domains)})
    for scope, key, name, total, default in rows:
        quota = quota_of(f"{scope} {name!r}", total, default)
        if quota is None:
            continue
        if scope == "project":
            tenancy.project_quotas[uuid.UUID(key)] = quota
        else:
            tenancy.domain_quotas[key] = quota


async def load_dependencies(conn: AsyncConnection, tenancy: Tenancy, ids: Sequence[uuid.UUID]) -> None:
    for sid, status, result in await conn.execute(
        select(Session.id, Session.status, Session.result).where(Session.id.in_(ids))
    ):
        tenancy.dependencies[sid] = (status, result)


def slot_usage(columns: str, scope: str) -> TextClause:
    """Slots held by placed, live kernels (`:live`), summed per `columns` (of the sessions `s`) and
    slot name, over the sessions `scope` keeps. The kernels that hold the same slots are counted
    first (as in `occupancy`): each distinct document is taken apart once, not once per kernel."""
    return text(
        f"""
        SELECT {columns}, slot.key, sum(CAST(slot.value AS numeric) * s.n)
        FROM (
            SELECT {columns}, k.occupied_slots, count(*) AS n
            FROM kernels k
            JOIN sessions s ON s.id = k.session_id
            WHERE k.agent_id IS NOT NULL AND k.status = ANY(CAST(:live AS text[])) AND ({scope})
            GROUP BY {columns}, k.occupied_slots
        ) AS s
        CROSS JOIN LATERAL jsonb_each_text(s.occupied_slots) AS slot(key, value)
        GROUP BY {columns}, slot.key
        """
    )


# Slots held by placed, live kernels of the owners', projects' and domains' sessions.
_USAGE = slot_usage(
    "s.access_key, s.project_id, s.domain_name",
    "s.access_key = ANY(CAST(:keys AS text[])) OR s.project_id = ANY(CAST(:projects AS uuid[]))"
    " OR s.domain_name = ANY(CAST(:domains AS text[]))",
)


async def load_usage(
    conn: AsyncConnection,
    t: Tenancy,
    keys: Iterable[str],
    projects: Iterable[uuid.UUID],
    domains: Iterable[str],
) -> None:
    params = {
        "live": slot_holding(),
        "keys": list(keys),
        "projects": list(projects),
        "domains": list(domains),
    }
    for access_key, project_id, domain, key, total in await conn.execute(_USAGE, params):
        amount = ResourceSlots({key: Decimal(total)})
        t.keypair_usage[access_key] = t.keypair_usage[access_key] + amount
        t.project_usage[project_id] = t.project_usage[project_id] + amount
        t.domain_usage[domain] = t.domain_usage[domain] + amount
