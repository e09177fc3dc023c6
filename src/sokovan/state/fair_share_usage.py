"""The cluster's fair-share view read from the database: the intervals the sessions ran in, the
owners of waiting sessions, the agents' capacity and the projects' and domains' weights, fed to
the pure `common.fair_share.fair_share_view`.

A session's interval starts when it entered RUNNING (its history row to RUNNING; the latest one
if it was requeued and ran again) and ends at `terminated_at`, or now while it is RUNNING or
TERMINATING; it holds `resources x cluster_size`. Only sessions still live or ended within
`HORIZON` half-lives are read: an older one's weight has decayed below 2^-HORIZON of what it was.

The placement lane needs the view every cycle: `FAIR_SHARE_USAGE` keeps the last one of the
process for a moment (`MAX_AGE` seconds, and never longer than a hundredth of a half-life, so that
a short half-life set for a test is not outrun by it). The API reads afresh (`read_fair_share`).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.fair_share import FairShareConfig, FairShareView, Owner, UsageInterval, fair_share_view
from sokovan.common.slots import ResourceSlots
from sokovan.common.types import AgentStatus, SessionStatus

log = structlog.get_logger(__name__)

HORIZON = 10  # half-lives
MAX_AGE = 5.0  # seconds a view is reused for, at most
# Agents whose capacity counts: those that hold or take kernels.
COUNTED = [s.value for s in (AgentStatus.READY, AgentStatus.DEGRADED, AgentStatus.DRAINING)]
LIVE = [SessionStatus.RUNNING.value, SessionStatus.TERMINATING.value]

# Sessions that ran, live or ended since :since, with the time they (last) entered RUNNING.
_RAN = text(
    """
    SELECT s.domain_name, CAST(s.project_id AS text), CAST(s.user_id AS text), s.resources,
           s.cluster_size, started.at, s.terminated_at
    FROM sessions s
    CROSS JOIN LATERAL (
        SELECT max(h.created_at) AS at FROM session_scheduling_history h
        WHERE h.session_id = s.id AND h.to_status = :running
    ) started
    WHERE (s.status = ANY(CAST(:live AS text[])) OR s.terminated_at >= :since)
      AND started.at IS NOT NULL
    """
)
_PENDING = text(
    "SELECT DISTINCT domain_name, CAST(project_id AS text), CAST(user_id AS text) FROM sessions"
    " WHERE status = :pending"
)
_CAPACITY = text("SELECT available_slots FROM agents WHERE status = ANY(CAST(:counted AS text[]))")
# Every domain's and project's weight, with the project's name (for the API).
_SCOPES = text(
    """
    SELECT 'domain', name, name, fair_share_weight FROM domains
    UNION ALL
    SELECT 'project', CAST(id AS text), name, fair_share_weight FROM projects
    """
)
_USERS = text("SELECT CAST(id AS text), name FROM users WHERE id = ANY(CAST(:ids AS uuid[]))")


@dataclass(frozen=True)
class FairShareRead:
    """The view at `now`, and the names of the projects and users its paths hold ids of."""

    view: FairShareView
    now: dt.datetime
    config: FairShareConfig
    names: dict[str, str] = field(default_factory=dict)

    def named(self, path: Sequence[str]) -> list[str]:
        return [self.names.get(part, part) for part in path]


async def read_fair_share(conn: AsyncConnection, config: FairShareConfig, now: dt.datetime) -> FairShareRead:
    """The view at `now` from the database, in five short statements."""
    since = now - dt.timedelta(seconds=config.half_life_seconds * HORIZON)
    params = {"running": SessionStatus.RUNNING.value, "live": LIVE, "since": since}
    intervals = [
        UsageInterval(domain, project, user, ResourceSlots.from_json(resources).scaled(size), start, end)
        for domain, project, user, resources, size, start, end in await conn.execute(_RAN, params)
    ]
    pending: list[Owner] = [
        (d, p, u) for d, p, u in await conn.execute(_PENDING, {"pending": SessionStatus.PENDING.value})
    ]
    capacity = ResourceSlots.total(
        ResourceSlots.from_json(slots) for (slots,) in await conn.execute(_CAPACITY, {"counted": COUNTED})
    )
    projects: dict[str, float] = {}
    domains: dict[str, float] = {}
    names: dict[str, str] = {}
    for scope, key, name, weight in await conn.execute(_SCOPES):
        if not (math.isfinite(weight) and weight > 0):
            log.warning("fair_share.invalid_weight", scope=scope, name=name, weight=weight)
        (domains if scope == "domain" else projects)[key] = weight
        names[key] = name
    users = sorted({iv.user for iv in intervals} | {u for _, _, u in pending})
    if users:
        names.update({key: name for key, name in await conn.execute(_USERS, {"ids": users})})
    view = fair_share_view(intervals, config, now, capacity, projects, domains, pending)
    return FairShareRead(view, now, config, names)


class FairShareUsage:
    """The last view read by this process, reused while it is young (see the module's docstring)."""

    def __init__(self) -> None:
        self._last: FairShareRead | None = None

    async def read(self, conn: AsyncConnection, config: FairShareConfig, now: dt.datetime) -> FairShareRead:
        last = self._last
        if last is not None and last.config == config:
            age = (now - last.now).total_seconds()
            if 0 <= age < min(MAX_AGE, config.half_life_seconds / 100):
                return last
        self._last = await read_fair_share(conn, config, now)
        return self._last


FAIR_SHARE_USAGE = FairShareUsage()
