"""DeploymentController: the API side's only writer of deployments.

Creating validates everything that can be known before a replica exists — the type's definition
(`definitions`), the scaling group (it must exist and allow inference sessions), the image (some
agent of the group offers it), the per-replica resources (some agent could ever hold one, the
owner's quotas could ever allow one) and the name (free among live deployments) — and then writes
the deployment (PENDING) with its revision 1, its first history row and an audit row in ONE
transaction; a refused request writes nothing. Unless `open_to_public`, it makes the deployment's
access token, answered once (only its sha256 is kept). A dry run makes the same checks and says
whether one replica could be placed now. Updates, rollbacks and new tokens are
`deployment_updates`'; destroying marks the deployment DESTROYING (a guarded update: once ending,
it stays so); the deployment coordinator does the work, woken by a hint after each commit.
Replica sessions go through the same admission as any session when the coordinator creates them;
the checks here are the session admission's own (`admission`), applied to one replica.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import func

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.types import EndpointLifecycle, SessionType
from sokovan.db.models import Deployment, DeploymentRevision
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.admission import check_placeable, quota_violations
from sokovan.manager.controller.admission_cache import CapacityCache
from sokovan.manager.controller.definitions import DefinitionError, generate
from sokovan.manager.controller.deployment_rows import ENDING, ENDING_VALUES, history, locked, new_token
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest
from sokovan.manager.controller.deployment_updates import DeploymentUpdates, definition_error
from sokovan.manager.controller.errors import (
    Conflict,
    QuotaExceeded,
    UnknownReference,
    Unsatisfiable,
    ValidationFailed,
)
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories.admin import audit
from sokovan.manager.repositories.tenancy import Principal, owner_limits
from sokovan.orchestrator.provisioner.dry_run import DryRunRequest
from sokovan.orchestrator.provisioner.dry_run import dry_run as place_dry_run

log = structlog.get_logger(__name__)

CREATE_HANDLER = "api.create"
DESTROY_HANDLER = "api.destroy"
LIVE_NAME_INDEX = "uq_deployments_live_name"
# What a dry run reports as "not placeable" rather than refusing the request.
_UNPLACEABLE = (UnknownReference, Unsatisfiable, QuotaExceeded)


@dataclass(frozen=True)
class Created:
    id: uuid.UUID
    token: str | None  # the access token, shown once; None when open to the public


@dataclass(frozen=True)
class DryRun:
    definition: dict[str, Any]
    placeable: bool
    pending_reason: str | None


class DeploymentController(DeploymentUpdates):
    def __init__(self, ctx: ManagerContext) -> None:
        self._ctx = ctx
        self._capacity = CapacityCache(epoch=ctx.admission)
        self._events = UserEventPublisher(ctx.redis, ctx.settings.etcd_prefix)

    # -- create -------------------------------------------------------------------------------

    async def create(self, principal: Principal, request: DeploymentCreateRequest) -> Created:
        """Admit and write the deployment (PENDING); its id and access token."""
        definition = _definition(request)
        deployment_id = uuid.uuid4()
        token, digest = (None, None) if request.open_to_public else new_token()
        autoscaling = request.autoscaling
        replicas = autoscaling.clamp(request.replicas) if autoscaling is not None else request.replicas
        try:
            async with self._ctx.engine.begin() as conn:
                await self._admit_definition(conn, principal, request, definition)
                await self._check_name(conn, request.name)
                await conn.execute(
                    insert(Deployment).values(
                        id=deployment_id,
                        name=request.name,
                        type=request.type.value,
                        access_key=principal.access_key,
                        user_id=principal.user_id,
                        project_id=principal.project_id,
                        domain_name=principal.domain_name,
                        scaling_group=request.scaling_group,
                        replicas=replicas,
                        definition=definition,
                        health_check=definition["health_check"],
                        status=EndpointLifecycle.PENDING.value,
                        status_info={},
                        revision=1,
                        autoscaling=autoscaling.model_dump() if autoscaling is not None else None,
                        token_sha256=digest,
                        open_to_public=request.open_to_public,
                        drain_timeout=request.drain_timeout,
                    )
                )
                await conn.execute(
                    insert(DeploymentRevision).values(
                        deployment_id=deployment_id,
                        revision=1,
                        definition=definition,
                        health_check=definition["health_check"],
                    )
                )
                await history(
                    conn,
                    deployment_id,
                    CREATE_HANDLER,
                    None,
                    EndpointLifecycle.PENDING,
                    f"created with {replicas} replica(s)",
                )
                await audit(
                    conn,
                    principal.access_key,
                    "deployment.create",
                    str(deployment_id),
                    {
                        "name": request.name,
                        "type": request.type.value,
                        "replicas": replicas,
                        "scaling_group": request.scaling_group,
                        "image": definition["image"],
                        "open_to_public": request.open_to_public,
                        "autoscaling": autoscaling is not None,
                    },
                )
        except IntegrityError as exc:
            if LIVE_NAME_INDEX in str(exc.orig):  # a concurrent create took the name first
                raise _name_taken(request.name) from None
            raise
        await self._hint(Hint.DEPLOYMENT)
        return Created(deployment_id, token)

    async def dry_run(self, principal: Principal, request: DeploymentCreateRequest) -> DryRun:
        """The same checks as `create`; the definition it would store and whether one replica
        could be placed now (no agent offering the image, a quota or a group that could never
        hold one: not placeable, with the reason). A malformed request or a taken name is still
        refused. Writes nothing."""
        definition = _definition(request)
        replica = _replica(request, definition)
        async with self._ctx.engine.connect() as conn:
            try:
                await self._check_name(conn, request.name)
                try:
                    await self._admit_definition(conn, principal, request, definition)
                except _UNPLACEABLE as exc:
                    return DryRun(definition, False, exc.detail)
                plan = await place_dry_run(
                    conn,
                    DryRunRequest(
                        access_key=principal.access_key,
                        user_id=principal.user_id,
                        project_id=principal.project_id,
                        domain_name=principal.domain_name,
                        scaling_group=request.scaling_group,
                        type=SessionType.INFERENCE.value,
                        image=replica.image,
                        resources=request.per_replica_slots(),
                        command=replica.command,
                    ),
                )
                return DryRun(definition, plan.placeable, plan.pending_reason)
            finally:
                await conn.rollback()

    async def _admit_definition(
        self,
        conn: AsyncConnection,
        principal: Principal,
        request: DeploymentCreateRequest,
        definition: dict[str, Any],
    ) -> None:
        """Refuse what could never run: one replica as an inference session."""
        replica = _replica(request, definition)
        per_replica = request.per_replica_slots()
        await check_placeable(conn, replica, per_replica, self._capacity)
        violations = quota_violations(await owner_limits(conn, principal), per_replica)
        if violations:
            raise QuotaExceeded("one replica is more than allowed: " + "; ".join(violations))

    async def _check_name(self, conn: AsyncConnection, name: str) -> None:
        taken = await conn.execute(
            select(Deployment.id).where(
                Deployment.name == name, Deployment.status != EndpointLifecycle.DESTROYED.value
            )
        )
        if taken.first() is not None:
            raise _name_taken(name)

    # -- destroy ------------------------------------------------------------------------------

    async def destroy(self, principal: Principal, deployment_id: uuid.UUID) -> None:
        """Mark it DESTROYING. Idempotent: a deployment already ending is left as it is."""
        async with self._ctx.engine.begin() as conn:
            row = await locked(conn, principal, deployment_id)
            status = EndpointLifecycle(row.status)
            if status in ENDING:
                return
            moved = await conn.execute(
                update(Deployment)
                .where(Deployment.id == deployment_id, Deployment.status.not_in(ENDING_VALUES))
                .values(status=EndpointLifecycle.DESTROYING.value, status_changed_at=func.now())
                .returning(Deployment.id)
            )
            if moved.first() is None:
                return
            await history(
                conn,
                deployment_id,
                DESTROY_HANDLER,
                status,
                EndpointLifecycle.DESTROYING,
                "destroy requested by user",
            )
            await audit(
                conn, principal.access_key, "deployment.destroy", str(deployment_id), {"from": status.value}
            )
        event = UserEvent(
            name="deployment.status",
            deployment_id=str(deployment_id),
            from_status=status.value,
            to_status=EndpointLifecycle.DESTROYING.value,
            owner=str(row.user_id),
            detail={"handler": DESTROY_HANDLER},
        )
        await publish(self._events, [event])
        await self._hint(Hint.DEPLOYMENT)

    async def _hint(self, *hints: Hint) -> None:
        for hint in hints:
            try:
                await self._ctx.hints.hint(hint)
            except Exception:  # a lost hint costs one long-cycle interval, never the request
                log.warning("could not publish a hint", hint=hint.value, exc_info=True)


def _definition(request: DeploymentCreateRequest) -> dict[str, Any]:
    try:
        return generate(request)
    except DefinitionError as exc:
        raise definition_error(exc) from None


def _replica(request: DeploymentCreateRequest, definition: dict[str, Any]) -> SessionCreateRequest:
    """One replica as the inference session it will be."""
    try:
        return SessionCreateRequest(
            image=definition["image"],
            type=SessionType.INFERENCE,
            command=definition["command"],
            resources=definition["resources"],
            scaling_group=request.scaling_group,
            environ=definition["environ"],
        )
    except ValidationError as exc:  # e.g. a generated command line longer than a session takes
        raise ValidationFailed(f"the replicas' session would be invalid: {exc}") from None


def _name_taken(name: str) -> Conflict:
    return Conflict(f"a live deployment is already named {name!r}; destroy it first or pick another name")
