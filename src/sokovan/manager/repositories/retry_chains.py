"""Sessions' retry chains for the API: a session's whole chain of attempts (its root first, then
the retries by depth), the attempt each session is, and the retry scheduled next."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

MAX_CHAIN = 1000  # a bound on retry-chain walks, against a (never expected) parent cycle


def retry_state(
    retry_count: int, max_retries: int, status_info: dict[str, Any] | None, has_child: bool
) -> str:
    """`attempt N of M` (N = retry_count + 1, M = 1 + max_retries); while the engine has a retry
    scheduled (`status_info.retry.decision == "scheduled"`) and the child does not exist yet,
    `; retry N+1 due at <due_at>` follows."""
    state = f"attempt {retry_count + 1} of {1 + max_retries}"
    decision = (status_info or {}).get("retry")
    if isinstance(decision, dict) and decision.get("decision") == "scheduled" and not has_child:
        due = decision.get("due_at")
        state += f"; retry {retry_count + 2} due at {due}" if due else f"; retry {retry_count + 2} pending"
    return state


_CHAIN_ROOTS = text(
    """
    WITH RECURSIVE up(start, cur, parent) AS (
        SELECT id, id, parent_session_id FROM sessions WHERE id = ANY(:ids)
        UNION ALL
        SELECT up.start, s.id, s.parent_session_id FROM up JOIN sessions s ON s.id = up.parent
    )
    SELECT start, cur FROM up WHERE parent IS NULL
    """
)
_CHAIN_MEMBERS = text(
    """
    WITH RECURSIVE down(root, cur, parent, depth, created_at) AS (
        SELECT id, id, parent_session_id, 0, created_at FROM sessions WHERE id = ANY(:roots)
        UNION ALL
        SELECT down.root, s.id, s.parent_session_id, down.depth + 1, s.created_at
        FROM down JOIN sessions s ON s.parent_session_id = down.cur
        WHERE down.depth < :max_depth
    )
    SELECT root, cur, parent FROM down ORDER BY root, depth, created_at
    """
)


async def retry_chains(
    conn: AsyncConnection, ids: Sequence[uuid.UUID]
) -> tuple[dict[uuid.UUID, list[str]], dict[uuid.UUID, str]]:
    """For each id: the whole chain (root first, then children by depth) and its next attempt.

    Two fixed statements (prepared once), whatever the number of ids."""
    roots = {r.start: r.cur for r in await conn.execute(_CHAIN_ROOTS, {"ids": list(ids)})}
    members: dict[uuid.UUID, list[str]] = defaultdict(list)
    children: dict[uuid.UUID, str] = {}
    rows = await conn.execute(_CHAIN_MEMBERS, {"roots": list(set(roots.values())), "max_depth": MAX_CHAIN})
    for r in rows:
        members[r.root].append(str(r.cur))
        if r.parent is not None:
            children[r.parent] = str(r.cur)  # the newest child wins if there were several
    return {start: members[root] for start, root in roots.items()}, children
