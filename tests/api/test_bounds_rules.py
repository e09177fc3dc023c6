"""The pure rules behind the request bounds, table-driven: slot amounts, environ, command, priority,
cluster size, JSON bodies, cursors and the logs' clipping."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pytest

from sokovan.common.slots import MAX_AMOUNT, ResourceSlots, SlotError, positive_request
from sokovan.manager.api.json_input import MAX_DEPTH, InputError, check_text, load_json
from sokovan.manager.api.session_logs import MAX_TAIL, TOTAL_CAP, clip, stream_budget
from sokovan.manager.controller.request_bounds import (
    MAX_COMMAND_BYTES,
    MAX_ENVIRON_BYTES,
    MAX_ENVIRON_NAMES,
    check_command,
    check_environ,
    cluster_size_refusal,
    priority_refusal,
)
from sokovan.manager.repositories.paging import after_time, decode_cursor, encode_cursor

AMOUNTS: list[tuple[str, object, str | None]] = [
    # (slot, value, canonical string or None when refused)
    ("cpu", 1, "1"),
    ("cpu", 0.5, "0.5"),
    ("cpu", "0.25", "0.25"),
    ("cpu", 0.000001, "0.000001"),
    ("cpu", 1e-7, None),
    ("cpu", 1e15, "1000000000000000"),
    ("cpu", 10**15 + 1, None),
    ("cpu", 1e30, None),
    ("cpu", 10**30, None),
    ("cpu", 10**4000, None),
    ("cpu", -1, None),
    ("cpu", True, None),
    ("cpu", float("nan"), None),
    ("cpu", float("inf"), None),
    ("cpu", "1e30", None),
    ("mem", "512m", str(512 * 2**20)),
    ("mem", "900t", str(900 * 2**40)),
    ("mem", "1p", None),  # 2**50 bytes > 1e15
    ("mem", "9" * 40 + "g", None),
    ("cpu", 0, "0"),  # zero is an amount (agents, quotas); a request refuses it separately
]


@pytest.mark.parametrize(("slot", "value", "want"), AMOUNTS)
def test_slot_amounts_are_bounded(slot: str, value: object, want: str | None) -> None:
    if want is None:
        with pytest.raises(SlotError):
            ResourceSlots.parse({slot: value})
    else:
        assert ResourceSlots.parse({slot: value}).to_json() == {slot: want}
    assert MAX_AMOUNT == Decimal(10) ** 15


REQUESTS: list[tuple[dict[str, object], str | None]] = [
    ({"cpu": 1, "mem": "1g"}, None),
    ({"cpu": 0.1}, None),
    ({"cpu": 0, "mem": "1g"}, "cpu"),
    ({"cpu": 1, "mem": 0}, "mem"),
    ({"cpu": 1, "mem": "0m"}, "mem"),
    ({"cpu": 1, "cuda.device": 0}, "cuda.device"),
    ({"cpu": 0, "mem": 0}, "cpu, mem"),
]


@pytest.mark.parametrize(("raw", "zero"), REQUESTS)
def test_a_request_asks_for_more_than_zero(raw: dict[str, object], zero: str | None) -> None:
    slots = ResourceSlots.parse(raw)
    if zero is None:
        assert positive_request(slots) == slots
    else:
        with pytest.raises(SlotError, match=f"^{zero} must be more than 0"):
            positive_request(slots)


ENVIRONS: list[tuple[str, dict[str, str], str | None]] = [
    ("empty", {}, None),
    ("usual", {"PATH": "/bin", "_x1": "", "A": "b=c"}, None),
    ("names-at-the-limit", {f"V{i}": "x" for i in range(MAX_ENVIRON_NAMES)}, None),
    ("too-many-names", {f"V{i}": "x" for i in range(MAX_ENVIRON_NAMES + 1)}, "at most 128 variables"),
    ("starts-with-digit", {"1A": "x"}, "must match"),
    ("dash", {"A-B": "x"}, "must match"),
    ("equals", {"A=B": "x"}, "must match"),
    ("empty-name", {"": "x"}, "must match"),
    ("unicode-name", {"É": "x"}, "must match"),
    ("newline-in-name", {"A\n": "x"}, "must match"),
    ("size-at-the-limit", {"A": "x" * (MAX_ENVIRON_BYTES - 1)}, None),
    ("too-large", {"A": "x" * MAX_ENVIRON_BYTES}, "at most 65536 bytes"),
    ("too-large-in-utf8", {"A": "é" * (MAX_ENVIRON_BYTES // 2)}, "at most 65536 bytes"),
    ("many-large-values", {f"V{i}": "x" * 1024 for i in range(64)}, "at most 65536 bytes"),
]


@pytest.mark.parametrize(("case", "environ", "error"), ENVIRONS, ids=[e[0] for e in ENVIRONS])
def test_environ_bounds(case: str, environ: dict[str, str], error: str | None) -> None:
    if error is None:
        check_environ(environ)
    else:
        with pytest.raises(ValueError, match=error):
            check_environ(environ)


@pytest.mark.parametrize(
    ("command", "ok"),
    [
        (None, True),
        ("echo hi", True),
        ("x" * MAX_COMMAND_BYTES, True),
        ("x" * (MAX_COMMAND_BYTES + 1), False),
        ("é" * (MAX_COMMAND_BYTES // 2), True),
        ("é" * (MAX_COMMAND_BYTES // 2 + 1), False),  # fewer characters than bytes
    ],
)
def test_command_bound_is_in_bytes(command: str | None, ok: bool) -> None:
    if ok:
        check_command(command)
    else:
        with pytest.raises(ValueError, match="at most 65536 bytes"):
            check_command(command)


@pytest.mark.parametrize(
    ("priority", "admin", "refused"),
    [
        (0, False, False),
        (10, False, False),
        (11, False, True),
        (100, False, True),
        (11, True, False),
        (100, True, False),
    ],
)
def test_priority_above_the_default_is_for_admins(priority: int, admin: bool, refused: bool) -> None:
    refusal = priority_refusal(priority, admin)
    assert (refusal is not None) == refused
    if refusal:
        assert "only admins" in refusal and str(priority) in refusal


@pytest.mark.parametrize(
    ("size", "largest", "refused"),
    [(1, 0, False), (1, 1, False), (2, 1, True), (2, 2, False), (1024, 1000, True), (1000, 1000, False)],
)
def test_cluster_size_within_the_largest_group(size: int, largest: int, refused: bool) -> None:
    assert (cluster_size_refusal(size, largest) is not None) == refused


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


BODIES: list[tuple[str, bytes, Any]] = [
    ("object", b'{"a": [1, 2.5, "x"]}', {"a": [1, 2.5, "x"]}),
    ("utf-16", '{"a": "é"}'.encode("utf-16"), {"a": "é"}),
    ("depth-at-the-limit", nested(MAX_DEPTH), None),
    ("too-deep", nested(MAX_DEPTH + 1), InputError),
    ("recursion-deep", nested(10_000), InputError),
    ("deep-objects", b'{"a":' * 100 + b"1" + b"}" * 100, InputError),
    ("nul-in-value", b'{"a": "x\\u0000y"}', InputError),
    ("nul-in-key", b'{"a\\u0000": 1}', InputError),
    ("nul-deep", b'{"a": [{"b": ["\\u0000"]}]}', InputError),
    ("nan", b'{"a": NaN}', InputError),
    ("infinity", b'{"a": -Infinity}', InputError),
    ("overflowing-float", b'{"a": 1e400}', InputError),
    ("too-many-digits", b'{"a": ' + b"9" * 5000 + b"}", InputError),
    ("not-utf8", b'{"a": "\xff"}', InputError),
    ("truncated", b'{"a": ', InputError),
]


@pytest.mark.parametrize(("case", "raw", "want"), BODIES, ids=[b[0] for b in BODIES])
def test_json_bodies(case: str, raw: bytes, want: Any) -> None:
    if want is InputError:
        with pytest.raises(InputError):
            load_json(raw)
    elif want is None:
        load_json(raw)
    else:
        assert load_json(raw) == want


def test_nul_in_text() -> None:
    check_text("path", "/v2/sessions")
    with pytest.raises(InputError, match="NUL"):
        check_text("path", "/v2/sessions/\x00")


def cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


CURSORS: list[tuple[str, str]] = [
    ("year-99999", cursor({"t": "99999-01-01T00:00:00+00:00", "id": "00000000-0000-0000-0000-000000000000"})),
    ("float-time", cursor({"t": 1e300, "id": "00000000-0000-0000-0000-000000000000"})),
    ("naive-time", cursor({"t": "2024-01-01T00:00:00", "id": "00000000-0000-0000-0000-000000000000"})),
    (
        "past-year-9999",
        cursor({"t": "9999-12-31T23:59:59-14:00", "id": "00000000-0000-0000-0000-000000000000"}),
    ),
    (
        "before-year-1",
        cursor({"t": "0001-01-01T00:00:00+14:00", "id": "00000000-0000-0000-0000-000000000000"}),
    ),
    ("bad-id", cursor({"t": "2024-01-01T00:00:00+00:00", "id": "x"})),
    ("nested", cursor({"t": [[[]]]})),
    ("deep", base64.urlsafe_b64encode(b"[" * 5000).decode()),
    ("not-base64-json", "!!!"),
    ("too-long", "A" * 5000),
]


@pytest.mark.parametrize(("case", "raw"), CURSORS, ids=[c[0] for c in CURSORS])
def test_time_cursors_that_were_not_handed_out(case: str, raw: str) -> None:
    with pytest.raises(ValueError, match="malformed cursor"):
        after_time(raw)


@pytest.mark.parametrize(
    "value", [{"id": 2**63}, {"id": -(2**63) - 1}, {"id": "a\x00"}, {"id": [1]}, {"id": {"a": 1}}]
)
def test_key_cursors_hold_only_comparable_scalars(value: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="malformed cursor"):
        decode_cursor(encode_cursor(value))


def test_cursors_handed_out_read_back() -> None:
    assert decode_cursor(encode_cursor({"id": 2**63 - 1})) == {"id": 2**63 - 1}
    at, _ = after_time(
        cursor({"t": "2024-01-01T09:00:00+09:00", "id": "00000000-0000-0000-0000-000000000001"})
    )
    assert at.isoformat() == "2024-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("tail", "kernels", "want"),
    [
        (MAX_TAIL, 1, MAX_TAIL),
        (1000, 4, 1000),
        (MAX_TAIL, 1024, TOTAL_CAP // 2048),
        (0, 3, 0),
        (500, 0, 500),
    ],
)
def test_stream_budget_keeps_the_total(tail: int, kernels: int, want: int) -> None:
    assert stream_budget(tail, kernels) == want
    assert stream_budget(tail, kernels) * 2 * kernels <= TOTAL_CAP


@pytest.mark.parametrize(
    ("text", "budget", "want"),
    [("hello", 10, "hello"), ("hello", 3, "llo"), ("hello", 0, ""), ("aé", 2, "é"), ("aéb", 2, "b")],
)
def test_clip_keeps_the_last_bytes_whole(text: str, budget: int, want: str) -> None:
    assert clip(text, budget) == want
