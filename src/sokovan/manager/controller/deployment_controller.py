"""DeploymentController: the API side's only writer of deployments.

Creating validates everything that can be known before a replica exists — the type's definition
(`definitions`), the scaling group (it must exist and allow inference sessions), the image (some
agent of the group offers it), the per-replica resources (some agent could ever hold one, the
owner's quotas could ever allow one) and the name (free among live deployments) — and then writes
the deployment (PENDING), its first history row and an audit row in ONE transaction; a refused
request writes nothing. Scaling changes the target, destroying marks the deployment DESTROYING
(a guarded update: once ending, it stays so); the deployment coordinator does the work, woken by a
hint after each commit. Replica sessions go through the same admission as any session when the
coordinator creates them; the checks here are the session admission's own (`admission`), applied
to one replica.
"""

from __future__ import annotations

import uuid
from typing import Any

import structlog
from pydantic import ValidationError
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import func

from sokovan.bus.hints import Hint
from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.types import EndpointLifecycle, HandlerOutcome, SessionType
from sokovan.db.models import Deployment, DeploymentHistory, DeploymentRevision
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.admission import check_placeable, quota_violations
from sokovan.manager.controller.admission_cache import CapacityCache
from sokovan.manager.controller.definitions import DefinitionError, generate
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest
from sokovan.manager.controller.errors import Conflict, NotFound, QuotaExceeded, ValidationFailed
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories.admin import audit
from sokovan.manager.repositories.deployments_read import visible
from sokovan.manager.repositories.tenancy import Principal, owner_limits

log = structlog.get_logger(__name__)

CREATE_HANDLER = "api.create"
SCALE_HANDLER = "api.scale"
DESTROY_HANDLER = "api.destroy"
# Once a deployment is in one of these, nothing the API does brings it back.
ENDING = frozenset({EndpointLifecycle.DESTROYING, EndpointLifecycle.DESTROYED})
_ENDING_VALUES = sorted(s.value for s in ENDING)
LIVE_NAME_INDEX = "uq_deployments_live_name"


class DeploymentController:
    def __init__(self, ctx: ManagerContext) -> None:
        self._ctx = ctx
        self._capacity = CapacityCache(epoch=ctx.admission)
        self._events = UserEventPublisher(ctx.redis, ctx.settings.etcd_prefix)

    # -- create -------------------------------------------------------------------------------

    async def create(self, principal: Principal, request: DeploymentCreateRequest) -> uuid.UUID:
        """Admit and write the deployment (PENDING); its id."""
        definition = _definition(request)
        deployment_id = uuid.uuid4()
        try:
            async with self._ctx.engine.begin() as conn:
                await self._admit(conn, principal, request, definition)
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
                        replicas=request.replicas,
                        definition=definition,
                        health_check=definition["health_check"],
                        status=EndpointLifecycle.PENDING.value,
                        status_info={},
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
                await _history(
                    conn,
                    deployment_id,
                    CREATE_HANDLER,
                    None,
                    EndpointLifecycle.PENDING,
                    f"created with {request.replicas} replica(s)",
                )
                await audit(
                    conn,
                    principal.access_key,
                    "deployment.create",
                    str(deployment_id),
                    {
                        "name": request.name,
                        "type": request.type.value,
                        "replicas": request.replicas,
                        "scaling_group": request.scaling_group,
                        "image": definition["image"],
                    },
                )
        except IntegrityError as exc:
            if LIVE_NAME_INDEX in str(exc.orig):  # a concurrent create took the name first
                raise _name_taken(request.name) from None
            raise
        await self._hint()
        return deployment_id

    async def dry_run(self, principal: Principal, request: DeploymentCreateRequest) -> dict[str, Any]:
        """The same checks as `create`; the definition it would store. Writes nothing."""
        definition = _definition(request)
        async with self._ctx.engine.connect() as conn:
            try:
                await self._admit(conn, principal, request, definition)
            finally:
                await conn.rollback()
        return definition

    async def _admit(
        self,
        conn: AsyncConnection,
        principal: Principal,
        request: DeploymentCreateRequest,
        definition: dict[str, Any],
    ) -> None:
        """Refuse what could never run (one replica as an inference session) or a taken name."""
        try:
            replica = SessionCreateRequest(
                image=definition["image"],
                type=SessionType.INFERENCE,
                command=definition["command"],
                resources=definition["resources"],
                scaling_group=request.scaling_group,
                environ=definition["environ"],
            )
        except ValidationError as exc:  # e.g. a generated command line longer than a session takes
            raise ValidationFailed(f"the replicas' session would be invalid: {exc}") from None
        per_replica = request.per_replica_slots()
        await check_placeable(conn, replica, per_replica, self._capacity)
        violations = quota_violations(await owner_limits(conn, principal), per_replica)
        if violations:
            raise QuotaExceeded("one replica is more than allowed: " + "; ".join(violations))
        taken = await conn.execute(
            select(Deployment.id).where(
                Deployment.name == request.name, Deployment.status != EndpointLifecycle.DESTROYED.value
            )
        )
        if taken.first() is not None:
            raise _name_taken(request.name)

    # -- scale and destroy --------------------------------------------------------------------

    async def scale(self, principal: Principal, deployment_id: uuid.UUID, replicas: int) -> None:
        """Set the target; 409 once the deployment is being destroyed. The same target is a no-op."""
        async with self._ctx.engine.begin() as conn:
            row = await _locked(conn, principal, deployment_id)
            status = EndpointLifecycle(row.status)
            if status in ENDING:
                raise Conflict(f"deployment {deployment_id} is {status.value}: it can no longer be scaled")
            if row.replicas == replicas:
                return
            await conn.execute(
                update(Deployment)
                .where(Deployment.id == deployment_id, Deployment.status.not_in(_ENDING_VALUES))
                .values(replicas=replicas)
            )
            await _history(
                conn, deployment_id, SCALE_HANDLER, status, status, f"replicas {row.replicas} -> {replicas}"
            )
            await audit(
                conn,
                principal.access_key,
                "deployment.scale",
                str(deployment_id),
                {"from": row.replicas, "to": replicas},
            )
        await self._hint()

    async def destroy(self, principal: Principal, deployment_id: uuid.UUID) -> None:
        """Mark it DESTROYING. Idempotent: a deployment already ending is left as it is."""
        async with self._ctx.engine.begin() as conn:
            row = await _locked(conn, principal, deployment_id)
            status = EndpointLifecycle(row.status)
            if status in ENDING:
                return
            moved = await conn.execute(
                update(Deployment)
                .where(Deployment.id == deployment_id, Deployment.status.not_in(_ENDING_VALUES))
                .values(status=EndpointLifecycle.DESTROYING.value, status_changed_at=func.now())
                .returning(Deployment.id)
            )
            if moved.first() is None:
                return
            await _history(
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
        await self._hint()

    async def _hint(self) -> None:
        try:
            await self._ctx.hints.hint(Hint.DEPLOYMENT)
        except Exception:  # a lost hint costs one long-cycle interval, never the request
            log.warning("could not publish the deployment hint", exc_info=True)


def _definition(request: DeploymentCreateRequest) -> dict[str, Any]:
    try:
        return generate(request)
    except DefinitionError as exc:
        raise ValidationFailed(
            f"{exc.field}: {exc.message}",
            errors=[{"field": exc.field, "message": exc.message, "type": "value_error"}],
        ) from None


def _name_taken(name: str) -> Conflict:
    return Conflict(f"a live deployment is already named {name!r}; destroy it first or pick another name")


async def _locked(conn: AsyncConnection, principal: Principal, deployment_id: uuid.UUID) -> Any:
    """The deployment's status, target and owner, its row held until the transaction ends."""
    row = (
        await conn.execute(
            select(Deployment.status, Deployment.replicas, Deployment.user_id)
            .where(Deployment.id == deployment_id, visible(principal))
            .with_for_update()
        )
    ).first()
    if row is None:
        raise NotFound(f"deployment {deployment_id} not found")
    return row


async def _history(
    conn: AsyncConnection,
    deployment_id: uuid.UUID,
    handler: str,
    from_status: EndpointLifecycle | None,
    to_status: EndpointLifecycle,
    message: str,
) -> None:
    await conn.execute(
        insert(DeploymentHistory).values(
            deployment_id=deployment_id,
            handler=handler,
            result=HandlerOutcome.SUCCESS.value,
            from_status=from_status.value if from_status is not None else None,
            to_status=to_status.value,
            message=message,
        )
    )
