"""How the workers of `sokovan manager --workers N` deal the lanes out between them."""

from __future__ import annotations

from collections.abc import Iterable

from sokovan.orchestrator.schedule.handoffs import lane

# The order the lanes are dealt out in: the heaviest first, so that with two workers placement goes
# with the end lane and the two agent-call lanes go together.
SHARE_OUT = (lane("place"), lane("prepare"), lane("end"), lane("start"))


def owner_index(lanes: Iterable[str], name: str, workers: int) -> int | None:
    """The worker whose lane `name` is: every N-th lane in `SHARE_OUT` order, then the others by
    name (None: `name` is not among `lanes`)."""
    names = sorted(lanes, key=lambda n: (SHARE_OUT.index(n) if n in SHARE_OUT else len(SHARE_OUT), n))
    return names.index(name) % workers if name in names else None
