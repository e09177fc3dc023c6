"""The durable retry engine of native session retry: a lane that decides, waits and creates child sessions.

Each cycle, under its own cluster-wide lock:
1. **decide** — every batch session that ended in failure (or was preempted, under the group's
   `terminate` mode) and has no decision yet gets one,
   written on the session itself (`status_info.retry`) with a guarded update: `scheduled` (with
   `due_at`), `exhausted` or `ineligible`. The effective policy is the session's merged over the
   project, domain and cluster defaults; the cluster kill switch makes every decision ineligible;
2. **dispatch** — every scheduled retry whose time has come gets its child: a fresh PENDING session
   with the parent's spec, `parent_session_id`, `retry_count + 1`, the same policy and
   `creation_id = parent.creation_id + ":retry:" + n`; that id is unique per owner, so however many
   managers try, one child exists. The wait is a timestamp, not a sleep: a restart loses nothing;
3. **count** — a retried session that ended TERMINATED/SUCCESS is counted once.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from typing import Any

import structlog
from sqlalchemy import Row, Select, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import RETRY_EXHAUSTED, RETRY_SCHEDULED, RETRY_SUCCEEDED
from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db import retry_rows
from sokovan.db.models import AuditLog, Domain, Kernel, Project, Session, SessionDependency
from sokovan.orchestrator.locks import CycleLock, run_exclusive
from sokovan.orchestrator.retry.policy import classify_failure, effective_policy, is_eligible, retry_delay

log = structlog.get_logger(__name__)
BATCH = 500

# One guarded, set-based write for a cycle's decisions: each is taken once, whoever runs the lane;
# RETURNING tells which rows this run decided (the counters and events are for those only).
_DECIDE = text(
    "UPDATE sessions AS s"
    " SET status_info = s.status_info || jsonb_build_object('retry', v.retry),"
    " max_retries = v.max_retries, retry_policy = v.policy"
    " FROM (SELECT unnest(CAST(:ids AS uuid[])) AS id, unnest(CAST(:retries AS jsonb[])) AS retry,"
    " unnest(CAST(:max_retries AS int[])) AS max_retries, unnest(CAST(:policies AS jsonb[])) AS policy) AS v"
    " WHERE s.id = v.id AND NOT (s.status_info ? 'retry')"
    " RETURNING s.id"
)
_MARK_CHILD = text(
    "UPDATE sessions"
    " SET status_info = jsonb_set(status_info, '{retry,child}', to_jsonb(CAST(:child AS text)))"
    f" WHERE id = :id AND {retry_rows.SCHEDULED}"
)
# A retried session that ended well is counted once.
_COUNT_SUCCESSES = text(
    "UPDATE sessions"
    ' SET status_info = status_info || \'{"retry": {"decision": "succeeded"}}\''
    f" WHERE {retry_rows.UNCOUNTED_SUCCESS} RETURNING id"
)
# The sessions a decision is taken for: those that failed (ERROR, CANCELLED) and the preempted
# (TERMINATED with no result and cause PREEMPTED). A user's terminate (TERMINATED, no result,
# USER_CANCELLED) is never read: it is not retried. Each of the lane's reads is the condition of
# a partial index (`db.retry_rows`), so a cycle reads what waits for it, never the whole table.
_UNDECIDED = text(retry_rows.UNDECIDED)


class RetryCoordinator:
    name = Hint.RETRY

    def __init__(
        self,
        engine: AsyncEngine,
        config: ClusterConfig,
        lock: CycleLock | None = None,
        events: UserEventPublisher | None = None,
    ) -> None:
        self._engine = engine
        self._config = config
        self._lock = lock
        self._events = events

    async def cycle(self) -> bool:
        return await run_exclusive(self._lock, self.name, self._cycle)

    async def _cycle(self) -> bool:
        decided = await self.decide()
        created = await self.dispatch()
        await self.count_successes()
        return bool(decided or created)

    # -- 1. decide ----------------------------------------------------------------------------

    async def decide(self) -> int:
        now = dt.datetime.now(dt.UTC)
        events: list[UserEvent] = []
        async with self._engine.begin() as conn:
            rows = (await conn.execute(undecided_query())).all()
            decided = [(row.id, *self._decision(row, now)) for row in rows]
            if not decided:
                return 0
            written = set(
                (
                    await conn.execute(
                        _DECIDE,
                        {
                            "ids": [sid for sid, *_ in decided],
                            "retries": [_json(d) for _, d, _, _ in decided],
                            "max_retries": [p.max_retries for _, _, p, _ in decided],
                            "policies": [p.model_dump_json() for _, _, p, _ in decided],
                        },
                    )
                ).scalars()
            )
        for sid, decision, policy, event in decided:
            if sid not in written:
                continue  # another manager decided it first
            if decision["decision"] == "scheduled":
                RETRY_SCHEDULED.labels(cause=decision["cause"]).inc()
            elif decision["decision"] == "exhausted":
                RETRY_EXHAUSTED.labels(cause=decision["cause"]).inc()
            if event is not None and policy.emit_retry_events:
                events.append(event)
        await publish(self._events, events)
        return len(written)

    def _decision(self, row: Any, now: dt.datetime) -> tuple[dict[str, Any], RetryPolicy, UserEvent | None]:
        try:
            policy = effective_policy(
                row.retry_policy, row.project_default, row.domain_default, self._config.retry_policy_default
            )
        except ValueError as exc:
            return {"decision": "ineligible", "reason": f"invalid retry policy: {exc}"}, RetryPolicy(), None
        cause = classify_failure(row.status, row.result, row.status_info, row.type)
        owner = str(row.user_id)
        if cause is None or not is_eligible(cause, policy, row.type):
            why = "not a batch session" if row.type != "batch" else f"cause {cause} is not retried"
            return {"decision": "ineligible", "reason": why}, policy, None
        if not self._config.retry_enabled:
            return {"decision": "ineligible", "reason": "retries are disabled cluster-wide"}, policy, None
        if row.retry_count >= policy.max_retries:
            event = UserEvent(
                name="session.retry_exhausted",
                session_id=str(row.id),
                owner=owner,
                detail={"cause": cause.value, "attempts": row.retry_count + 1},
            )
            return {"decision": "exhausted", "cause": cause.value}, policy, event
        delay = retry_delay(policy, row.id, row.retry_count)
        due = now + dt.timedelta(seconds=delay)
        attempt = row.retry_count + 2
        event = UserEvent(
            name="session.retry_scheduled",
            session_id=str(row.id),
            owner=owner,
            detail={
                "cause": cause.value,
                "attempt": attempt,
                "of": 1 + policy.max_retries,
                "due_at": due.isoformat(),
                "delay": delay,
            },
        )
        decision = {
            "decision": "scheduled",
            "cause": cause.value,
            "due_at": due.isoformat(),
            "attempt": attempt,
            "delay": delay,
        }
        return decision, policy, event

    # -- 2. dispatch --------------------------------------------------------------------------

    async def dispatch(self) -> int:
        now = dt.datetime.now(dt.UTC)
        created = 0
        async with self._engine.begin() as conn:
            for parent in await _due(conn, now):
                child = await self._create_child(conn, parent)
                if child is not None:
                    created += 1
                await conn.execute(_MARK_CHILD, {"id": parent.id, "child": str(child or "")})
        return created

    async def _create_child(self, conn: AsyncConnection, parent: Row[Any]) -> uuid.UUID | None:
        n = parent.retry_count + 1
        child_id = uuid.uuid4()
        base = parent.creation_id or str(parent.id)
        cause = (parent.status_info.get("retry") or {}).get("cause")
        inserted = await conn.execute(
            insert(Session)
            .values(
                id=child_id,
                name=parent.name,
                creation_id=f"{base}:retry:{n}",
                access_key=parent.access_key,
                user_id=parent.user_id,
                project_id=parent.project_id,
                domain_name=parent.domain_name,
                scaling_group=parent.scaling_group,
                type=parent.type,
                image=parent.image,
                command=parent.command,
                environ=parent.environ,
                resources=parent.resources,
                cluster_size=parent.cluster_size,
                cluster_mode=parent.cluster_mode,
                priority=parent.priority,
                preemptible=parent.preemptible,
                max_duration=parent.max_duration,
                status=SessionStatus.PENDING.value,
                status_info={},
                parent_session_id=parent.id,
                retry_count=n,
                max_retries=parent.max_retries,
                retry_policy=parent.retry_policy,
                retry_cause=cause,
            )
            .on_conflict_do_nothing(
                index_elements=[Session.access_key, Session.creation_id],
                index_where=Session.creation_id.is_not(None),
            )
            .returning(Session.id)
        )
        if inserted.first() is None:
            return None  # another manager made it
        await conn.execute(
            insert(Kernel),
            [
                {
                    "session_id": child_id,
                    "cluster_role": "main" if i == 0 else "sub",
                    "cluster_idx": i,
                    "status": KernelStatus.PENDING.value,
                    "occupied_slots": parent.resources,
                }
                for i in range(parent.cluster_size)
            ],
        )
        deps = (
            (
                await conn.execute(
                    select(SessionDependency.depends_on).where(SessionDependency.session_id == parent.id)
                )
            )
            .scalars()
            .all()
        )
        if deps:
            await conn.execute(
                insert(SessionDependency), [{"session_id": child_id, "depends_on": d} for d in deps]
            )
        await conn.execute(
            insert(AuditLog).values(
                actor=parent.access_key,
                action="session.retry",
                target=str(child_id),
                detail={
                    "parent": str(parent.id),
                    "cause": cause,
                    "attempt": f"attempt {n + 1} of {1 + parent.max_retries}",
                },
            )
        )
        log.info(
            "session.retry_dispatched",
            session_id=str(child_id),
            parent_session_id=str(parent.id),
            attempt=n + 1,
        )
        return child_id

    # -- 3. count -----------------------------------------------------------------------------

    async def count_successes(self) -> int:
        async with self._engine.begin() as conn:
            done = await conn.execute(_COUNT_SUCCESSES)
            n = len(done.all())
        if n:
            RETRY_SUCCEEDED.inc(n)
        return n


def undecided_query() -> Select[Any]:
    """The sessions a retry decision is due for, with their project's and domain's defaults."""
    return (
        select(
            *Session.__table__.c,
            Project.retry_policy_default.label("project_default"),
            Domain.retry_policy_default.label("domain_default"),
        )
        .join(Project, Project.id == Session.project_id)
        .join(Domain, Domain.name == Session.domain_name)
        .where(_UNDECIDED)
        .limit(BATCH)
    )


def due_query(now: dt.datetime) -> Select[Any]:
    """The sessions whose scheduled retry is due at `now` and not yet dispatched."""
    return (
        select(*Session.__table__.c)
        .where(
            text(
                f"{retry_rows.SCHEDULED}"
                " AND CAST(sessions.status_info -> 'retry' ->> 'due_at' AS timestamptz) <= :now"
            ).bindparams(now=now)
        )
        .order_by(Session.created_at)
        .limit(BATCH)
        .with_for_update(skip_locked=True)
    )


async def _due(conn: AsyncConnection, now: dt.datetime) -> Sequence[Row[Any]]:
    rows: Sequence[Row[Any]] = (await conn.execute(due_query(now))).all()
    return rows


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value)
