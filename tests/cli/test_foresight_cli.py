"""The CLI's side of scheduler foresight: `--max-duration` spans and the expected start lines."""

from __future__ import annotations

import click
import pytest

from sokovan.cli.session_view import foresight_rows
from sokovan.cli.units import span_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("7d", 604800), ("1w", 604800)],
)
def test_spans(text: str, seconds: int) -> None:
    assert span_seconds(text, "--max-duration") == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "1.5h", "soon", "3x", "h"])
def test_a_bad_span_names_the_option(text: str) -> None:
    with pytest.raises(click.BadParameter, match="not a span"):
        span_seconds(text, "--max-duration")


def test_a_pending_session_shows_when_it_should_start_and_its_reservation() -> None:
    info = {
        "estimated_start_at": "2026-11-28T10:00:00Z",
        "estimate_reason": "reserved: room held on a1 from 2026-11-28T10:00:00Z",
        "reservation": {"agents": ["a1"], "at": "2026-11-28T10:00:00Z"},
    }
    rows = dict(foresight_rows({"status": "PENDING", "status_info": info}))
    assert rows["expected start"] == f"2026-11-28T10:00:00Z  ({info['estimate_reason']})"
    assert rows["reservation"] == "a1 at 2026-11-28T10:00:00Z"
    unbounded = {"estimated_start_at": None, "estimate_reason": "nothing bounds it"}
    assert dict(foresight_rows({"status": "PENDING", "status_info": unbounded}))["expected start"] == (
        "unknown  (nothing bounds it)"
    )
    assert foresight_rows({"status": "RUNNING", "status_info": info}) == []
