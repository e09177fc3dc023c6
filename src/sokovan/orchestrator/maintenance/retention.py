"""Retention: terminal sessions that ended more than `retention_days` ago (etcd
`manager/retention`, read live; fractions allowed) are removed with their kernels, their history and
their dependency rows, in bounded batches, each its own short transaction. The audit log is kept.

A session is kept, however old, while something still needs it:
- a retry child that is not itself removable (the chain stays readable from the live end; a
  removable child whose parent goes first simply loses the pointer);
- a session that has not ended and depends on it;
- a route that is not terminal and names it (a deployment's replica);
- a retry the engine scheduled for it and has not created yet.
Terminal routes of removed sessions go with them (with their history).

DESTROYED deployments whose `destroyed_at` is older than the cutoff (their definition's environ
may hold secrets) go too, with their routes, the routes' history, their revisions and their
history (the foreign keys cascade), once no session names them any more (those go first, above).

Runs from the maintenance lane, at most every `every` seconds (and again at once while a run
found more than its cap), counts what it removed in `sokovan_retention_removed_total{kind}` and
logs one line per run.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.metrics import RETENTION_REMOVED
from sokovan.common.types import EndpointLifecycle, RouteStatus, SessionStatus

log = structlog.get_logger(__name__)

BATCH = 500  # sessions per transaction
MAX_BATCHES = 20  # per run: 10,000 sessions, then the next run goes on

_TERMINAL = sorted(s.value for s in SessionStatus.terminal())
_LIVE_ROUTES = sorted(
    s.value for s in RouteStatus if s not in {RouteStatus.TERMINATED, RouteStatus.FAILED_TO_START}
)

# The oldest removable sessions, locked (rows another transaction holds are skipped, never waited for).
_PICK = text(
    """
    SELECT s.id FROM sessions s
    WHERE s.status = ANY(CAST(:terminal AS text[])) AND s.terminated_at < :cutoff
      AND NOT EXISTS (
        SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id
          AND NOT (c.status = ANY(CAST(:terminal AS text[])) AND c.terminated_at < :cutoff))
      AND NOT EXISTS (
        SELECT 1 FROM session_dependencies d JOIN sessions w ON w.id = d.session_id
        WHERE d.depends_on = s.id AND NOT (w.status = ANY(CAST(:terminal AS text[]))))
      AND NOT EXISTS (
        SELECT 1 FROM routes r WHERE r.session_id = s.id AND r.status = ANY(CAST(:live_routes AS text[])))
      AND NOT COALESCE(s.status_info -> 'retry' ->> 'decision' = 'scheduled'
                       AND NOT (s.status_info -> 'retry' ? 'child'), false)
    ORDER BY s.terminated_at
    LIMIT :batch
    FOR UPDATE OF s SKIP LOCKED
    """
)
# kind → the statement removing that kind's rows of the picked sessions (:ids), in FK order.
_REMOVE: tuple[tuple[str, str], ...] = (
    (
        "parent_link",
        "UPDATE sessions SET parent_session_id = NULL"
        " WHERE parent_session_id = ANY(CAST(:ids AS uuid[])) AND NOT (id = ANY(CAST(:ids AS uuid[])))",
    ),
    ("kernel_history", "DELETE FROM kernel_scheduling_history WHERE session_id = ANY(CAST(:ids AS uuid[]))"),
    (
        "session_history",
        "DELETE FROM session_scheduling_history WHERE session_id = ANY(CAST(:ids AS uuid[]))",
    ),
    ("kernel", "DELETE FROM kernels WHERE session_id = ANY(CAST(:ids AS uuid[]))"),
    (
        "dependency",
        "DELETE FROM session_dependencies"
        " WHERE session_id = ANY(CAST(:ids AS uuid[])) OR depends_on = ANY(CAST(:ids AS uuid[]))",
    ),
    ("route", "DELETE FROM routes WHERE session_id = ANY(CAST(:ids AS uuid[]))"),
    ("session", "DELETE FROM sessions WHERE id = ANY(CAST(:ids AS uuid[]))"),
)
# The oldest removable destroyed deployments; their routes, revisions and history cascade.
_REMOVE_DEPLOYMENTS = text(
    """
    DELETE FROM deployments WHERE id IN (
      SELECT d.id FROM deployments d
      WHERE d.status = :destroyed AND d.destroyed_at < :cutoff
        AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.deployment_id = d.id)
      ORDER BY d.destroyed_at
      LIMIT :batch
      FOR UPDATE OF d SKIP LOCKED)
    """
)
# What the counter and the log call removed rows (a cleared retry link is not a removal).
REMOVED_KINDS = (*(kind for kind, _ in _REMOVE if kind != "parent_link"), "deployment")


class Retention:
    def __init__(
        self,
        engine: AsyncEngine,
        retention_days: Callable[[], float],
        every: float = 20.0,
        batch: int = BATCH,
        max_batches: int = MAX_BATCHES,
    ) -> None:
        self._engine = engine
        self._days = retention_days
        self._every = every
        self._batch = batch
        self._max_batches = max_batches
        self._next_run = 0.0

    async def maybe_run(self) -> Counter[str] | None:
        """Run when the last run is `every` seconds old (or left more behind); None when not due."""
        if time.monotonic() < self._next_run:
            return None
        removed, more = await self.run()
        self._next_run = 0.0 if more else time.monotonic() + self._every
        return removed

    async def run(self, now: dt.datetime | None = None) -> tuple[Counter[str], bool]:
        """One run: up to `max_batches` batches. Returns what was removed per kind, and whether
        removable sessions were left for the next run."""
        days = self._days()
        cutoff = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=days)
        removed: Counter[str] = Counter()
        batches = 0
        more = False
        while True:
            async with self._engine.begin() as conn:
                got = await self._remove_batch(conn, cutoff)
            removed.update(got)
            batches += 1
            if got["session"] < self._batch and got["deployment"] < self._batch:
                break
            if batches >= self._max_batches:
                more = True
                break
        for kind in REMOVED_KINDS:
            if removed[kind]:
                RETENTION_REMOVED.labels(kind=kind).inc(removed[kind])
        log.info(
            "retention.run",
            retention_days=days,
            cutoff=cutoff.isoformat(),
            batches=batches,
            more=more,
            **{f"removed_{kind}": removed[kind] for kind in REMOVED_KINDS},
        )
        return removed, more

    async def _remove_batch(self, conn: AsyncConnection, cutoff: dt.datetime) -> Counter[str]:
        picked = await conn.execute(
            _PICK,
            {"terminal": _TERMINAL, "live_routes": _LIVE_ROUTES, "cutoff": cutoff, "batch": self._batch},
        )
        ids = [str(r.id) for r in picked]
        out: Counter[str] = Counter()
        if ids:
            for kind, statement in _REMOVE:
                result = await conn.execute(text(statement), {"ids": ids})
                out[kind] = int(result.rowcount or 0)
        gone = await conn.execute(
            _REMOVE_DEPLOYMENTS,
            {"destroyed": EndpointLifecycle.DESTROYED.value, "cutoff": cutoff, "batch": self._batch},
        )
        out["deployment"] = int(gone.rowcount or 0)
        return out
