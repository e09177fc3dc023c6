"""Routes as an entity of the coordinator spine: their table, their events, and the one helper
other coordinators use to take routes out of service (scaling down, destroying)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher, publish
from sokovan.common.metrics import ROUTE_TRANSITIONS
from sokovan.common.types import HandlerOutcome, RouteStatus
from sokovan.db.models import Route, RouteHistory
from sokovan.orchestrator.spine.outcome import OutcomeKind
from sokovan.state.entity_writes import EntityTable, EntityTransition, apply_entity_transitions
from sokovan.state.serving_reads import RouteRow, fetch_routes

ROUTES = EntityTable(
    model=Route,
    history=RouteHistory,
    history_fk="route_id",
    ended_column="terminated_at",
    terminal=frozenset({RouteStatus.TERMINATED.value}),
)


def route_event(row: RouteRow, src: str, dst: str) -> UserEvent:
    return UserEvent(
        name="route.status",
        deployment_id=str(row.deployment_id),
        route_id=str(row.id),
        session_id=str(row.session_id) if row.session_id else None,
        from_status=src,
        to_status=dst,
        owner=str(row.owner),
    )


def route_kind() -> OutcomeKind[RouteRow, RouteStatus]:
    return OutcomeKind("route", ROUTES, fetch_routes, route_event, ROUTE_TRANSITIONS)


async def take_out_of_service(
    engine: AsyncEngine,
    events: UserEventPublisher | None,
    routes: Sequence[tuple[RouteRow, str]],
    handler: str,
) -> int:
    """Move `routes` (each with why) to TERMINATING in one transaction, guarded: only from a live
    or failed status; the route coordinator then ends their sessions. Returns how many moved."""
    if not routes:
        return 0
    expected = frozenset(s.value for s in RouteStatus.live() | {RouteStatus.FAILED_TO_START})
    transitions = [
        EntityTransition(r.id, expected, RouteStatus.TERMINATING.value, handler, HandlerOutcome.SUCCESS, why)
        for r, why in routes
    ]
    async with engine.begin() as conn:
        applied = await apply_entity_transitions(conn, ROUTES, transitions)
    by_id = {r.id: r for r, _ in routes}
    for src, dst in applied.moved.values():
        ROUTE_TRANSITIONS.labels(from_status=src, to_status=dst).inc()
    await publish(events, [route_event(by_id[rid], src, dst) for rid, (src, dst) in applied.moved.items()])
    return len(applied.moved)
