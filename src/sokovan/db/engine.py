"""Engine and session factory for the manager's PostgreSQL."""

from __future__ import annotations

import functools

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from sokovan.common.json_text import loads as json_loads
from sokovan.db import stranded

CONNECT_TIMEOUT = 5.0  # seconds to open a connection (asyncpg's own default is 60)
# The longest any one statement may take (asyncpg's default: no limit). A PostgreSQL that drops
# packets instead of refusing them would otherwise hold a lane's statement until TCP gives up
# (about 15 minutes); past this the statement is cancelled, its connection invalidated, and the
# lane retries on its next cycle. API requests have their own, shorter deadline (api.deadline).
COMMAND_TIMEOUT = 30.0
# A connection lost to silence may live on in the server, holding the row locks of the transaction
# it was in. The manager ends such a session itself once a statement on it times out
# (`db.stranded`); failing that, the server ends it after this long idle in its transaction (ms).
SERVER_SETTINGS = {"idle_in_transaction_session_timeout": "60000"}


def make_engine(
    url: str, *, pool_size: int = 10, max_overflow: int = 10, command_timeout: float = COMMAND_TIMEOUT
) -> AsyncEngine:
    """No `pool_pre_ping` (a round trip per checkout: a tenth of a busy manager's CPU): when a
    statement finds its connection dead (PostgreSQL restarted), SQLAlchemy invalidates the whole
    pool, so one statement fails per outage, not one per pooled connection, and the callers (a
    lane's next cycle, the API's 503) ride that out. A statement that times out does the same, and
    has its server session ended (`db.stranded`). `hide_parameters`: errors and logs never carry
    bound values (a session's environ, a keypair's secret)."""
    engine = create_async_engine(
        url,
        pool_size=pool_size,
        max_overflow=max_overflow,
        pool_recycle=1800,
        hide_parameters=True,
        json_deserializer=json_loads,  # msgspec's (`common.json_text`)
        connect_args={
            "timeout": CONNECT_TIMEOUT,
            "command_timeout": command_timeout,
            "server_settings": SERVER_SETTINGS,
        },
    )
    event.listen(engine.sync_engine, "connect", stranded.remember_backend)
    event.listen(engine.sync_engine, "handle_error", functools.partial(stranded.give_up_silent, engine))
    return engine


def autocommit(engine: AsyncEngine) -> AsyncEngine:
    """`engine` (the same pool) with every statement its own transaction: for reads that need no
    transaction around them. A read through `engine.connect()` costs a BEGIN and a ROLLBACK round
    trip besides its statements; under READ COMMITTED each statement sees its own snapshot either
    way, so a read of several statements gains nothing from them."""
    return engine.execution_options(isolation_level="AUTOCOMMIT")
