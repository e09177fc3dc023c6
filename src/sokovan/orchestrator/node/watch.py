"""Whether this manager has been reading the agents' reports without a break.

Heartbeats reach the database only through the event consumer. While it cannot read the stream
(Redis away) or cannot apply what it reads (PostgreSQL away), every agent looks silent to the node
lane although none is: the silence is the manager's own. The consumer reports each read (`report`);
the lane judges no agent while the last read failed or none got through for `STALE` seconds, and
after such a break it measures every agent's silence from when the reads resumed at most (as
Kubernetes' node controller treats every node as just seen when it starts watching). An agent whose
first report after the break is still on its way is thus not declared DOWN for the break's sake; one
that stays silent is, after a fresh timeout and grace.
"""

from __future__ import annotations

import datetime as dt

import structlog

log = structlog.get_logger(__name__)

# An idle stream still answers every read within a second (the consumer's block): this much
# without a good read and the reports are not reaching the manager.
STALE = 10.0


class Watch:
    def __init__(self, stale: float = STALE) -> None:
        self._stale = stale
        self._last: dt.datetime | None = None  # the last read that got through
        self._broken = True  # nothing read yet, or the last read failed
        self.since: dt.datetime | None = None  # when the reads last resumed

    def report(self, ok: bool, now: dt.datetime | None = None) -> None:
        """A read of the stream (and the applying of what it held) succeeded or failed."""
        now = now or dt.datetime.now(dt.UTC)
        if not ok:
            if not self._broken:
                log.warning("agents.reports_interrupted")
            self._broken = True
            return
        if self.blind(now):
            if self._last is not None:
                log.warning("agents.reports_resumed", after=round((now - self._last).total_seconds(), 1))
            self.since = now
        self._broken = False
        self._last = now

    def blind(self, now: dt.datetime) -> bool:
        """True while the agents' reports are not reaching this manager: judge no silence."""
        if self._broken or self._last is None:
            return True
        return (now - self._last).total_seconds() > self._stale

    def clamp(self, quiet: float, now: dt.datetime) -> float:
        """An agent's silence (`quiet` seconds), never counted from before the reads resumed."""
        if self.since is None:
            return quiet
        return min(quiet, (now - self.since).total_seconds())
