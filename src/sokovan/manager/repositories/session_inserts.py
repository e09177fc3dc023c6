"""Writing new sessions, many at once: the statements behind the create path's group commit.

`insert_sessions` writes a whole batch of admitted creates in ONE statement: the batch travels as
one JSON document, and data-modifying CTEs insert the sessions, their kernels, their dependencies,
the first history row of each session (`api.create`: NULL → PENDING) and the audit rows. A
session whose `(access_key, creation_id)` exists already is skipped (ON CONFLICT DO NOTHING), and
so are its kernels and rows: the caller looks the existing one up (`existing_sessions`). Being
one statement, it is atomic without a transaction of its own.

Owners with a pending limit are counted under their keypair row's lock (`lock_and_count_pending`),
in the transaction that then inserts, so that concurrent batches (of any manager) count one after
the other.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common import json_text
from sokovan.common.types import KernelStatus, SchedulingResult, SessionStatus

CREATE_HANDLER = "api.create"
CREATE_MESSAGE = "created"
AUDIT_ACTION = "session.create"
MAIN_ROLE, SUB_ROLE = "main", "sub"  # a session's first kernel, and the others


@dataclass(frozen=True)
class NewSession:
    """One admitted create, as it is written: the session's columns (JSON-ready values), its
    kernels' ids (one per cluster member, main first), its dependencies and its audit detail."""

    id: uuid.UUID
    access_key: str
    creation_id: str | None
    columns: dict[str, Any]
    kernel_ids: tuple[uuid.UUID, ...]
    depends_on: tuple[uuid.UUID, ...] = ()
    audit: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str] | None:
        """The idempotency key, when the request carries one."""
        return (self.access_key, self.creation_id) if self.creation_id is not None else None

    def as_json(self) -> dict[str, Any]:
        return {
            **self.columns,
            "id": str(self.id),
            "access_key": self.access_key,
            "creation_id": self.creation_id,
            "kernel_ids": [str(k) for k in self.kernel_ids],
            "depends_on": [str(d) for d in self.depends_on],
            "audit": self.audit,
        }


@dataclass(frozen=True)
class Inserted:
    created_at: dt.datetime
    status_changed_at: dt.datetime


# The columns of `NewSession.columns`, typed as the recordset reads them.
_RECORD = """
    id uuid, name text, creation_id text, access_key text, user_id uuid, project_id uuid,
    domain_name text, scaling_group text, type text, image text, command text, environ jsonb,
    resources jsonb, cluster_size int, cluster_mode text, priority int, preemptible boolean,
    max_duration int, max_retries int, retry_policy jsonb, deployment_id uuid, kernel_ids uuid[],
    depends_on uuid[], audit jsonb
"""
_INSERT = text(
    f"""
    WITH r AS MATERIALIZED (
        SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r({_RECORD})
    ),
    s AS (
        INSERT INTO sessions (id, name, creation_id, access_key, user_id, project_id, domain_name,
                              scaling_group, type, image, command, environ, resources, cluster_size,
                              cluster_mode, priority, preemptible, max_duration, status, max_retries,
                              retry_policy, deployment_id)
        SELECT id, name, creation_id, access_key, user_id, project_id, domain_name, scaling_group,
               type, image, command, environ, resources, cluster_size, cluster_mode, priority,
               preemptible, max_duration, :pending, max_retries, retry_policy, deployment_id
        FROM r
        ORDER BY access_key, creation_id  -- one order for every batch: no deadlock on the key
        ON CONFLICT (access_key, creation_id) WHERE creation_id IS NOT NULL DO NOTHING
        RETURNING id, created_at, status_changed_at
    ),
    k AS (
        INSERT INTO kernels (id, session_id, cluster_role, cluster_idx, status, occupied_slots)
        SELECT u.kernel_id, r.id, CASE WHEN u.n = 1 THEN :main ELSE :sub END, u.n - 1,
               :kernel_pending, r.resources
        FROM s JOIN r ON r.id = s.id
        CROSS JOIN LATERAL unnest(r.kernel_ids) WITH ORDINALITY AS u(kernel_id, n)
    ),
    d AS (
        INSERT INTO session_dependencies (session_id, depends_on)
        SELECT r.id, dep FROM s JOIN r ON r.id = s.id CROSS JOIN LATERAL unnest(r.depends_on) AS dep
    ),
    h AS (
        INSERT INTO session_scheduling_history (session_id, handler, result, from_status, to_status,
                                                message, attempt)
        SELECT s.id, :handler, :success, NULL, :pending, :message, 0 FROM s
    ),
    a AS (
        INSERT INTO audit_log (actor, action, target, detail)
        SELECT r.access_key, :action, CAST(r.id AS text), r.audit FROM s JOIN r ON r.id = s.id
    )
    SELECT id, created_at, status_changed_at FROM s
    """
)
_PARAMS = {
    "pending": SessionStatus.PENDING.value,
    "kernel_pending": KernelStatus.PENDING.value,
    "main": MAIN_ROLE,
    "sub": SUB_ROLE,
    "handler": CREATE_HANDLER,
    "success": SchedulingResult.SUCCESS.value,
    "message": CREATE_MESSAGE,
    "action": AUDIT_ACTION,
}


async def insert_sessions(conn: AsyncConnection, batch: Sequence[NewSession]) -> dict[uuid.UUID, Inserted]:
    """Write `batch` (distinct idempotency keys) in one statement; the sessions inserted, by id.
    A session missing from the answer was skipped: its key exists already."""
    if not batch:
        return {}
    rows = json_text.dumps([s.as_json() for s in batch])
    result = await conn.execute(_INSERT, {**_PARAMS, "rows": rows})
    return {r.id: Inserted(r.created_at, r.status_changed_at) for r in result}


_EXISTING = text(
    """
    SELECT s.access_key, s.creation_id, s.id
    FROM sessions s
    JOIN unnest(CAST(:keys AS text[]), CAST(:ids AS text[])) AS k(access_key, creation_id)
      ON s.access_key = k.access_key AND s.creation_id = k.creation_id
    """
)


async def existing_sessions(
    conn: AsyncConnection, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], uuid.UUID]:
    """The sessions that hold these idempotency keys (access key, creation id), by key."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    result = await conn.execute(_EXISTING, {"keys": [k for k, _ in wanted], "ids": [c for _, c in wanted]})
    return {(r.access_key, r.creation_id): r.id for r in result}


_LOCK_OWNERS = text(
    "SELECT access_key FROM keypairs WHERE access_key = ANY(CAST(:keys AS text[])) "
    "ORDER BY access_key FOR NO KEY UPDATE"
)
_COUNT_PENDING = text(
    "SELECT access_key, count(*) AS n FROM sessions "
    "WHERE access_key = ANY(CAST(:keys AS text[])) AND status = :pending GROUP BY access_key"
)


async def lock_and_count_pending(conn: AsyncConnection, access_keys: Iterable[str]) -> dict[str, int]:
    """Hold these owners' keypair rows until the transaction ends (in one order, so two batches
    never deadlock on them), then count their PENDING sessions. The count is a statement of its
    own so that it sees what a batch that held the locks before us committed."""
    keys = sorted(set(access_keys))
    if not keys:
        return {}
    await conn.execute(_LOCK_OWNERS, {"keys": keys})
    rows = await conn.execute(_COUNT_PENDING, {"keys": keys, "pending": SessionStatus.PENDING.value})
    counts = dict.fromkeys(keys, 0)
    counts.update({r.access_key: int(r.n) for r in rows})
    return counts
