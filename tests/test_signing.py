"""The pure parts of signing: timestamps, canonical strings, the nonce store, RPC signatures."""

from __future__ import annotations

import pytest

from sokovan.common.rpc import AGENT_HEADER, NONCE_HEADER, TIMESTAMP_HEADER, check_signature, signed_headers
from sokovan.common.signing import NonceStore, canonical, new_nonce, parse_time, valid_nonce

NOW = 1_790_000_000.0


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("1790000000.123", 1790000000.123),
        ("1790000000", 1790000000.0),
        (b"1790000000.5", 1790000000.5),
        ("0", 0.0),
        ("99999999999.999999", 99999999999.999999),
        ("nan", None),
        ("inf", None),
        ("-inf", None),
        ("Infinity", None),
        ("1e9", None),
        ("1e400", None),
        ("-1", None),
        ("+1790000000", None),
        ("999999999999", None),  # 12 digits
        ("1790000000.1234567", None),  # 7 decimals
        (" 1790000000", None),
        ("1790000000\n", None),
        ("", None),
        (None, None),
        (1790000000.0, None),  # a number, not its written form
        (b"\xff", None),
    ],
)
def test_parse_time(raw: object, want: float | None) -> None:
    assert parse_time(raw) == want


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        pytest.param(new_nonce(), True, id="fresh"),
        ("0" * 32, True),
        ("0" * 31, False),
        ("0" * 33, False),
        ("A" * 32, False),
        (None, False),
    ],
)
def test_valid_nonce(raw: object, ok: bool) -> None:
    assert valid_nonce(raw) is ok


def test_canonical_refuses_a_field_with_a_line_break() -> None:
    """Else `a\\nb` as one field would sign the same bytes as `a` and `b` as two."""
    assert canonical("t", ["a", "b"], "1", "n", b"") != canonical("t", ["a\\nb"], "1", "n", b"")
    with pytest.raises(ValueError):
        canonical("t", ["a\nb"], "1", "n", b"")
    with pytest.raises(ValueError):
        canonical("t", ["a"], "1", "n\r", b"")


def test_nonce_store_refuses_a_nonce_twice_within_the_window() -> None:
    store = NonceStore(window=300)
    assert store.add("a", NOW, NOW)
    assert not store.add("a", NOW, NOW + 299)
    assert store.add("b", NOW, NOW)


def test_nonce_store_forgets_a_nonce_once_its_time_left_the_window() -> None:
    store = NonceStore(window=300)
    assert store.add("a", NOW, NOW)
    assert store.add("b", NOW + 200, NOW + 200)
    assert store.add("c", NOW + 301, NOW + 301)  # expires a
    assert len(store) == 2


def test_a_full_nonce_store_refuses_what_it_can_no_longer_tell_from_a_replay() -> None:
    store = NonceStore(window=300, capacity=2)
    assert store.add("a", NOW + 1, NOW)
    assert store.add("b", NOW + 2, NOW)
    assert store.add("c", NOW + 3, NOW)  # drops a (the first to leave the window)
    assert len(store) == 2
    assert not store.add("a", NOW + 1, NOW)  # a replay of a: refused although forgotten
    assert not store.add("d", NOW + 0.5, NOW)  # signed before the dropped one: refused too
    assert store.add("e", NOW + 4, NOW)  # newer than anything dropped: taken


def _headers(**kwargs: object) -> dict[str, str]:
    values: dict[str, object] = {"method": "create_kernels", "agent_id": "a1", "now": NOW}
    values.update(kwargs)
    return signed_headers("secret", b"{}", **values)  # type: ignore[arg-type]


def _check(headers: dict[str, str], *, body: bytes = b"{}", path: str = "/rpc/create_kernels") -> bool:
    return check_signature("secret", body, headers, http_method="POST", path=path, now=NOW) is not None


def test_a_valid_signature_names_its_time_and_nonce() -> None:
    headers = _headers()
    signed = check_signature(
        "secret", b"{}", headers, http_method="POST", path="/rpc/create_kernels", now=NOW
    )
    assert signed is not None
    assert (signed.timestamp, signed.nonce) == (NOW, headers[NONCE_HEADER])


@pytest.mark.parametrize(
    "tamper",
    [
        "another path",
        "another HTTP method",
        "another body",
        "another agent",
        "no agent",
        "another nonce",
        "another time",
        "too old",
        "too new",
        "wrong secret",
    ],
)
def test_a_signature_does_not_hold_for_anything_else(tamper: str) -> None:
    headers = _headers()
    assert _check(headers)
    body, path, method = b"{}", "/rpc/create_kernels", "POST"
    if tamper == "another path":
        path = "/rpc/check_and_pull"
    elif tamper == "another HTTP method":
        method = "PUT"
    elif tamper == "another body":
        body = b'{"kernels": []}'
    elif tamper == "another agent":
        headers[AGENT_HEADER] = "a2"
    elif tamper == "no agent":
        del headers[AGENT_HEADER]
    elif tamper == "another nonce":
        headers[NONCE_HEADER] = new_nonce()
    elif tamper == "another time":
        headers[TIMESTAMP_HEADER] = f"{NOW + 1:.3f}"
    elif tamper == "too old":
        headers = _headers(now=NOW - 301)
    elif tamper == "too new":
        headers = _headers(now=NOW + 301)
    elif tamper == "wrong secret":
        headers = signed_headers("other", b"{}", method="create_kernels", agent_id="a1", now=NOW)
    assert check_signature("secret", body, headers, http_method=method, path=path, now=NOW) is None
