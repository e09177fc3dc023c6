"""`Watch`: whether the agents' reports reach the manager, and silence counted from when they resumed."""

from __future__ import annotations

import datetime as dt

import pytest

from sokovan.orchestrator.node.watch import Watch

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("reports", "now", "blind", "since"),
    [
        ([], 0, True, None),  # nothing read yet
        ([(0, True)], 1, False, 0),  # the first good read starts the watch
        ([(0, True), (1, True), (2, True)], 3, False, 0),  # unbroken: since stays
        ([(0, True), (1, False)], 2, True, 0),  # the last read failed
        ([(0, True), (1, False), (5, True)], 6, False, 5),  # resumed: silence counts from 5
        ([(0, True)], 10, False, 0),  # within STALE of the last good read
        ([(0, True)], 10.5, True, 0),  # past it: reads stopped coming back
        ([(0, True), (11, True)], 12, False, 11),  # a stall past STALE also restarts the watch
    ],
)
def test_blindness_and_the_start_of_the_watch(
    reports: list[tuple[float, bool]], now: float, blind: bool, since: float | None
) -> None:
    watch = Watch(stale=10)
    for t, ok in reports:
        watch.report(ok, at(t))
    assert watch.blind(at(now)) is blind
    assert watch.since == (None if since is None else at(since))


@pytest.mark.parametrize(("quiet", "expected"), [(0.5, 0.5), (2.0, 2.0), (30.0, 3.0)])
def test_silence_is_never_counted_from_before_the_reads_resumed(quiet: float, expected: float) -> None:
    watch = Watch()
    watch.report(True, at(0))
    watch.report(False, at(1))
    watch.report(True, at(7))
    assert watch.clamp(quiet, at(10)) == expected
    assert Watch().clamp(quiet, at(10)) == quiet  # never watched: as measured
