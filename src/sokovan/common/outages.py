"""Which errors mean "a service is away" (PostgreSQL, Redis or etcd unreachable), as opposed to a bug.

One answer for everyone who must tell them apart: the API answers the first with 503 and
`Retry-After` (never a 500), a supervised background task retries it forever with backoff, and a
daemon that starts while a service is away waits for it. Anything else is a fault of its own.
"""

from __future__ import annotations

import asyncio

import aetcd.exceptions as etcd_errors
import asyncpg.exceptions as pg_errors  # type: ignore[import-untyped]
import redis.exceptions as redis_errors
from sqlalchemy import exc as sa_errors

# The driver-level errors of a connection that failed, was refused or broke.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,  # ConnectionError, ConnectionRefusedError, socket errors
    TimeoutError,  # also asyncio.TimeoutError
    redis_errors.ConnectionError,  # also MaxConnectionsError
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    pg_errors.PostgresConnectionError,
    pg_errors.OperatorInterventionError,  # shutting down, cannot connect now
    pg_errors.TooManyConnectionsError,  # the server takes no more clients for now
    pg_errors.InterfaceError,  # e.g. the connection was closed in the middle of an operation
    etcd_errors.ConnectionFailedError,
    etcd_errors.ConnectionTimeoutError,
    sa_errors.DisconnectionError,
)
# OSErrors of files, not of connections: a bug or a misconfiguration, not an outage.
_FILE_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
)
# gRPC status codes (of an etcd watch stream, which aetcd does not translate) that mean "away".
_GRPC_UNAVAILABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})
_CHAIN_LIMIT = 10


def is_outage(exc: BaseException) -> bool:
    """True when `exc`, or an error it was raised from, says a service could not be reached."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < _CHAIN_LIMIT:
        if _is_connection_error(current):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


def _is_connection_error(exc: BaseException) -> bool:
    if isinstance(exc, asyncio.CancelledError):
        return False
    if isinstance(exc, _FILE_ERRORS):
        return False
    if isinstance(exc, _CONNECTION_ERRORS):
        return True
    if isinstance(exc, sa_errors.DBAPIError):  # else its cause (the driver's error) decides
        return bool(exc.connection_invalidated)
    return _grpc_code(exc) in _GRPC_UNAVAILABLE


def _grpc_code(exc: BaseException) -> str | None:
    """The status code's name of a gRPC error (grpc has no type stubs: read it by duck typing)."""
    code = getattr(exc, "code", None)
    if type(exc).__name__ != "AioRpcError" or not callable(code):
        return None
    name = getattr(code(), "name", None)
    return name if isinstance(name, str) else None
