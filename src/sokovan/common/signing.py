"""HMAC signatures with the cluster secret, and what makes a signed message fresh.

Agent RPC requests, every message an agent puts on the event bus and every value on the routing
bus carry a signature, so that nothing without the cluster secret can start a kernel or pose as an
agent. A signature covers a *canonical string*: a version tag naming what is signed, the fields
that bind it to its place (HTTP method and path, target agent, message kind or key), the time it
was signed, a nonce, and the SHA-256 of the body, one per line::

    <tag>\\n<field 1>\\n...\\n<field n>\\n<timestamp>\\n<nonce>\\n<sha256 hex of the body>

The timestamp is written `seconds.milliseconds` since the epoch; a reader accepts only that shape
(so `nan`, `inf`, `1e400` or a negative time never reach arithmetic) and only within `SKEW`
seconds of its own clock. The nonce is 16 random bytes in lowercase hex; a reader remembers the
nonces it accepted for as long as their timestamp is within the window, and refuses a second one.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import re
import secrets
from collections.abc import Sequence

SKEW = 300.0  # seconds a signed request or message stays acceptable, either way of the reader's clock
_TIMESTAMP = re.compile(r"[0-9]{1,11}(\.[0-9]{1,6})?")  # before the year 5138, at most microseconds
_NONCE = re.compile(r"[0-9a-f]{32}")


def sign(secret: str, payload: bytes) -> str:
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def verify(secret: str, payload: bytes, signature: str | None) -> bool:
    if not signature or not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(secret, payload), signature)


def canonical(tag: str, fields: Sequence[str], timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes a signature covers (see the module docstring). A field with a line break cannot
    be told from two fields: it is refused (ValueError)."""
    parts = [tag, *fields, timestamp, nonce]
    if any("\n" in p or "\r" in p for p in parts):
        raise ValueError("a signed field holds a line break")
    return "\n".join([*parts, hashlib.sha256(body).hexdigest()]).encode()


def new_nonce() -> str:
    return secrets.token_hex(16)


def format_time(now: float) -> str:
    return f"{now:.3f}"


def parse_time(raw: object) -> float | None:
    """A signed timestamp as seconds, or None when it is not `seconds[.fraction]` (finite,
    non-negative, at most 11 digits before the point and 6 after)."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(raw, str) or not _TIMESTAMP.fullmatch(raw):
        return None
    return float(raw)


def valid_nonce(raw: object) -> bool:
    return isinstance(raw, str) and _NONCE.fullmatch(raw) is not None


def within_skew(timestamp: float, now: float, skew: float = SKEW) -> bool:
    return abs(now - timestamp) <= skew


class NonceStore:
    """The nonces accepted within the window, in memory and bounded (one per process: a hollow
    fleet's agents share it).

    A nonce is kept until its timestamp leaves the window (after that the time check refuses a
    replay). When `capacity` nonces are kept, the one leaving the window first is dropped, and
    from then on everything signed at or before its time is refused: a replay can never pass
    because its nonce was forgotten; at worst a late request is refused under a flood.
    """

    def __init__(self, window: float = SKEW, capacity: int = 200_000) -> None:
        self._window = window
        self._capacity = capacity
        self._expiry: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._floor = float("-inf")  # the newest timestamp dropped before its time

    def __len__(self) -> int:
        return len(self._expiry)

    def add(self, nonce: str, timestamp: float, now: float) -> bool:
        """Remember `nonce`; False when it was seen already (or cannot be told apart from a replay)."""
        self._expire(now)
        if nonce in self._expiry or timestamp <= self._floor:
            return False
        while len(self._expiry) >= self._capacity:
            expiry, dropped = heapq.heappop(self._heap)
            del self._expiry[dropped]
            self._floor = max(self._floor, expiry - self._window)
        expiry = timestamp + self._window
        self._expiry[nonce] = expiry
        heapq.heappush(self._heap, (expiry, nonce))
        return True

    def _expire(self, now: float) -> None:
        while self._heap and self._heap[0][0] < now:
            _, nonce = heapq.heappop(self._heap)
            del self._expiry[nonce]
