"""What the CLI prints, as tables: sizes in binary units, history rows and their messages, where a
follow stops and what it says at the end, and validation messages without pydantic's prefixes."""

from __future__ import annotations

from typing import Any

import pytest

from sokovan.cli.history_view import clean_message, moved, shown_rows
from sokovan.cli.node_cmd import _health
from sokovan.cli.session_follow import _describe, exit_code, reached
from sokovan.cli.units import size_text, slot_text, slots_text
from sokovan.manager.api.problems import plain_message


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (512, "512 B"),
        ("1023", "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        ("268435456", "256 MiB"),
        (str(512 * 2**20), "512 MiB"),
        (1610612736, "1.5 GiB"),
        ("8589934592", "8 GiB"),
        (10**9, "953.7 MiB"),
        (2**20 - 1, "1 MiB"),  # 1023.999 KiB rounds up a unit, not to "1024 KiB"
        (3 * 2**40, "3 TiB"),
        (2**70, "1024 EiB"),
        ("8589934592.0", "8 GiB"),
        ("-1024", "-1 KiB"),
        ("lots", "lots"),
        ("NaN", "NaN"),
        (None, "-"),
    ],
)
def test_size_text(value: Any, text: str) -> None:
    assert size_text(value) == text


@pytest.mark.parametrize(
    ("slot", "value", "raw", "text"),
    [
        ("mem", "268435456", False, "256 MiB"),
        ("mem", "268435456", True, "268435456"),
        ("cuda.mem", "2147483648", False, "2 GiB"),
        ("cpu", "1", False, "1"),
        ("cpu", "0.50", False, "0.5"),
        ("cpu", "4.000", True, "4"),
        ("cuda.device", "2", False, "2"),
        ("cuda.shares", "0.25", False, "0.25"),
        ("memory_bandwidth", "1000", False, "1000"),  # only mem and *.mem are sizes
        ("cpu", "many", False, "many"),
    ],
)
def test_slot_text(slot: str, value: str, raw: bool, text: str) -> None:
    assert slot_text(slot, value, raw=raw) == text


def test_slots_text() -> None:
    slots = {"cpu": "1", "mem": "268435456"}
    assert slots_text(slots) == "cpu=1, mem=256 MiB"
    assert slots_text(slots, raw=True) == "cpu=1, mem=268435456"
    assert slots_text({}) == "-" and slots_text(None) == "-"
    assert slots_text(None, empty="none") == "none"


@pytest.mark.parametrize(
    ("message", "text"),
    [
        (
            "stale: expected [<SessionStatus.TERMINATING: 'TERMINATING'>], found TERMINATED",
            "stale: expected TERMINATING, found TERMINATED",
        ),
        (
            "stale: expected [<SessionStatus.PENDING: 'PENDING'>, <SessionStatus.SCHEDULED: 'SCHEDULED'>], "
            "found RUNNING",
            "stale: expected PENDING or SCHEDULED, found RUNNING",
        ),
        ("kernel <KernelStatus.RUNNING: 'RUNNING'> lost", "kernel RUNNING lost"),
        ("stale: expected TERMINATING, found TERMINATED", "stale: expected TERMINATING, found TERMINATED"),
        ("0/2 agents fit: 2 insufficient cpu", "0/2 agents fit: 2 insufficient cpu"),
        ("", ""),
        (None, ""),
    ],
)
def test_clean_message(message: str | None, text: str) -> None:
    assert clean_message(message) == text


def _row(src: str | None, dst: str | None) -> dict[str, Any]:
    return {"from_status": src, "to_status": dst, "handler": "h", "result": "SUCCESS"}


def test_rows_that_moved_nothing_are_hidden_unless_all() -> None:
    rows = [
        _row(None, "PENDING"),
        _row("PENDING", "PENDING"),
        _row("PENDING", "SCHEDULED"),
        _row("TERMINATED", "TERMINATED"),
    ]
    assert [moved(r) for r in rows] == [True, False, True, False]
    kept, hidden = shown_rows(rows, show_all=False)
    assert kept == [rows[0], rows[2]] and hidden == 2
    assert shown_rows(rows, show_all=True) == (rows, 0)


@pytest.mark.parametrize(
    ("status", "stop_at", "done"),
    [
        ("PENDING", None, False),
        ("RUNNING", None, False),  # watch: to the end by default
        ("TERMINATING", None, False),
        ("TERMINATED", None, True),
        ("ERROR", None, True),
        ("CANCELLED", None, True),
        ("CREATING", "RUNNING", False),
        ("RUNNING", "RUNNING", True),
        ("TERMINATING", "RUNNING", False),  # create --wait of an interactive session: to its end then
        ("ERROR", "RUNNING", True),
        ("PREPARED", "PULLING", True),  # passed PULLING without stopping there
        ("PREPARING", "PULLING", False),
        ("RUNNING", "TERMINATING", False),
        ("TERMINATING", "TERMINATING", True),
        ("CANCELLED", "SCHEDULED", True),
    ],
)
def test_where_a_follow_stops(status: str, stop_at: str | None, done: bool) -> None:
    assert reached(status, stop_at) is done


@pytest.mark.parametrize(
    ("session", "line", "code"),
    [
        (
            {"status": "TERMINATED", "result": None, "status_info": {"cause": "USER_CANCELLED"}},
            "TERMINATED  cause=USER_CANCELLED",
            0,
        ),
        ({"status": "TERMINATED", "result": "SUCCESS", "status_info": {}}, "TERMINATED  result=SUCCESS", 0),
        (
            {
                "status": "ERROR",
                "result": "FAILURE",
                "status_info": {"cause": "KERNEL_NONZERO_EXIT", "message": "exit 3"},
            },
            "ERROR  result=FAILURE  cause=KERNEL_NONZERO_EXIT  (exit 3)",
            1,
        ),
        ({"status": "CANCELLED", "result": None, "status_info": None}, "CANCELLED", 1),
        ({"status": "RUNNING", "result": None}, "RUNNING", 0),
        ({"status": "SCHEDULED", "result": None}, "SCHEDULED", 0),  # watch --until SCHEDULED
    ],
)
def test_the_last_line_of_a_follow(session: dict[str, Any], line: str, code: int) -> None:
    assert _describe(session) == line
    assert "None" not in _describe(session)
    assert exit_code(session) == code


@pytest.mark.parametrize(
    ("health", "raw", "text"),
    [
        (None, False, "-"),
        ({}, False, "-"),
        (
            {"ok": True, "problems": [], "work_dir_free": 13421772800, "load1": 0.4166},
            False,
            "ok, 12.5 GiB free for kernels, load 0.42",
        ),
        (
            {"ok": True, "problems": [], "work_dir_free": 13421772800, "load1": None},
            True,
            "ok, 13421772800 bytes free for kernels",
        ),
        ({"ok": False, "problems": ["disk full"], "work_dir_free": None}, False, "problems: disk full"),
        ({"gpus": 8, "ecc_errors": 0}, False, "gpus=8, ecc_errors=0"),
    ],
)
def test_node_health_in_words(health: dict[str, Any] | None, raw: bool, text: str) -> None:
    assert _health(health, raw) == text


@pytest.mark.parametrize(
    ("message", "text"),
    [
        ("Value error, a batch session needs a command", "a batch session needs a command"),
        ("Assertion failed, cpu must be positive", "cpu must be positive"),
        ("Field required", "Field required"),
        ("Input should be a valid integer", "Input should be a valid integer"),
    ],
)
def test_validation_messages_lose_pydantics_prefixes(message: str, text: str) -> None:
    assert plain_message(message) == text
