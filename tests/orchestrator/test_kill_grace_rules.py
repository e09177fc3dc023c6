"""The kill grace rules of the TERMINATE phase (`orchestrator.schedule.kill_grace`), table-driven."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sokovan.common.preemption import KILL_GRACE, MAX_GRACE_PERIOD
from sokovan.orchestrator.schedule.kill_grace import (
    FORCE_SLACK,
    TIMEOUT_SLACK,
    force_after,
    kill_grace,
    terminate_timeout,
)


@pytest.mark.parametrize(
    ("info", "grace"),
    [
        ({}, None),
        ({KILL_GRACE: None}, None),
        ({KILL_GRACE: 30}, 30.0),
        ({KILL_GRACE: 2.5}, 2.5),
        ({KILL_GRACE: 0}, 0.0),
        ({KILL_GRACE: -4}, 0.0),  # bounded, as the agent would refuse it
        ({KILL_GRACE: 10 * MAX_GRACE_PERIOD}, MAX_GRACE_PERIOD),
        ({KILL_GRACE: math.inf}, None),
        ({KILL_GRACE: math.nan}, None),
        ({KILL_GRACE: True}, None),
        ({KILL_GRACE: "30"}, None),
        ({KILL_GRACE: [30]}, None),
    ],
)
def test_kill_grace_of_a_status_info(info: dict[str, Any], grace: float | None) -> None:
    assert kill_grace(info) == grace


@pytest.mark.parametrize(
    ("default", "grace", "expected"),
    [
        (60.0, None, 60.0),
        (60.0, 0.0, 60.0),
        (60.0, 30.0, 60.0),
        (60.0, 60.0, 60.0 + FORCE_SLACK),
        (60.0, 600.0, 600.0 + FORCE_SLACK),
        (0.0, 10.0, 10.0 + FORCE_SLACK),
    ],
)
def test_force_after(default: float, grace: float | None, expected: float) -> None:
    assert force_after(default, grace) == expected


@pytest.mark.parametrize(
    ("default", "grace", "expected"),
    [
        (120.0, None, 120.0),
        (120.0, 30.0, 120.0),
        (120.0, 90.0, 90.0 + TIMEOUT_SLACK),
        (120.0, 3600.0, 3600.0 + TIMEOUT_SLACK),
        (0.0, 3600.0, 0.0),  # no timeout stays no timeout
    ],
)
def test_terminate_timeout(default: float, grace: float | None, expected: float) -> None:
    assert terminate_timeout(default, grace) == expected
