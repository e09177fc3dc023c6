"""Connections lost to silence: given up at once, and their server sessions ended.

A connection whose peer went silent (a failover, a firewall or NAT that lost its state, a
partition) is noticed only by a statement's timeout (`engine.COMMAND_TIMEOUT`). Three things
follow from one such timeout, and none of them should wait another timeout:

- **The connection is given up at once.** A statement that timed out leaves asyncpg waiting for its
  cancellation to be acknowledged; the transaction's ROLLBACK (or the pool's reset) would wait for
  it up to the timeout again, and the lane or request behind it with them. The hook marks the
  error a disconnect, so SQLAlchemy terminates the connection (no ROLLBACK on a silent socket).
- **The pool's other connections are recycled.** Whatever silenced one most likely silenced all
  that were open then: SQLAlchemy's pool invalidation replaces each as it is next checked out,
  instead of each waiting out a timeout in turn. A refused or reset connection needs none of this
  hook: SQLAlchemy sees those as a disconnect by itself, but a timeout is no DBAPI error to it.
- **Its server session is ended.** The server cannot tell a silent client from a slow one: the
  session lives on, and if it was inside a transaction it keeps that transaction's row locks
  until `idle_in_transaction_session_timeout` (a minute), so every lane that needs those rows
  (the agents a placement was binding, say) would wait for it. Each connection remembers its
  backend (pid and start time, read once when it is opened); after a timeout a fresh connection
  ends that backend (`pg_terminate_backend`), only if it is still the same one, and its locks
  are free at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from sqlalchemy import text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry

from sokovan.common.supervise import describe

log = structlog.get_logger(__name__)

BACKEND = "sokovan.backend"  # the pool entry's `info` key: (pid, backend_start)
OWN_BACKEND = (
    "SELECT pg_backend_pid() AS pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
)
END_BACKEND = text(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = :pid AND backend_start = :started"
)
_ENDING: set[asyncio.Task[bool]] = set()  # the terminations under way (a task needs a reference)


def remember_backend(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    """The pool's `connect` event: note which server session this connection is."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(OWN_BACKEND)
        row = cursor.fetchone()
    finally:
        cursor.close()
    if row is not None:
        record.info[BACKEND] = (row[0], row[1])


def give_up_silent(engine: AsyncEngine, ctx: ExceptionContext) -> None:
    """The engine's `handle_error` event: a statement that timed out gives its connection up at
    once, recycles the pool, and has its server session ended (see the module's docstring)."""
    if not isinstance(ctx.original_exception, TimeoutError) or ctx.connection is None:
        return
    try:
        backend = ctx.connection.info.get(BACKEND)
    except Exception:  # no connection to ask: nothing to end
        backend = None
    ctx.is_disconnect = True
    ctx.invalidate_pool_on_disconnect = True
    log.warning("db.connection_given_up", why="a statement timed out", backend=backend and backend[0])
    if backend is not None:
        task = asyncio.get_running_loop().create_task(end_backend(engine, *backend))
        _ENDING.add(task)
        task.add_done_callback(_ENDING.discard)


async def end_backend(engine: AsyncEngine, pid: int, started: object) -> bool:
    """End the server session `pid` if it is still the one that started at `started`; False when it
    was gone already or PostgreSQL could not be asked (it ends it itself, later)."""
    try:
        async with engine.connect() as conn:
            ended = bool((await conn.execute(END_BACKEND, {"pid": pid, "started": started})).scalar())
    except Exception as exc:
        log.info("db.silent_backend_not_ended", pid=pid, error=describe(exc))
        return False
    if ended:
        log.warning("db.silent_backend_ended", pid=pid)
    return ended
