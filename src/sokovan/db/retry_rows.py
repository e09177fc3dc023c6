"""The retry lane's three reads, as SQL shared by its statements and the partial indexes that
serve them (`models.Session`, migration 0009).

The lane runs every long cycle and whenever a session ends. Its reads used to scan every session
kept (terminated ones stay for the retention's 30 days): a cycle's cost grew with the history of
the cluster, not with its work. Each read now names exactly the rows of a partial index, which
holds only the sessions still waiting for the lane: PostgreSQL uses such an index only when the
query's condition implies the index's, so both are written once, here, with their constants
spelled out (a bound parameter would hide them from the planner's proof).
"""

from __future__ import annotations

# Ended badly (failed, cancelled, or preempted) and no retry decision taken yet.
UNDECIDED = (
    "NOT (sessions.status_info ? 'retry') AND (sessions.status IN ('ERROR', 'CANCELLED')"
    " OR (sessions.status = 'TERMINATED' AND (sessions.status_info ->> 'cause') = 'PREEMPTED'))"
)
# A retry decided and not yet dispatched (its child not created).
SCHEDULED = (
    "((sessions.status_info -> 'retry') ->> 'decision') = 'scheduled'"
    " AND NOT ((sessions.status_info -> 'retry') ? 'child')"
)
# A retried session that ended well and has not been counted yet.
UNCOUNTED_SUCCESS = (
    "sessions.status = 'TERMINATED' AND sessions.result = 'SUCCESS' AND sessions.retry_count > 0"
    " AND NOT (sessions.status_info ? 'retry')"
)
