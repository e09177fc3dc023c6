"""The replacement backoff a deployment shares between failed starts and evictions.

A broken definition must not spin: after `BURST` replicas of a deployment failed to start or were
evicted (UNHEALTHY past their grace) within `WINDOW` seconds, no replica is added until
`backoff(failures)` seconds have passed since the latest of them (10 s, doubling, at most 5
minutes), and then at most `BURST` at a time, until the failures age out of the window. The
deadline is written on the deployment (`backoff_until`, shown by `deployment info`) and in its
status_info, with why.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import RouteStatus
from sokovan.db.models import Deployment, Route, RouteHistory
from sokovan.state.serving_reads import DeploymentRow

BURST = 3
WINDOW = 300.0
EVICTION_HANDLER = "RouteEviction"


def backoff(failures: int) -> float:
    """Seconds to wait after the latest failure, given the failures within the window."""
    if failures < BURST:
        return 0.0
    return float(min(10 * 2 ** (failures - BURST), 300))


@dataclass(frozen=True)
class Replacements:
    """What a deployment may add now: `allowed` replicas (None: as many as it needs), or nothing
    until `until`, with `why`."""

    failures: int
    allowed: int | None
    until: dt.datetime | None = None
    why: str | None = None


async def replacements(
    engine: AsyncEngine, rows: Sequence[DeploymentRow], now: dt.datetime
) -> dict[uuid.UUID, Replacements]:
    """Per deployment in `rows`: how many replicas it may add now."""
    failed = await _failures(engine, [d.id for d in rows], now)
    out: dict[uuid.UUID, Replacements] = {}
    for d in rows:
        count, latest = failed.get(d.id, (0, None))
        wait = backoff(count)
        if latest is None or wait <= 0:
            out[d.id] = Replacements(count, None)
            continue
        until = latest + dt.timedelta(seconds=wait)
        if now < until:
            why = (
                f"{count} replicas failed to start or were evicted in the last {WINDOW:.0f} s;"
                f" next replica after {until.isoformat(timespec='seconds')}"
            )
            out[d.id] = Replacements(count, 0, until, why)
        else:
            out[d.id] = Replacements(count, BURST)
    return out


async def _failures(
    engine: AsyncEngine, ids: Iterable[uuid.UUID], now: dt.datetime
) -> dict[uuid.UUID, tuple[int, dt.datetime | None]]:
    wanted = list(ids)
    if not wanted:
        return {}
    failed_start = and_(
        RouteHistory.to_status == RouteStatus.FAILED_TO_START.value,
        RouteHistory.from_status != RouteStatus.FAILED_TO_START.value,
    )
    evicted = and_(
        RouteHistory.handler == EVICTION_HANDLER,
        RouteHistory.to_status == RouteStatus.TERMINATING.value,
    )
    async with engine.connect() as conn:
        found = await conn.execute(
            select(Route.deployment_id, func.count(), func.max(RouteHistory.created_at))
            .join(RouteHistory, RouteHistory.route_id == Route.id)
            .where(
                Route.deployment_id.in_(wanted),
                or_(failed_start, evicted),
                RouteHistory.created_at > now - dt.timedelta(seconds=WINDOW),
            )
            .group_by(Route.deployment_id)
        )
        return {r[0]: (int(r[1]), r[2]) for r in found}


async def record(
    engine: AsyncEngine, rows: Sequence[DeploymentRow], until: Mapping[uuid.UUID, dt.datetime | None]
) -> None:
    """Write `backoff_until` where it changed (None clears it), on the deployment and in its
    status_info."""
    changed = []
    for d in rows:
        if d.id not in until or d.backoff_until == until[d.id]:
            continue
        when = until[d.id]
        note = {"backoff_until": when.isoformat() if when is not None else None}
        changed.append({"b_id": d.id, "b_until": when, "b_note": note})
    if not changed:
        return
    async with engine.begin() as conn:
        await conn.execute(
            update(Deployment)
            .where(Deployment.id == bindparam("b_id"))
            .values(
                backoff_until=bindparam("b_until"),
                status_info=Deployment.status_info.op("||")(bindparam("b_note", type_=JSONB)),
            )
            .execution_options(synchronize_session=False),
            changed,
        )
