"""`plan_batch` and `resolve`, the pure part of the group commit, as a table: which creates of a batch
are written, which follow an earlier one with the same key, which find their key taken, which the
pending limit refuses, and what each is answered once the batch is written."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from sokovan.manager.controller.create_batch import Created, CreateRequest, PendingLimit, plan_batch, resolve
from sokovan.manager.controller.errors import TooManyPending
from sokovan.manager.repositories.session_inserts import Inserted, NewSession

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
OLD = uuid.UUID(int=1)


def _request(owner: str, key: str | None = None, cap: int | None = None) -> CreateRequest:
    session = NewSession(uuid.uuid4(), owner, key, {}, (uuid.uuid4(),))
    return CreateRequest(session, None if cap is None else PendingLimit(cap, "p"))


# (name, creates as (owner, creation_id, pending cap), keys that exist, PENDING counts, conflicts
#  met by the statement, wanted answers: "new", "old" (the existing session), "same as N",
#  "429")
CASES: list[
    tuple[str, list[tuple[str, str | None, int | None]], set[str], dict[str, int], set[str], list[str]]
] = [
    ("plain", [("a", None, None), ("b", None, None)], set(), {}, set(), ["new", "new"]),
    ("one key twice", [("a", "k", None), ("a", "k", None)], set(), {}, set(), ["new", "same as 0"]),
    ("one key, two owners", [("a", "k", None), ("b", "k", None)], set(), {}, set(), ["new", "new"]),
    ("key exists", [("a", "k", None), ("a", "k", None)], {"k"}, {}, set(), ["old", "old"]),
    ("key taken meanwhile", [("a", "k", None), ("a", "k", None)], set(), {}, {"k"}, ["old", "old"]),
    (
        "limit",
        [("a", None, 2)] * 3 + [("b", None, None)],
        set(),
        {"a": 0},
        set(),
        ["new", "new", "429", "new"],
    ),
    ("limit counts pending", [("a", None, 2)] * 2, set(), {"a": 1}, set(), ["new", "429"]),
    (
        "a repeat is not counted",
        [("a", "k", 1), ("a", "k", 1), ("a", None, 1)],
        set(),
        {"a": 0},
        set(),
        ["new", "same as 0", "429"],
    ),
    ("an existing key at the limit", [("a", "k", 1)], {"k"}, {"a": 5}, set(), ["old"]),
]


@pytest.mark.parametrize(
    ("name", "creates", "exists", "pending", "conflicts", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_plan_and_resolve(
    name: str,
    creates: list[tuple[str, str | None, int | None]],
    exists: set[str],
    pending: dict[str, int],
    conflicts: set[str],
    want: list[str],
) -> None:
    requests = [_request(*c) for c in creates]
    existing = {("a", k): OLD for k in exists}
    writes, decisions = plan_batch(requests, existing, pending)
    inserted = {s.id: Inserted(NOW, NOW) for s in writes if s.creation_id not in conflicts}
    taken = {**existing, **{("a", k): OLD for k in conflicts}}
    answers = resolve(requests, decisions, inserted, taken)
    got = []
    for answer in answers:
        if isinstance(answer, TooManyPending):
            got.append("429")
        elif isinstance(answer, Created) and answer.session_id == OLD:
            got.append("old")
        elif isinstance(answer, Created) and answer.created:
            got.append("new")
        else:
            assert isinstance(answer, Created)
            leader = next(i for i, r in enumerate(requests) if r.session.id == answer.session_id)
            got.append(f"same as {leader}")
    assert got == want
    assert (
        len(writes)
        == len({s.id for s in writes})
        == sum(1 for d in decisions if type(d).__name__ == "_Insert")
    )
