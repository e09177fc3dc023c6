"""Priority bands (0-100, higher first); a sequencer orders sessions inside each band."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import groupby

from sokovan.state.session_reads import SessionWithKernels

Order = Callable[[list[SessionWithKernels]], list[SessionWithKernels]]


def by_band(sessions: Sequence[SessionWithKernels], order: Order) -> list[SessionWithKernels]:
    ranked = sorted(sessions, key=lambda s: -s.priority)
    out: list[SessionWithKernels] = []
    for _, band in groupby(ranked, key=lambda s: s.priority):
        out.extend(order(list(band)))
    return out
