"""The waiting sessions that carry a preemption nomination, as SQL shared by placement's read
(`provisioner.loader`) and the partial index that serves it (`models.Session`, migration 0019).

Placement reads them every cycle. Through the index of statuses, that read fetched every PENDING
session of the group to test its status_info: with thousands waiting, milliseconds a cycle for
a handful of nominees at most. PostgreSQL uses a partial index only when the query's condition
implies the index's, so the condition is written once, here, with its constants spelled out (a
bound parameter would hide them from the planner's proof, in a prepared statement's generic plan
too).
"""

from __future__ import annotations

from sokovan.common.preemption import NOMINATED_AGENTS
from sokovan.common.types import SessionStatus

NOMINATED = (
    f"sessions.status = '{SessionStatus.PENDING.value}' AND sessions.status_info ? '{NOMINATED_AGENTS}'"
)
