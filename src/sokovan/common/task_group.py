"""Tasks that live and end together: `run_together` runs coroutines as one `asyncio.TaskGroup`.

When one raises, the others are cancelled, and awaited, before the error goes on; so a supervisor
that restarts the caller (`common.supervise`) starts one set of them again, never a second set
beside the orphans of the first (what `asyncio.gather` leaves running). The error is raised as
itself, not as an `ExceptionGroup`, so that the supervisor still tells an outage or a `Fatal` from
any other error; when several fail together, a `Fatal` among them (else the first) is raised and
the others are logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable
from typing import Any

import structlog

from sokovan.common.supervise import Fatal, describe

log = structlog.get_logger(__name__)


async def run_together(named: Iterable[tuple[str, Coroutine[Any, Any, None]]]) -> None:
    """Run every `(task name, coroutine)` until all have returned, or until one raises."""
    try:
        async with asyncio.TaskGroup() as group:
            for name, coro in named:
                group.create_task(coro, name=name)
    except BaseExceptionGroup as failed:
        errors = list(failed.exceptions)
        first = next((e for e in errors if isinstance(e, Fatal)), errors[0])
        for other in errors:
            if other is not first:
                log.warning("task.failed_together", error=describe(other))
        raise first from None
