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

from sokovan.common.slots import ResourceSlots
from sokovan.orchestrator.provisioner.sequencers.bands import by_band
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot
from sokovan.state.session_reads import SessionWithKernels


def dominant_share(allocated: Mapping[str, Decimal], capacity: Mapping[str, Decimal]) -> Decimal:
    shares = [amount / capacity[slot] for slot, amount in allocated.items() if capacity.get(slot, 0) > 0]
    return max(shares, default=Decimal(0))


class DRFSequencer:
    name = "drf"

    def sequence(
        self, sessions: Sequence[SessionWithKernels], snapshot: ScalingGroupSnapshot
    ) -> list[SessionWithKernels]:
        capacity = snapshot.capacity
        allocated: dict[uuid.UUID, ResourceSlots] = {
            user: ResourceSlots(slots) for user, slots in snapshot.user_allocated.items()
        }

        def order(band: list[SessionWithKernels]) -> list[SessionWithKernels]:
            queues: dict[uuid.UUID, deque[SessionWithKernels]] = defaultdict(deque)
            for s in sorted(band, key=lambda s: (s.created_at, s.id)):
                queues[s.user_id].append(s)
            heap = [
                (dominant_share(allocated.get(u, {}), capacity), q[0].created_at, q[0].id, u)
                for u, q in queues.items()
            ]
            heapq.heapify(heap)
            out: list[SessionWithKernels] = []
            while heap:
                _, _, _, user = heapq.heappop(heap)
                session = queues[user].popleft()
                out.append(session)
                allocated[user] = allocated.get(user, ResourceSlots()) + session.requested_slots
                if queues[user]:
                    nxt = queues[user][0]
                    share = dominant_share(allocated[user], capacity)
                    heapq.heappush(heap, (share, nxt.created_at, nxt.id, user))
            return out

        return by_band(sessions, order)
