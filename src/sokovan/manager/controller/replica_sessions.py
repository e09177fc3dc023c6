"""Replica sessions through the SchedulingController: what the orchestrator's serving coordinators
are given (as `ReplicaSessions`) to create and end a deployment's replicas.

A replica is admitted and placed like any session its owner creates: quotas, the pending limit and
placement apply. The route's creation key makes creating idempotent.
"""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SessionType
from sokovan.manager.controller.errors import ControllerError, NotFound
from sokovan.manager.controller.scheduling_controller import SchedulingController
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories.tenancy import Principal, principal_of
from sokovan.orchestrator.deployment.replicas import ReplicaRefused, ReplicaSpec


class ControllerReplicas:
    def __init__(self, controller: SchedulingController, engine: AsyncEngine) -> None:
        self._controller = controller
        self._engine = engine

    async def ensure(self, spec: ReplicaSpec) -> uuid.UUID:
        principal = await self._owner(spec.access_key)
        try:
            request = SessionCreateRequest(
                name=spec.name,
                image=spec.image,
                type=SessionType.INFERENCE,
                preemptible=False,
                command=spec.command,
                resources=spec.resources,
                scaling_group=spec.scaling_group,
                environ=spec.environ,
                creation_id=spec.creation_id,
            )
            outcome = await self._controller.create_session(
                principal, request, deployment_id=spec.deployment_id
            )
        except (ControllerError, ValueError) as exc:
            raise ReplicaRefused(getattr(exc, "detail", None) or str(exc)) from exc
        return outcome.session_id

    async def terminate(self, access_key: str, session_id: uuid.UUID) -> None:
        try:
            await self._controller.terminate_session(await self._owner(access_key), session_id, forced=False)
        except (NotFound, ReplicaRefused):
            return

    async def _owner(self, access_key: str) -> Principal:
        async with self._engine.connect() as conn:
            principal = await principal_of(conn, access_key)
        if principal is None:
            raise ReplicaRefused(f"the deployment owner's keypair {access_key} is not active")
        return principal
