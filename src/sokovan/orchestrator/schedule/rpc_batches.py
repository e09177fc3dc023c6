"""Batched calls to one agent, split so that no request body outgrows what the agent reads.

The kernels a cycle sends to one agent go in calls of whole sessions whose JSON body stays under
`BATCH_BODY_LIMIT` (half of the agent's `MAX_BODY`): `pack` plans them, first come first packed. A
session whose own kernels exceed the limit is never sent; it fails alone. Should an agent still
answer 413 (it reads less than this manager thinks), the call is split in two halves of sessions
and each is sent again (`send_bisecting`), down to the one session that is too large, which fails
alone. The calls to one agent go one after another.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from sokovan.common.rpc import BATCH_BODY_LIMIT, RPCError

K = TypeVar("K", bound=Hashable)
BODY_OVERHEAD = 64  # the request's own JSON around its list of kernels, with room to spare


@dataclass
class Packed(Generic[K]):
    """Calls to make (each a list of sessions, in their order) and the sessions too large for any."""

    calls: list[list[K]] = field(default_factory=list)
    oversized: dict[K, int] = field(default_factory=dict)  # session → the bytes its kernels take


def pack(sizes: Sequence[tuple[K, int]], limit: int = BATCH_BODY_LIMIT) -> Packed[K]:
    """Sessions with the bytes their kernels take in a body (each spec's JSON and its comma), packed
    in order into calls whose body stays within `limit`."""
    out: Packed[K] = Packed()
    current: list[K] = []
    used = BODY_OVERHEAD
    for key, size in sizes:
        if BODY_OVERHEAD + size > limit:
            out.oversized[key] = size
            continue
        if current and used + size > limit:
            out.calls.append(current)
            current, used = [], BODY_OVERHEAD
        current.append(key)
        used += size
    if current:
        out.calls.append(current)
    return out


def too_large(agent_id: str, size: int, limit: int = BATCH_BODY_LIMIT) -> str:
    return (
        f"the session's kernels for agent {agent_id} take {size:,} bytes of request body, over the "
        f"limit of {limit:,} bytes for one call"
    )


async def send_bisecting(
    agent_id: str, keys: list[K], send: Callable[[list[K]], Awaitable[object]]
) -> dict[K, str]:
    """Send `keys` in one call; on 413, each half again. The sessions that failed, with why (a
    call that fails otherwise fails all its sessions with its error)."""
    try:
        await send(keys)
        return {}
    except RPCError as exc:
        if exc.status != 413:
            return dict.fromkeys(keys, str(exc))
        if len(keys) == 1:
            return {keys[0]: f"agent {agent_id} refused the session's kernels as too large (HTTP 413)"}
    except Exception as exc:
        return dict.fromkeys(keys, f"agent {agent_id}: {exc!r}")
    middle = len(keys) // 2
    failed = await send_bisecting(agent_id, keys[:middle], send)
    failed.update(await send_bisecting(agent_id, keys[middle:], send))
    return failed
