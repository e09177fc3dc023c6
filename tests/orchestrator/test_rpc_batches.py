"""`pack`: sessions into calls under the body limit, in order; a session too large alone, out."""

from __future__ import annotations

import pytest

from sokovan.orchestrator.schedule.rpc_batches import BODY_OVERHEAD, pack

LIMIT = BODY_OVERHEAD + 100


@pytest.mark.parametrize(
    ("name", "sizes", "calls", "oversized"),
    [
        ("nothing", [], [], {}),
        ("all in one", [("a", 30), ("b", 30), ("c", 40)], [["a", "b", "c"]], {}),
        ("a new call when full", [("a", 60), ("b", 60), ("c", 40)], [["a"], ["b", "c"]], {}),
        ("exactly the limit", [("a", 100)], [["a"]], {}),
        ("one too large, alone", [("a", 10), ("x", 101), ("b", 10)], [["a", "b"]], {"x": 101}),
        ("only too large", [("x", 500)], [], {"x": 500}),
        ("order kept, no reordering to fill", [("a", 90), ("b", 20), ("c", 5)], [["a"], ["b", "c"]], {}),
    ],
)
def test_pack(
    name: str, sizes: list[tuple[str, int]], calls: list[list[str]], oversized: dict[str, int]
) -> None:
    packed = pack(sizes, LIMIT)
    assert (packed.calls, packed.oversized) == (calls, oversized)
    for call in packed.calls:
        assert BODY_OVERHEAD + sum(dict(sizes)[k] for k in call) <= LIMIT
