"""SchedulingController: the API's way to enqueue and terminate sessions.

Creation validates everything that can be known without placing (fields, scaling group, image,
total capacity, quotas: see `admission`) from caches kept fresh by admin writes
(`admission_cache`), reads only a request's dependencies, and hands the admitted session to the
group commit (`create_batch`): creates arriving together are written together, the session, its
kernels, its dependencies, its first history row and its audit row in one statement, and the
pending limit is counted there under the owner's lock. A refused request writes nothing.
Termination goes through the guarded `apply_session_transitions`, like every other status change.
Both hint the schedule coordinator after commit. A dry run admits like a create (reading
everything afresh) and computes a placement, writing nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import select

from sokovan.bus.hints import Hint, as_demand
from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.preemption import PREEMPT_MODE, PreemptionMode
from sokovan.common.slots import ResourceSlots
from sokovan.common.throttle import Throttle
from sokovan.common.types import (
    FailureCause,
    KernelStatus,
    SchedulingResult,
    SessionStatus,
)
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Session
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.admission import admit, check_dependencies, check_request
from sokovan.manager.controller.admission_cache import CapacityCache, OwnerLimitsCache
from sokovan.manager.controller.create_batch import CreateBatcher, CreateRequest, PendingLimit
from sokovan.manager.controller.errors import ControllerError, NotFound
from sokovan.manager.controller.session_spec import SessionCreateRequest
from sokovan.manager.repositories.admin import audit
from sokovan.manager.repositories.session_inserts import NewSession, existing_sessions
from sokovan.manager.repositories.sessions_read import created_view, visible
from sokovan.manager.repositories.tenancy import OwnerLimits, Principal, owner_limits
from sokovan.orchestrator.provisioner.dry_run import DryRunRequest, DryRunResult, dry_run
from sokovan.orchestrator.retry.policy import effective_policy
from sokovan.orchestrator.schedule.handoffs import PLACE
from sokovan.state.session_writes import SessionTransition, apply_session_transitions

log = structlog.get_logger(__name__)

TERMINATE_HANDLER = "api.terminate"
HINT_COALESCE = 0.005
CREATED = as_demand(PLACE)  # what a create hints: more demand for the placement lane
# Statuses a terminate request moves to TERMINATING: the session holds (or is getting) kernels.
STARTED = frozenset(
    {
        SessionStatus.SCHEDULED,
        SessionStatus.PREPARING,
        SessionStatus.PULLING,
        SessionStatus.PREPARED,
        SessionStatus.CREATING,
        SessionStatus.RUNNING,
    }
)


@dataclass(frozen=True)
class CreateOutcome:
    session_id: uuid.UUID
    created: bool  # False: an earlier request with the same creation_id made it
    # The session as `GET /v2/sessions/{id}` shows it, when this request created it.
    view: dict[str, Any] | None = None


class SchedulingController:
    def __init__(self, ctx: ManagerContext, cluster: ClusterConfig | None = None) -> None:
        self._ctx = ctx
        self._cluster = cluster or ClusterConfig()
        self._capacity = CapacityCache(epoch=ctx.admission)
        self._limits = OwnerLimitsCache(ctx.engine, epoch=ctx.admission)
        self._batcher = CreateBatcher(ctx.engine, on_created=self._hint)
        self._events = UserEventPublisher(ctx.redis, ctx.settings.etcd_prefix)
        # hints and `session.created` events waiting to be published together
        self._flushes = Throttle(self._flush, HINT_COALESCE)
        self._hint_names: set[str] = set()
        self._created: list[UserEvent] = []

    # -- create -------------------------------------------------------------------------------

    async def create_session(
        self, principal: Principal, spec: SessionCreateRequest, *, deployment_id: uuid.UUID | None = None
    ) -> CreateOutcome:
        """Admit from the caches and enqueue the session through the group commit;
        `deployment_id` marks it a replica of that deployment."""
        per_kernel = spec.per_kernel_slots()
        limits = await self._limits.get(principal)
        try:
            depends_on = await self._admit(principal, spec, per_kernel, limits)
        except ControllerError:
            # A repeated creation_id answers with its session, whatever admission says now.
            existing = await self._by_creation_id(principal, spec.creation_id)
            if existing is None:
                raise
            return CreateOutcome(existing, created=False)
        session = new_session(
            principal, spec, per_kernel, depends_on, self._max_retries(spec, limits), deployment_id
        )
        cap = limits.max_pending_sessions
        done = await self._batcher.submit(
            CreateRequest(session, None if cap is None else PendingLimit(cap, limits.policy_name))
        )
        if done.inserted is None:
            return CreateOutcome(done.session_id, created=False)
        view = created_view(session, principal.user_name, done.inserted)
        self._announce(created_event(session.id, principal))
        return CreateOutcome(session.id, created=True, view=view)

    async def _admit(
        self, principal: Principal, spec: SessionCreateRequest, per_kernel: ResourceSlots, limits: OwnerLimits
    ) -> list[uuid.UUID]:
        """`admission` from the caches; only dependencies are read (the pending limit is counted
        in the create's batch)."""
        shapes, largest = await self._capacity.read(
            self._ctx.engine, spec.scaling_group, spec.image, largest=spec.cluster_size > 1
        )
        check_request(principal, spec, per_kernel, limits, shapes, largest)
        if not spec.depends_on:
            return []
        async with self._ctx.engine.connect() as conn:
            return await check_dependencies(conn, principal, spec.depends_on)

    async def dry_run(self, principal: Principal, spec: SessionCreateRequest) -> DryRunResult:
        """The same admission as `create_session`, then a placement over the current cluster.

        Runs in a transaction that is always rolled back: nothing is written, nothing hinted.
        """
        per_kernel = spec.per_kernel_slots()
        async with self._ctx.engine.connect() as conn:
            try:
                limits = await owner_limits(conn, principal)
                depends_on = await admit(conn, principal, spec, per_kernel, limits)
                return await dry_run(
                    conn,
                    DryRunRequest(
                        access_key=principal.access_key,
                        user_id=principal.user_id,
                        project_id=principal.project_id,
                        domain_name=principal.domain_name,
                        scaling_group=spec.scaling_group,
                        type=spec.type.value,
                        image=spec.image,
                        resources=per_kernel,
                        command=spec.command,
                        cluster_size=spec.cluster_size,
                        cluster_mode=spec.cluster_mode.value,
                        priority=spec.priority,
                        depends_on=tuple(depends_on),
                    ),
                )
            finally:
                await conn.rollback()

    async def _by_creation_id(self, principal: Principal, creation_id: str | None) -> uuid.UUID | None:
        if creation_id is None:
            return None
        async with self._ctx.engine.connect() as conn:
            found = await existing_sessions(conn, [(principal.access_key, creation_id)])
        return found.get((principal.access_key, creation_id))

    def _max_retries(self, spec: SessionCreateRequest, limits: OwnerLimits) -> int:
        """What the effective policy allows (session > project > domain > cluster), so that the
        session says "attempt 1 of M" from the start; the decision re-reads the defaults."""
        given = spec.retry_policy.model_dump(mode="json", exclude_unset=True) if spec.retry_policy else None
        try:
            return effective_policy(
                given,
                limits.project_retry_default,
                limits.domain_retry_default,
                self._cluster.retry_policy_default,
            ).max_retries
        except ValueError:  # a stored default no longer valid: the session's own word
            return spec.retry_policy.max_retries if spec.retry_policy else 0

    # -- terminate ----------------------------------------------------------------------------

    async def terminate_session(self, principal: Principal, session_id: uuid.UUID, forced: bool) -> None:
        """Idempotent: PENDING → CANCELLED, started → TERMINATING, terminal → nothing."""
        for _ in range(2):  # a stale guard means the status moved under us: re-read once
            async with self._ctx.engine.begin() as conn:
                row = (
                    await conn.execute(
                        select(Session.status, Session.status_info).where(
                            Session.id == session_id, visible(principal)
                        )
                    )
                ).first()
                if row is None:
                    raise NotFound(f"session {session_id} not found")
                transition = _terminate_transition(
                    session_id, SessionStatus(row.status), dict(row.status_info or {}), forced
                )
                if transition is None:
                    return
                applied = await apply_session_transitions(conn, [transition])
                if applied.applied:
                    await audit(
                        conn, principal.access_key, "session.terminate", str(session_id), {"forced": forced}
                    )
            if applied.applied:
                await publish(self._events, applied.events())
                self._hint(Hint.SCHEDULE)
                return
        log.warning("terminate stayed stale after a retry", session_id=str(session_id))

    # -- shared -------------------------------------------------------------------------------

    def _hint(self, name: str = CREATED) -> None:
        """Hint the schedulers, at most once per `HINT_COALESCE` seconds per process: a lone
        request's hint goes at once, a burst of requests becomes one hint per window, and the last
        request is never left without one (`Throttle`). A create wakes the placement lane only, as
        demand (`CREATED`); a terminate (`Hint.SCHEDULE`) every session lane."""
        self._hint_names.add(name)
        self._flushes.soon()

    def _announce(self, event: UserEvent) -> None:
        """Publish `event` with the others of the same `HINT_COALESCE` seconds (one pipeline)."""
        self._created.append(event)
        self._flushes.soon()

    async def _flush(self) -> None:
        """The hints first (they start the work), then the users' `session.created` events."""
        names, self._hint_names = self._hint_names, set()
        created, self._created = self._created, []
        if Hint.SCHEDULE in names:
            names = {Hint.SCHEDULE.value}
        try:
            for name in sorted(names):
                await self._ctx.hints.hint(name)
        except Exception:  # a lost hint costs one long-cycle interval, never the request
            log.warning("could not publish the schedule hint", exc_info=True)
        await publish(self._events, created)


def created_event(session_id: uuid.UUID, principal: Principal) -> UserEvent:
    """`session.created` (to PENDING): a new session, for the streams that list sessions."""
    return UserEvent(
        name="session.created", session_id=str(session_id), to_status="PENDING", owner=str(principal.user_id)
    )


def _terminate_transition(
    session_id: uuid.UUID, status: SessionStatus, info: dict[str, Any], forced: bool
) -> SessionTransition | None:
    """The one guarded move a terminate request makes from `status`, or None for nothing to do."""
    if status == SessionStatus.PENDING:
        return SessionTransition(
            session_id=session_id,
            expected=frozenset({SessionStatus.PENDING}),
            to_status=SessionStatus.CANCELLED,
            handler=TERMINATE_HANDLER,
            result=SchedulingResult.SUCCESS,
            kernel_to=KernelStatus.CANCELLED,
            status_info={
                "cause": FailureCause.USER_CANCELLED.value,
                "message": "cancelled by user before it was scheduled",
            },
            session_result=None,
            message="cancelled by user",
        )
    if status in STARTED:
        return SessionTransition(
            session_id=session_id,
            expected=STARTED,
            to_status=SessionStatus.TERMINATING,
            handler=TERMINATE_HANDLER,
            result=SchedulingResult.SUCCESS,
            status_info={
                "cause": FailureCause.USER_CANCELLED.value,
                "message": "terminated by user",
                "forced": forced,
            },
            session_result=None,
            message="terminate requested by user" + (" (forced)" if forced else ""),
        )
    if status == SessionStatus.TERMINATING and _requeue_victim(info):
        # a preemption victim on its way back to PENDING: the user's terminate ends it instead
        return SessionTransition(
            session_id=session_id,
            expected=frozenset({SessionStatus.TERMINATING}),
            to_status=None,
            handler=TERMINATE_HANDLER,
            result=SchedulingResult.SUCCESS,
            status_info={
                "cause": FailureCause.USER_CANCELLED.value,
                "message": "terminated by user",
                "forced": forced or bool(info.get("forced")),
            },
            message="terminate requested by user while requeued by preemption",
        )
    if status == SessionStatus.TERMINATING and forced and not info.get("forced"):
        return SessionTransition(
            session_id=session_id,
            expected=frozenset({SessionStatus.TERMINATING}),
            to_status=None,
            handler=TERMINATE_HANDLER,
            result=SchedulingResult.SUCCESS,
            status_info={"forced": True},
            message="forced termination requested by user",
        )
    return None


def _requeue_victim(info: dict[str, Any]) -> bool:
    """A preemption victim that will return to PENDING once its kernels ended."""
    return (
        info.get("cause") == FailureCause.PREEMPTED.value and info.get(PREEMPT_MODE) == PreemptionMode.REQUEUE
    )


def new_session(
    principal: Principal,
    spec: SessionCreateRequest,
    per_kernel: ResourceSlots,
    depends_on: list[uuid.UUID],
    max_retries: int,
    deployment_id: uuid.UUID | None,
) -> NewSession:
    """An admitted request as the create batch writes it."""
    session_id = uuid.uuid4()
    policy = spec.retry_policy
    # A deployment's replicas are never preemptible: the deployment keeps its capacity.
    preemptible = spec.effective_preemptible() and deployment_id is None
    return NewSession(
        id=session_id,
        access_key=principal.access_key,
        creation_id=spec.creation_id,
        columns={
            "name": spec.name or f"s-{session_id.hex[:8]}",
            "user_id": str(principal.user_id),
            "project_id": str(principal.project_id),
            "domain_name": principal.domain_name,
            "scaling_group": spec.scaling_group,
            "type": spec.type.value,
            "image": spec.image,
            "command": spec.command,
            "environ": spec.environ,
            "resources": per_kernel.to_json(),
            "cluster_size": spec.cluster_size,
            "cluster_mode": spec.cluster_mode.value,
            "priority": spec.priority,
            "preemptible": preemptible,
            "max_duration": spec.max_duration,
            "max_retries": max_retries,
            # As given: unset fields come from the defaults when a retry is decided.
            "retry_policy": policy.model_dump(mode="json", exclude_unset=True) if policy else None,
            "deployment_id": str(deployment_id) if deployment_id else None,
        },
        kernel_ids=tuple(uuid.uuid4() for _ in range(spec.cluster_size)),
        depends_on=tuple(depends_on),
        audit={
            "name": spec.name,
            "image": spec.image,
            "type": spec.type.value,
            "cluster_size": spec.cluster_size,
            "scaling_group": spec.scaling_group,
            "creation_id": spec.creation_id,
            "priority": spec.priority,
            "preemptible": preemptible,
            "max_duration": spec.max_duration,
        },
    )
