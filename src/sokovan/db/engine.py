"""Engine and session factory for the manager's PostgreSQL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

CONNECT_TIMEOUT = 5.0  # seconds to open a connection (asyncpg's own default is 60)


def make_engine(url: str, *, pool_size: int = 10, max_overflow: int = 10) -> AsyncEngine:
    """No `pool_pre_ping` (a round trip per checkout: a tenth of a busy manager's CPU): when a
    statement finds its connection dead (PostgreSQL restarted), SQLAlchemy invalidates the whole
    pool, so one statement fails per outage, not one per pooled connection, and the callers (a
    lane's next cycle, the API's 503) ride that out. `hide_parameters`: errors and logs never
    carry bound values (a session's environ, a keypair's secret)."""
    return create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        hide_parameters=True,
        connect_args={"timeout": CONNECT_TIMEOUT},
    )


def autocommit(engine: AsyncEngine) -> AsyncEngine:
    """`engine` (the same pool) with every statement its own transaction: for reads that need no
    transaction around them. A read through `engine.connect()` costs a BEGIN and a ROLLBACK round
    trip besides its statements; under READ COMMITTED each statement sees its own snapshot either
    way, so a read of several statements gains nothing from them."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")
