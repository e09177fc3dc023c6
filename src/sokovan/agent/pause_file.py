"""A hollow fleet's pause file: the agents that are silent for now (`--pause-file FILE`).

The fleet reads the file about once a second (again only when its size or modification time
changed); every line names one agent id (blank lines and `#` comments are skipped). A listed agent
sends no heartbeats until its line is removed; everything else about it goes on (its kernel timers
run, its kernel events are published, its RPC is served). So a test silences any share of a fleet
at once, as if those nodes had lost their link to the manager, and brings them back by editing the
file. A missing or unreadable file pauses nobody.
"""

from __future__ import annotations

import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

REREAD = 1.0  # seconds between looks at the file


class PauseFile:
    """The set of paused agent ids, from `path` (None: nobody is ever paused)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.paused: frozenset[str] = frozenset()
        self._seen: tuple[int, int] | None = None
        self._checked = float("-inf")

    def refresh(self) -> frozenset[str]:
        """The paused ids now, looking at the file when REREAD seconds have passed."""
        now = time.monotonic()
        if self.path is None or now - self._checked < REREAD:
            return self.paused
        self._checked = now
        try:
            stat = self.path.stat()
            seen = (stat.st_mtime_ns, stat.st_size)
            if seen != self._seen:
                self._update(read_ids(self.path))
                self._seen = seen
        except OSError:
            self._seen = None
            self._update(frozenset())
        return self.paused

    def _update(self, paused: frozenset[str]) -> None:
        if paused != self.paused:
            log.info("hollow.paused", paused=len(paused), resumed=sorted(self.paused - paused)[:20])
            self.paused = paused


def read_ids(path: Path) -> frozenset[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return frozenset(line for line in lines if line)
