"""Census: the gauges of what is in the cluster now, counted from PostgreSQL.

- `sokovan_sessions{status}`: sessions in each live status (terminal ones only grow until
  retention removes them; how fast they end is in `sokovan_session_transitions_total`);
- `sokovan_session_pending_oldest_seconds`: how long the longest-waiting PENDING session has been
  PENDING (since its `status_changed_at`, the clock its pending timeout runs on; 0 when none is);
- `sokovan_deployments{status}`: deployments in each lifecycle status but DESTROYED.

One aggregate per table, at most every `every` seconds, from the maintenance lane: like every
gauge the orchestrator keeps (`sokovan_agents`, `sokovan_route_replicas`), it is published by the
manager that holds the lane. Every status of the enum is set, so a status that empties reads 0
rather than its last count.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.metrics import DEPLOYMENTS_BY_STATUS, SESSION_PENDING_OLDEST, SESSIONS_BY_STATUS
from sokovan.common.types import EndpointLifecycle, SessionStatus
from sokovan.db.engine import autocommit
from sokovan.db.models import Deployment, Session

EVERY = 5.0  # seconds between counts: the lane cycles every long-cycle interval and on hints

_LIVE_SESSIONS = sorted(SessionStatus.non_terminal())
_LIVE_DEPLOYMENTS = sorted(set(EndpointLifecycle) - {EndpointLifecycle.DESTROYED})


class Census:
    def __init__(
        self, engine: AsyncEngine, every: float = EVERY, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine  # it only counts, through `autocommit`: no transaction around them
        self._every = every
        self._clock = clock
        self._next_run = 0.0

    async def maybe_run(self) -> bool:
        """Count when the last count is `every` seconds old; whether it counted."""
        if self._clock() < self._next_run:
            return False
        await self.run()
        self._next_run = self._clock() + self._every
        return True

    async def run(self, now: dt.datetime | None = None) -> None:
        pending = SessionStatus.PENDING.value
        sessions = select(Session.status, func.count(), func.min(Session.status_changed_at)).where(
            Session.status.in_([s.value for s in _LIVE_SESSIONS])
        )
        deployments = select(Deployment.status, func.count()).where(
            Deployment.status.in_([s.value for s in _LIVE_DEPLOYMENTS])
        )
        async with autocommit(self._engine).connect() as conn:
            by_session = {
                r[0]: (int(r[1]), r[2]) for r in await conn.execute(sessions.group_by(Session.status))
            }
            by_deployment = {
                r[0]: int(r[1]) for r in await conn.execute(deployments.group_by(Deployment.status))
            }
        for status in _LIVE_SESSIONS:
            SESSIONS_BY_STATUS.labels(status=status.value).set(by_session.get(status.value, (0, None))[0])
        oldest = by_session.get(pending, (0, None))[1]
        now = now or dt.datetime.now(dt.UTC)
        SESSION_PENDING_OLDEST.set(max(0.0, (now - oldest).total_seconds()) if oldest else 0.0)
        for lifecycle in _LIVE_DEPLOYMENTS:
            DEPLOYMENTS_BY_STATUS.labels(status=lifecycle.value).set(by_deployment.get(lifecycle.value, 0))
