"""The deployment controller's updates: `PATCH` (replicas, autoscaling, drain timeout, a new
definition rolled out as a new revision), rollbacks on demand, and new access tokens.

A new definition is the current one with the request's fields over it, generated for the
deployment's type and admitted as a create is (`DeploymentController._admit_definition`); it
starts the update through `state.rollouts`, as the orchestrator's own rollbacks do. Every write
is one transaction on the locked deployment row, with its history and audit rows; the
`deployment.status` event and the hint follow the commit.
"""

from __future__ import annotations

import abc
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEventPublisher, publish
from sokovan.db.models import Deployment
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.definitions import DefinitionError, generate, updated_request
from sokovan.manager.controller.deployment_rows import history, locked, new_token, refuse_ending
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest, DeploymentUpdateRequest
from sokovan.manager.controller.errors import Conflict, ValidationFailed
from sokovan.manager.repositories.admin import audit
from sokovan.manager.repositories.tenancy import Principal
from sokovan.state.rollouts import DEFAULT_ROLLBACK_AFTER, DEFAULT_STRATEGY, begin_update, roll_back

SCALE_HANDLER = "api.scale"
CONFIGURE_HANDLER = "api.configure"
UPDATE_HANDLER = "api.update"
ROLLBACK_HANDLER = "api.rollback"


def definition_error(exc: DefinitionError) -> ValidationFailed:
    return ValidationFailed(
        f"{exc.field}: {exc.message}",
        errors=[{"field": exc.field, "message": exc.message, "type": "value_error"}],
    )


@dataclass(frozen=True)
class Updated:
    """What a PATCH did: `revision` started (None: no new definition), anything changed at all."""

    revision: int | None
    changed: bool


class DeploymentUpdates(abc.ABC):
    """Mixed into `DeploymentController`, which provides the context, the event publisher, the
    hint and the admission of a definition."""

    _ctx: ManagerContext
    _events: UserEventPublisher

    @abc.abstractmethod
    async def _hint(self, *hints: Hint) -> None:
        """Wake the coordinators named (a lost hint costs one long cycle, never the request)."""

    @abc.abstractmethod
    async def _admit_definition(
        self,
        conn: AsyncConnection,
        principal: Principal,
        request: DeploymentCreateRequest,
        definition: dict[str, Any],
    ) -> None:
        """Refuse a definition that could never run, as a create would."""

    async def update(
        self, principal: Principal, deployment_id: uuid.UUID, patch: DeploymentUpdateRequest
    ) -> Updated:
        """Apply `patch`; 409 once the deployment is ending, or for `replicas` while it autoscales."""
        given = patch.model_fields_set
        started = None
        async with self._ctx.engine.begin() as conn:
            row = await locked(conn, principal, deployment_id)
            status = refuse_ending(row, "be updated")
            autoscaling = row.autoscaling
            if "autoscaling" in given:
                autoscaling = patch.autoscaling.model_dump() if patch.autoscaling is not None else None
            if patch.replicas is not None and autoscaling is not None:
                raise Conflict(
                    f"deployment {deployment_id} autoscales: the autoscaler owns its replicas "
                    '(remove autoscaling first: PATCH {"autoscaling": null})'
                )
            values, notes = _settings(row, patch, autoscaling)
            if values:
                await conn.execute(update(Deployment).where(Deployment.id == deployment_id).values(**values))
                handler = SCALE_HANDLER if set(values) == {"replicas"} else CONFIGURE_HANDLER
                await history(conn, deployment_id, handler, status, status, "; ".join(notes))
                await audit(
                    conn, principal.access_key, "deployment.update", str(deployment_id), {"changes": notes}
                )
            if patch.changes_definition():
                try:
                    request = updated_request(row.name, row.type, row.scaling_group, row.definition, patch)
                    definition = generate(request)
                except DefinitionError as exc:
                    raise definition_error(exc) from None
                if definition != row.definition:
                    await self._admit_definition(conn, principal, request, definition)
                    started = await begin_update(
                        conn,
                        deployment_id,
                        definition=definition,
                        health_check=definition["health_check"],
                        strategy=patch.stored_strategy() or DEFAULT_STRATEGY,
                        rollback_after=patch.rollback_after or DEFAULT_ROLLBACK_AFTER,
                        handler=UPDATE_HANDLER,
                        message="requested by user",
                    )
                    await audit(
                        conn,
                        principal.access_key,
                        "deployment.update",
                        str(deployment_id),
                        {"revision": started.to_revision, "fields": sorted(given)},
                    )
        if started is not None:
            await publish(self._events, [started.event(UPDATE_HANDLER)])
        if values or started is not None:
            await self._hint(Hint.DEPLOYMENT)
        return Updated(
            started.to_revision if started is not None else None, bool(values) or started is not None
        )

    async def rollback(self, principal: Principal, deployment_id: uuid.UUID) -> int:
        """Back to the last good revision (`state.rollouts.roll_back`); the revision now current.
        409 when there is nothing to roll back to, or once the deployment is ending."""
        async with self._ctx.engine.begin() as conn:
            row = await locked(conn, principal, deployment_id)
            refuse_ending(row, "be rolled back")
            done = await roll_back(conn, deployment_id, handler=ROLLBACK_HANDLER, reason="requested by user")
            if done is None:
                raise Conflict(
                    f"deployment {deployment_id} has nothing to roll back to: revision {row.revision} "
                    "is its first definition, or a rollback is already under way"
                )
            await audit(
                conn,
                principal.access_key,
                "deployment.rollback",
                str(deployment_id),
                {"from": done.failed_revision, "restored": done.restored_revision, "revision": done.revision},
            )
        await publish(self._events, [done.event(ROLLBACK_HANDLER)])
        await self._hint(Hint.DEPLOYMENT, Hint.ROUTE)
        return done.revision

    async def rotate_token(self, principal: Principal, deployment_id: uuid.UUID) -> str:
        """A new access token (the old one stops working with the next routing table); an open
        deployment gets one and is closed."""
        token, digest = new_token()
        async with self._ctx.engine.begin() as conn:
            row = await locked(conn, principal, deployment_id)
            refuse_ending(row, "take a new token")
            await conn.execute(
                update(Deployment)
                .where(Deployment.id == deployment_id)
                .values(token_sha256=digest, open_to_public=False)
            )
            await audit(
                conn,
                principal.access_key,
                "deployment.token",
                str(deployment_id),
                {"was_open_to_public": bool(row.open_to_public)},
            )
        await self._hint(Hint.ROUTE, Hint.DEPLOYMENT)
        return token


def _settings(
    row: Any, patch: DeploymentUpdateRequest, autoscaling: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    """The columns a PATCH sets besides the definition, and a note for each."""
    values: dict[str, Any] = {}
    notes: list[str] = []
    replicas = patch.replicas if patch.replicas is not None else row.replicas
    if patch.autoscaling is not None:
        replicas = patch.autoscaling.clamp(replicas)
    if replicas != row.replicas:
        values["replicas"] = replicas
        notes.append(f"replicas {row.replicas} -> {replicas}")
    if autoscaling != row.autoscaling:
        values["autoscaling"] = autoscaling
        if autoscaling is None:
            notes.append("autoscaling removed")
        else:
            notes.append(
                f"autoscaling {autoscaling['metric']} target {autoscaling['target']:g}, "
                f"{autoscaling['min_replicas']}-{autoscaling['max_replicas']} replicas"
            )
    if patch.drain_timeout is not None and patch.drain_timeout != row.drain_timeout:
        values["drain_timeout"] = patch.drain_timeout
        notes.append(f"drain_timeout {row.drain_timeout:g}s -> {patch.drain_timeout:g}s")
    return values, notes
