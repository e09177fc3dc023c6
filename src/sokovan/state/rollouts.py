"""Starting and rolling back a deployment's updates (CONTRACT section 12), in the caller's transaction.

Both the API (`PATCH /v2/deployments/{id}`, `POST .../rollback`) and the orchestrator (a revision
past its `rollback_after` deadline) write through here, so `deployments.rollout` has one shape:

    {"from_revision": int, "to_revision": int, "strategy": {...}, "rollback_after": float,
     "started_at": ISO 8601 UTC, "rolled_back": bool}

`from_revision` is the last known good revision: the current one when no update runs, else the
running update's (for a rollback in progress, the revision it restores). A new revision's number
is one more than the highest revision the deployment ever had (the current one, unless a rollback
brought an older one back), so a number never names two definitions. Each function locks the
deployment's row (FOR UPDATE; a caller that already holds it just holds it again) and writes one
history row naming the revisions; the caller publishes `result.event(...)` after its commit.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.user_events import UserEvent
from sokovan.common.types import EndpointLifecycle, HandlerOutcome
from sokovan.db.models import Deployment, DeploymentHistory, DeploymentRevision

DEFAULT_STRATEGY: Mapping[str, str] = {"type": "rolling", "max_surge": "1", "max_unavailable": "0"}
DEFAULT_ROLLBACK_AFTER = 600.0
_ENDING = (EndpointLifecycle.DESTROYING.value, EndpointLifecycle.DESTROYED.value)


class DeploymentEnding(Exception):
    """The deployment is being destroyed (or is): it takes no update."""


@dataclass(frozen=True)
class UpdateStarted:
    deployment_id: uuid.UUID
    owner: uuid.UUID  # the owner's user id (who may see the event)
    from_status: EndpointLifecycle
    from_revision: int  # the last known good revision (the rollout's from_revision)
    to_revision: int

    def event(self, handler: str) -> UserEvent:
        return _event(
            self.deployment_id,
            self.owner,
            self.from_status,
            handler,
            {"from_revision": self.from_revision, "to_revision": self.to_revision},
        )


@dataclass(frozen=True)
class RolledBack:
    deployment_id: uuid.UUID
    owner: uuid.UUID
    from_status: EndpointLifecycle
    failed_revision: int  # the revision rolled back from
    restored_revision: int  # whose definition runs again
    revision: int  # the deployment's revision now (restored_revision, or a new one copying it)

    @property
    def new_revision(self) -> bool:
        """True when no update ran: the rollback is a new update to the previous definition."""
        return self.revision != self.restored_revision

    def event(self, handler: str) -> UserEvent:
        detail = {
            "from_revision": self.failed_revision,
            "to_revision": self.revision,
            "restored_revision": self.restored_revision,
            "rolled_back": True,
        }
        return _event(self.deployment_id, self.owner, self.from_status, handler, detail)


def _event(
    deployment_id: uuid.UUID,
    owner: uuid.UUID,
    from_status: EndpointLifecycle,
    handler: str,
    detail: Mapping[str, object],
) -> UserEvent:
    return UserEvent(
        name="deployment.status",
        deployment_id=str(deployment_id),
        from_status=from_status.value,
        to_status=EndpointLifecycle.DEPLOYING.value,
        owner=str(owner),
        detail={"handler": handler, **detail},
    )


def last_good_revision(revision: int, rollout: Mapping[str, Any] | None) -> int:
    """The revision an update started now falls back to."""
    if not rollout:
        return revision
    if rollout.get("rolled_back"):
        return int(rollout["to_revision"])
    return int(rollout["from_revision"])


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat().replace("+00:00", "Z")


async def _lock(conn: AsyncConnection, deployment_id: uuid.UUID) -> Any:
    row = (
        await conn.execute(
            select(
                Deployment.status,
                Deployment.revision,
                Deployment.rollout,
                Deployment.user_id,
                Deployment.definition,
                Deployment.health_check,
            )
            .where(Deployment.id == deployment_id)
            .with_for_update()
        )
    ).first()
    if row is None:
        raise LookupError(f"deployment {deployment_id} not found")
    return row


async def _history(
    conn: AsyncConnection, deployment_id: uuid.UUID, handler: str, src: str, message: str
) -> None:
    await conn.execute(
        insert(DeploymentHistory).values(
            deployment_id=deployment_id,
            handler=handler,
            result=HandlerOutcome.SUCCESS.value,
            from_status=src,
            to_status=EndpointLifecycle.DEPLOYING.value,
            message=message,
        )
    )


async def begin_update(
    conn: AsyncConnection,
    deployment_id: uuid.UUID,
    *,
    definition: Mapping[str, Any],
    health_check: Mapping[str, Any],
    strategy: Mapping[str, Any],
    rollback_after: float,
    handler: str,
    message: str | None = None,
) -> UpdateStarted:
    """A new revision running `definition`: recorded, made current, and the deployment DEPLOYING.

    Raises `DeploymentEnding` for a deployment being destroyed, LookupError for none."""
    row = await _lock(conn, deployment_id)
    status = EndpointLifecycle(row.status)
    if row.status in _ENDING:
        raise DeploymentEnding(f"deployment {deployment_id} is {row.status}")
    highest = (
        await conn.execute(
            select(func.max(DeploymentRevision.revision)).where(
                DeploymentRevision.deployment_id == deployment_id
            )
        )
    ).scalar()
    to_revision = max(int(highest or 0), int(row.revision)) + 1
    from_revision = last_good_revision(int(row.revision), row.rollout)
    definition = {**definition, "health_check": dict(health_check)}
    await conn.execute(
        insert(DeploymentRevision).values(
            deployment_id=deployment_id,
            revision=to_revision,
            definition=definition,
            health_check=dict(health_check),
        )
    )
    strategy = dict(strategy)
    blue_green = strategy.get("type") == "blue_green"
    await conn.execute(
        update(Deployment)
        .where(Deployment.id == deployment_id)
        .values(
            revision=to_revision,
            definition=definition,
            health_check=dict(health_check),
            rollout={
                "from_revision": from_revision,
                "to_revision": to_revision,
                "strategy": strategy,
                "rollback_after": float(rollback_after),
                "started_at": now_iso(),
                "rolled_back": False,
            },
            serving_revision=from_revision if blue_green else None,
            status=EndpointLifecycle.DEPLOYING.value,
            status_changed_at=func.now(),
        )
    )
    text = f"update: revision {row.revision} -> {to_revision} ({strategy.get('type')}"
    text += f", falls back to {from_revision})" if from_revision != row.revision else ")"
    await _history(conn, deployment_id, handler, row.status, text + (f": {message}" if message else ""))
    return UpdateStarted(deployment_id, row.user_id, status, from_revision, to_revision)


async def roll_back(
    conn: AsyncConnection,
    deployment_id: uuid.UUID,
    *,
    handler: str,
    reason: str,
    rollback_after: float = DEFAULT_ROLLBACK_AFTER,
) -> RolledBack | None:
    """Back to the last good revision.

    While an update runs: its `from_revision` becomes current again (revision, definition and
    health check from its `deployment_revisions` row), the rollout turns into the way back (same
    strategy and deadline, `rolled_back` true; blue-green keeps serving the restored set), the
    deployment stays DEPLOYING. Otherwise: a rolling update (a new revision, `rollback_after`) to
    the definition of the revision before the current one. None when there is nothing to roll
    back to: a first revision, a rollback already running, a deployment being destroyed."""
    row = await _lock(conn, deployment_id)
    status = EndpointLifecycle(row.status)
    if row.status in _ENDING:
        return None
    current = int(row.revision)
    rollout = row.rollout
    if status is EndpointLifecycle.DEPLOYING and rollout:
        if rollout.get("rolled_back"):
            return None
        restored = int(rollout["from_revision"])
        if restored == current:
            return None
        target = await _revision(conn, deployment_id, restored)
        if target is None:
            return None
        strategy = dict(rollout.get("strategy") or DEFAULT_STRATEGY)
        await conn.execute(
            update(Deployment)
            .where(Deployment.id == deployment_id)
            .values(
                revision=restored,
                definition=target.definition,
                health_check=target.health_check,
                rollout={
                    "from_revision": current,
                    "to_revision": restored,
                    "strategy": strategy,
                    "rollback_after": float(rollout.get("rollback_after", rollback_after)),
                    "started_at": now_iso(),
                    "rolled_back": True,
                },
                serving_revision=restored if strategy.get("type") == "blue_green" else None,
            )
        )
        await _history(
            conn,
            deployment_id,
            handler,
            row.status,
            f"rolled back from revision {current} to {restored}: {reason}",
        )
        return RolledBack(deployment_id, row.user_id, status, current, restored, restored)
    previous = await _previous(conn, deployment_id, current, row.definition, row.health_check)
    if previous is None:
        return None
    started = await begin_update(
        conn,
        deployment_id,
        definition=previous.definition,
        health_check=previous.health_check,
        strategy=DEFAULT_STRATEGY,
        rollback_after=rollback_after,
        handler=handler,
        message=f"roll back to revision {previous.revision}'s definition: {reason}",
    )
    return RolledBack(deployment_id, row.user_id, status, current, previous.revision, started.to_revision)


async def _revision(conn: AsyncConnection, deployment_id: uuid.UUID, revision: int) -> Any:
    return (
        await conn.execute(
            select(
                DeploymentRevision.revision, DeploymentRevision.definition, DeploymentRevision.health_check
            ).where(
                DeploymentRevision.deployment_id == deployment_id, DeploymentRevision.revision == revision
            )
        )
    ).first()


async def _previous(
    conn: AsyncConnection,
    deployment_id: uuid.UUID,
    current: int,
    definition: Mapping[str, Any],
    health_check: Mapping[str, Any],
) -> Any:
    """The newest revision below `current` that runs something else than the current one."""
    rows = await conn.execute(
        select(DeploymentRevision.revision, DeploymentRevision.definition, DeploymentRevision.health_check)
        .where(DeploymentRevision.deployment_id == deployment_id, DeploymentRevision.revision < current)
        .order_by(DeploymentRevision.revision.desc())
    )
    for candidate in rows:
        if _runs(candidate.definition) != _runs(definition) or candidate.health_check != health_check:
            return candidate
    return None


def _runs(definition: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in definition.items() if k != "health_check"}
