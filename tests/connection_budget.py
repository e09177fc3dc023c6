"""One test module at a time may open many PostgreSQL connections, across pytest-xdist workers.

Why this exists: `make test` runs pytest in two processes against one PostgreSQL server, whose
`max_connections` is 100 by default. A module that starts three managers opens about 65
connections at its peak (three pools of up to 20, the test's own engines); two such modules at
once were refused with "sorry, too many clients already" (CI, stop 47). The other modules that
start managers stay at 23 or under (sampled from `pg_stat_activity`, one module at a time), so
one heavy module plus anything else fits.

A module marked `many_connections` holds an exclusive `flock` on a file that all workers of one run
share (named by xdist's run id) for as long as its module-scoped fixtures live. The kernel releases
the lock when a worker dies, so a crashed worker cannot hold the others up.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

MARK = "many_connections"


def lock_path() -> Path | None:
    """The lock file shared by this run's workers; None outside pytest-xdist (one process)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return None
    return Path(tempfile.gettempdir()) / f"sokovan-tests-{run}.{MARK}.lock"


@contextlib.contextmanager
def held(path: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the exclusive lock on `path` (created if missing); BlockingIOError when `wait` is
    False and another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
