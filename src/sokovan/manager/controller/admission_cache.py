"""What admission reads, kept in memory: a create that hits these caches costs no query here.

- `CapacityCache`: a scaling group's allowed session types and the capacity shapes of its agents
  that offer an image (hold it, or may pull it from its registry: `common.image_refs`), and the
  size of the largest group (what *could ever* fit; what fits now is the scheduler's business).
  Only positive answers are kept, so a new group or a newly offered image is seen at once.
- `OwnerLimitsCache`: an owner's limits (keypair policy, project and domain quotas, the pending
  limit, retry defaults).

Both are kept for a few seconds and dropped at once when an admin changes a policy, a project, a
domain or a scaling group: the API bumps the manager's `CacheEpoch` and hints every other manager,
which bumps its own (`ManagerContext.admission_changed`). The pending limit's count is never
cached: the create batch counts it under the owner's lock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import Text, bindparam, func, select
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.image_refs import image_keys
from sokovan.common.slots import ResourceSlots
from sokovan.db.models import Agent, ScalingGroup
from sokovan.manager.context import CacheEpoch
from sokovan.manager.controller.feasibility import AgentCapacity
from sokovan.manager.repositories.tenancy import OwnerLimits, Principal, owner_limits

T = TypeVar("T")
# (allowed session types, capacity shapes offering the image); None: no such scaling group
GroupShapes = tuple[list[str], list[AgentCapacity]]


class _Epoched:
    """Entries kept for `ttl` seconds and dropped whenever `epoch` moves on; concurrent misses of
    one key share one read (a burst of creates on a cold cache reads once, not once each)."""

    def __init__(self, ttl: float, epoch: CacheEpoch | None) -> None:
        self._ttl = ttl
        self._epoch = epoch
        self._seen = epoch.value if epoch else 0
        self._reads: dict[object, asyncio.Task[Any]] = {}

    async def _once(self, key: object, read: Callable[[], Awaitable[T]]) -> T:
        task = self._reads.get(key)
        if task is None:
            task = asyncio.ensure_future(read())
            self._reads[key] = task
            task.add_done_callback(lambda _: self._reads.pop(key, None))
        result: T = await asyncio.shield(task)
        return result

    def _current(self) -> int:
        return self._epoch.value if self._epoch else 0

    def _fresh(self) -> bool:
        """False (and the caller clears its entries) when the epoch moved since the last look."""
        if self._epoch is None or self._epoch.value == self._seen:
            return True
        self._seen = self._epoch.value
        return False

    def _expiry(self) -> float:
        return time.monotonic() + self._ttl


class CapacityCache(_Epoched):
    def __init__(self, ttl: float = 2.0, epoch: CacheEpoch | None = None) -> None:
        super().__init__(ttl, epoch)
        self._items: dict[tuple[str, str], tuple[float, GroupShapes]] = {}
        self._largest: tuple[float, int] = (0.0, 0)

    def _check_epoch(self) -> None:
        if not self._fresh():
            self._items.clear()
            self._largest = (0.0, 0)

    def peek(self, group: str, image: str) -> GroupShapes | None:
        """The cached answer for (group, image), or None when there is none (or it expired)."""
        self._check_epoch()
        hit = self._items.get((group, image))
        return hit[1] if hit is not None and hit[0] > time.monotonic() else None

    def peek_largest(self) -> int | None:
        self._check_epoch()
        expires, count = self._largest
        return count if expires > time.monotonic() else None

    async def largest_group(self, conn: AsyncConnection) -> int:
        """How many agents (of any status) the scaling group with the most of them has."""
        count = self.peek_largest()
        if count is None:
            epoch = self._current()
            count = int(await conn.scalar(_LARGEST_GROUP) or 0)
            if self._current() == epoch:
                self._largest = (self._expiry(), count)
        return count

    async def lookup(self, conn: AsyncConnection, group: str, image: str) -> GroupShapes | None:
        """(allowed session types, capacity shapes offering `image`), or None if the group is unknown."""
        hit = self.peek(group, image)
        if hit is not None:
            return hit
        epoch = self._current()
        sg = (await conn.execute(_GROUP_TYPES, {"group": group})).first()
        if sg is None:
            return None
        rows = await conn.execute(_CAPACITY_SHAPES, {"group": group, "keys": list(image_keys(image))})
        # Agents of one capacity are one row: a homogeneous fleet of any size costs one row here.
        offering = [
            AgentCapacity(f"{n} agent(s)", ResourceSlots.from_json(slots), frozenset({image}), count=int(n))
            for slots, n in rows
        ]
        found = (list(sg.allowed_session_types or []), offering)
        if offering and self._current() == epoch:  # else it may have been read before a change
            self._items[(group, image)] = (self._expiry(), found)
        return found

    async def read(
        self, engine: AsyncEngine, group: str, image: str, *, largest: bool
    ) -> tuple[GroupShapes | None, int]:
        """`lookup` (and `largest_group` when asked), opening a connection only on a miss."""
        found = self.peek(group, image)
        count = self.peek_largest() if largest else 0
        if found is not None and count is not None:
            return found, count

        async def read() -> tuple[GroupShapes | None, int]:
            async with engine.connect() as conn:
                shapes = await self.lookup(conn, group, image)
                return shapes, (await self.largest_group(conn) if largest else 0)

        return await self._once((group, image, largest), read)


_GROUP_TYPES = select(ScalingGroup.allowed_session_types).where(ScalingGroup.name == bindparam("group"))
# An agent offers the image when its stored list holds any of the image's keys (the image, its
# normalized form, the mark of its registry or `*` for a short name: `image_refs.image_keys`).
_CAPACITY_SHAPES = (
    select(Agent.available_slots, func.count())
    .where(
        Agent.scaling_group == bindparam("group"),
        Agent.images.has_any(bindparam("keys", type_=ARRAY(Text))),
    )
    .group_by(Agent.available_slots)
)
_GROUP_SIZES = select(func.count().label("n")).select_from(Agent).group_by(Agent.scaling_group).subquery()
_LARGEST_GROUP = select(func.max(_GROUP_SIZES.c.n))


class OwnerLimitsCache(_Epoched):
    """`owner_limits` per keypair, for `ttl` seconds or until the epoch moves on; at most `size`
    keypairs (all are dropped when it is full: they are one query each to read again)."""

    def __init__(
        self, engine: AsyncEngine, ttl: float = 5.0, epoch: CacheEpoch | None = None, size: int = 10_000
    ) -> None:
        super().__init__(ttl, epoch)
        self._engine = engine
        self._size = size
        self._items: dict[tuple[str, object, str], tuple[float, OwnerLimits]] = {}

    async def get(self, principal: Principal) -> OwnerLimits:
        if not self._fresh() or len(self._items) >= self._size:
            self._items.clear()
        key = (principal.access_key, principal.project_id, principal.domain_name)
        hit = self._items.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]

        async def read() -> OwnerLimits:
            epoch = self._current()
            async with self._engine.connect() as conn:
                limits = await owner_limits(conn, principal)
            if self._current() == epoch:  # else it may have been read before the change
                self._items[key] = (self._expiry(), limits)
            return limits

        return await self._once(key, read)
