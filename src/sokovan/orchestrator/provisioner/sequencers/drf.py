"""Dominant Resource Fairness inside priority bands.

A user's dominant share is the largest, over slots, of what the user holds in the scaling group
divided by the group's capacity of that slot (slots with no capacity are ignored). The user with
the smallest share goes next (a new user has share 0, so goes first); each pick is charged to its
user before the next choice (progressive filling); ties keep creation order.
"""

from __future__ import annotations

import heapq
import uuid
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from decimal import Decimal

from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels

_ZERO = Decimal(0)


def dominant_share(allocated: Mapping[str, Decimal], capacity: Mapping[str, Decimal]) -> Decimal:
    shares = [amount / capacity[slot] for slot, amount in allocated.items() if capacity.get(slot, 0) > 0]
    return max(shares, default=Decimal(0))


class DRFSequencer:
    name = "drf"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        # the slots with capacity, each user's holding of them (a copy, charged in place below)
        capacity = [(slot, amount) for slot, amount in snapshot.capacity.items() if amount > 0]
        allocated: dict[uuid.UUID, dict[str, Decimal]] = {
            user: dict(slots) for user, slots in snapshot.user_allocated.items()
        }

        def share(held: Mapping[str, Decimal]) -> Decimal:
            """`dominant_share(held, capacity)`, over the slots with capacity listed once."""
            return max((held.get(slot, _ZERO) / amount for slot, amount in capacity), default=_ZERO)

        def order(band: list[SessionWithKernels]) -> list[SessionWithKernels]:
            queues: dict[uuid.UUID, deque[SessionWithKernels]] = defaultdict(deque)
            for s in sorted(band, key=lambda s: (s.created_at, s.id)):
                queues[s.user_id].append(s)
            heap = [(share(allocated.get(u, {})), q[0].created_at, q[0].id, u) for u, q in queues.items()]
            heapq.heapify(heap)
            out: list[SessionWithKernels] = []
            while heap:
                _, _, _, user = heapq.heappop(heap)
                session = queues[user].popleft()
                out.append(session)
                held = allocated.setdefault(user, {})
                for slot, amount in session.requested_slots.items():
                    held[slot] = held.get(slot, _ZERO) + amount
                if queues[user]:
                    nxt = queues[user][0]
                    heapq.heappush(heap, (share(held), nxt.created_at, nxt.id, user))
            return out

        return by_band(sessions, order)
