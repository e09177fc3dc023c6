"""Fair share's pure math (`common.fair_share`), table-driven: weighted amounts, decayed usage
(halving per half-life, live and ended sessions), normalisation by the cluster's decayed capacity,
entitled shares from weights and siblings, the factor, and the settings' validation."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import pytest
from pydantic import ValidationError

from sokovan.common.fair_share import (
    LN2,
    FairShareConfig,
    UsageInterval,
    decayed,
    decayed_capacity,
    fair_share_view,
    weighted,
)
from sokovan.config.cluster import FAIR_SHARE, ClusterConfig

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
H = 3600.0  # one hour, in seconds
HOUR = FairShareConfig(half_life_hours=1)
GPU = {"cuda.device": 1}  # weighs 10 by default
CLUSTER = {"cuda.device": 8, "cpu": 64, "mem": 256 * 2**30}  # 80 + 64 + 64 = 208


def ago(seconds: float) -> dt.datetime:
    return NOW - dt.timedelta(seconds=seconds)


def interval(
    user: str, start: float, end: float | None, slots: dict[str, float] | None = None, **kw: str
) -> UsageInterval:
    return UsageInterval(
        kw.get("domain", "d"),
        kw.get("project", "p"),
        user,
        slots or GPU,
        ago(start),
        None if end is None else ago(end),
    )


@pytest.mark.parametrize(
    ("slots", "want"),
    [
        ({"cuda.device": 2}, 20.0),
        ({"cpu": 4}, 4.0),
        ({"mem": 8 * 2**30}, 2.0),  # per GiB
        ({"cuda.mem": 4 * 2**30, "tpu": 3}, 0.0),  # no weight: does not count
        (CLUSTER, 208.0),
    ],
)
def test_weighted_amounts(slots: dict[str, float], want: float) -> None:
    assert weighted(slots, FairShareConfig().weights) == pytest.approx(want)


@pytest.mark.parametrize(
    ("start", "end", "want"),
    [
        # one half-life, ended now: h/ln2 x (1 - 1/2)
        (H, 0.0, H / LN2 * 0.5),
        # the same hour, ended one half-life ago: half of it
        (2 * H, H, H / LN2 * 0.25),
        # still running (end None), started one hour ago: as if it ended now
        (H, None, H / LN2 * 0.5),
        # started in the future or ended before it started: nothing
        (-10.0, None, 0.0),
        (10.0, 20.0, 0.0),
    ],
)
def test_decayed_usage_of_one_unit(start: float, end: float | None, want: float) -> None:
    got = decayed(1.0, ago(start), None if end is None else ago(end), NOW, H)
    assert got == pytest.approx(want)


def test_an_ended_sessions_usage_halves_every_half_life() -> None:
    start, end = ago(3 * H), ago(2 * H)
    values = [decayed(10.0, start, end, NOW + dt.timedelta(seconds=k * H), H) for k in range(6)]
    for older, newer in itertools.pairwise(values):
        assert newer == pytest.approx(older / 2)


def test_a_live_session_keeps_adding_and_tends_to_its_capacity_times_h_over_ln2() -> None:
    start = ago(H)
    now_values = [decayed(1.0, start, None, NOW + dt.timedelta(seconds=k * H), H) for k in range(4)]
    assert now_values == sorted(now_values)  # grows while it runs
    forever = decayed(1.0, ago(60 * H), None, NOW, H)
    assert forever == pytest.approx(H / LN2)


def test_usage_is_a_fraction_of_the_clusters_decayed_capacity() -> None:
    # one user held the whole cluster since long ago: usage 1, share 1, factor 1/2
    whole = interval("u", 100 * H, None, CLUSTER)
    view = fair_share_view([whole], HOUR, NOW, CLUSTER)
    user = view.shares[("d", "p", "u")]
    assert user.usage == pytest.approx(1.0)
    assert (user.share, user.factor) == (1.0, pytest.approx(0.5))
    assert decayed_capacity(CLUSTER, HOUR) == pytest.approx(208 * H / LN2)
    # half the cluster for one half-life, ended now: (104 x h/ln2 x 1/2) / (208 x h/ln2) = 1/4
    half = interval("u", H, 0.0, {"cuda.device": 4, "cpu": 32, "mem": 128 * 2**30})
    assert fair_share_view([half], HOUR, NOW, CLUSTER).shares[("d", "p", "u")].usage == pytest.approx(0.25)


def test_after_enough_half_lives_a_heavy_user_and_one_who_never_ran_compare_equal() -> None:
    heavy = interval("heavy", 11 * H, H, {"cuda.device": 8})  # ten hours of the cluster's GPUs
    pending = [("d", "p", "light")]
    soon = fair_share_view([heavy], HOUR, NOW, CLUSTER, pending=pending)
    assert round(soon.factor("d", "p", "heavy"), 2) < 0.8 < soon.factor("d", "p", "light") == 1.0
    later = NOW + dt.timedelta(hours=12)
    evened = fair_share_view([heavy], HOUR, later, CLUSTER, pending=pending)
    assert round(evened.factor("d", "p", "heavy"), 2) == round(evened.factor("d", "p", "light"), 2) == 1.0


def test_entitled_shares_follow_weights_among_siblings_with_usage_or_pending_sessions() -> None:
    intervals = [
        interval("a", 2 * H, H, domain="big", project="p1"),
        interval("b", 2 * H, H, domain="big", project="p2"),
        interval("c", 2 * H, H, domain="small", project="p3"),
    ]
    pending = [("big", "p1", "newcomer")]
    view = fair_share_view(
        intervals,
        HOUR,
        NOW,
        CLUSTER,
        project_weights={"p1": 3.0, "p2": 1.0, "p3": 0.0},  # 0 is not a weight: 1
        domain_weights={"big": 4.0, "small": 1.0},
        pending=pending,
    )
    share = {path: s.share for path, s in view.shares.items()}
    assert share[("big",)] == pytest.approx(0.8) and share[("small",)] == pytest.approx(0.2)
    assert share[("big", "p1")] == pytest.approx(0.75) and share[("big", "p2")] == pytest.approx(0.25)
    assert share[("small", "p3")] == 1.0
    # users weigh 1 each: the newcomer (pending, no usage) halves a's share, and its factor is 1
    assert share[("big", "p1", "a")] == share[("big", "p1", "newcomer")] == 0.5
    assert view.factor("big", "p1", "newcomer") == 1.0
    assert view.shares[("big", "p1", "newcomer")].usage == 0.0
    # the same usage weighs less against a larger share
    assert view.factor("big", "p1") > view.factor("big", "p2")
    assert view.factor("big") > view.factor("small")
    # the factor is 2^(-usage/share)
    for s in view.shares.values():
        assert s.factor == pytest.approx(math.pow(2, -s.usage / s.share))
    # tree order: a domain, its projects, each followed by its users
    assert [s.path for s in view.items()][:4] == [
        ("big",),
        ("big", "p1"),
        ("big", "p1", "a"),
        ("big", "p1", "newcomer"),
    ]


def test_without_capacity_or_usage_every_factor_is_one() -> None:
    view = fair_share_view([interval("u", 2 * H, H)], HOUR, NOW, {})
    assert view.factors("d", "p", "u") == (1.0, 1.0, 1.0)
    assert fair_share_view([], HOUR, NOW, CLUSTER).factors("d", "p", "nobody") == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    "raw",
    [
        {"half_life_hours": 0},
        {"half_life_hours": -1},
        {"half_life_hours": "soon"},
        {"half_life_hours": 1e9},
        {"weights": {"cpu": -1}},
        {"weights": {"CPU": 1}},
        {"weights": {"cpu": "heavy"}},
        {"half_life": 3},
    ],
)
def test_bad_settings_are_refused(raw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        FairShareConfig.model_validate(raw)


def test_the_etcd_section_is_applied_live_and_a_bad_value_keeps_the_one_in_force() -> None:
    config = ClusterConfig()
    assert config.fair_share == FairShareConfig()
    assert config.fair_share.weights == {"cuda.device": 10.0, "cpu": 1.0, "mem": 0.25}
    assert config.fair_share.half_life_hours == 168.0
    assert config.apply(FAIR_SHARE, b'{"half_life_hours": 0.001, "weights": {"cuda.device": 1}}')
    assert config.fair_share.half_life_seconds == pytest.approx(3.6)
    assert not config.apply(FAIR_SHARE, b'{"half_life_hours": -5}')
    assert not config.apply(FAIR_SHARE, b"not json")
    assert config.fair_share.half_life_seconds == pytest.approx(3.6)
    assert config.apply(FAIR_SHARE, None)  # deleted: the defaults
    assert config.fair_share == FairShareConfig()
