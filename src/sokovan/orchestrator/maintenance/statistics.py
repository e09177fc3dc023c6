"""Fresh planner statistics for the tables the lanes read by status.

PostgreSQL's autovacuum analyzes a table once a tenth of it changed, but it looks only every
`autovacuum_naptime` (a minute by default). A burst that creates or moves thousands of sessions in
a few seconds leaves the planner believing that a status holds a handful of rows; it then joins
the kernels by a nested loop that scans them once per session, and the placement read and the
promotions that follow agents' events take hundreds of milliseconds instead of a few (measured on
the 10,000-session burst of `make bench`: with this, PostgreSQL used 0.48 of a core instead of
0.86 while the burst started, and all 10,000 sessions were RUNNING 19 s after the release instead
of 28 s).

So the maintenance lane looks at `pg_stat_user_tables` every cycle (one cheap read) and analyzes
`sessions` and `kernels` when more of their rows changed since their last analyze than
`FRACTION` of them, and at least `AT_LEAST`. An ANALYZE waits at most `LOCK_TIMEOUT` for its lock
(autovacuum may hold it: then it has the same work in hand), and a table that could not be
analyzed is tried again next cycle. (Analyzing needs the tables' owner, which the manager is: it
runs the migrations. PostgreSQL skips a table it may not analyze with a warning, not an error.)
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.engine import autocommit

log = structlog.get_logger(__name__)

TABLES = ("sessions", "kernels")
FRACTION = 0.2
AT_LEAST = 500
LOCK_TIMEOUT = "200ms"
_LOCK_NOT_AVAILABLE = "55P03"

_CHANGED = text(
    "SELECT relname, n_mod_since_analyze, n_live_tup FROM pg_stat_user_tables "
    "WHERE schemaname = current_schema() AND relname = ANY(CAST(:tables AS text[]))"
)


def stale(changed: int, rows: int, fraction: float = FRACTION, at_least: int = AT_LEAST) -> bool:
    """Whether `changed` rows since the last analyze, of `rows`, make the statistics stale."""
    return changed >= max(at_least, fraction * rows)


class FreshStatistics:
    def __init__(self, engine: AsyncEngine, tables: Sequence[str] = TABLES) -> None:
        self._engine = engine  # the look through `autocommit`; ANALYZE under SET LOCAL, a transaction
        self._tables = list(tables)

    async def run(self) -> list[str]:
        """Analyze the tables whose statistics are stale; the ones analyzed."""
        async with autocommit(self._engine).connect() as conn:
            rows = (await conn.execute(_CHANGED, {"tables": self._tables})).all()
        due = [name for name, changed, live in rows if stale(int(changed or 0), int(live or 0))]
        return [name for name in sorted(due) if await self._analyze(name)]

    async def _analyze(self, table: str) -> bool:
        try:
            async with self._engine.begin() as conn:
                await conn.execute(text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'"))
                await conn.execute(text(f'ANALYZE "{table}"'))
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
                return False  # autovacuum is at it: next cycle
            raise
        log.debug("maintenance.analyzed", table=table)
        return True
