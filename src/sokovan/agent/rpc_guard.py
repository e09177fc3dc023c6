"""What the agent's RPC server settles before it reads a request's body, and the floor that keeps a
request captured before a restart from being replayed after it.

Before the body: the signature covers the body's hash, so it can be verified only once the body
is read; but whatever the headers alone can tell is checked first, and a request that fails is
answered at once, its body never read: a missing or malformed signature, timestamp or nonce, a
time outside the skew window or at or below the floor (401), a declared `Content-Length` over the
largest body (413). What passes may still be forged, so the server reads at most `MAX_READS`
such bodies at once (more are answered 503 at once), each within `READ_TIMEOUT` seconds (else
408), none larger than its largest body.

The floor: the nonces accepted are kept in memory only, so an agent that restarts would take a
request it accepted before, within its skew window. So the server records, in a file of its
work dir, the newest signed time it accepted (written before the request runs), and after a
restart refuses anything signed at or before it; without that record (a first start, a fleet
without state), anything signed before it started (less `START_MARGIN`, the clocks' jitter).
The manager signs each call afresh, so only a call in flight across the restart is refused (the
manager retries it). Signed times are the manager's clock: the record compares them with each
other, never with the agent's clock.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path

import structlog

from sokovan.common.rpc import MAX_SKEW, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from sokovan.common.signing import parse_time, valid_nonce, within_skew

log = structlog.get_logger(__name__)

MAX_READS = 32  # bodies read at once before their signature can be checked
READ_TIMEOUT = 15.0  # seconds to send a body in (the manager's calls time out after 10)
FLOOR_FILE = "rpc-nonce-floor"  # in the agent's work dir
START_MARGIN = 1.0  # seconds before its start an agent without a record still accepts
_SIGNATURE = re.compile(r"[0-9a-f]{64}")

UNAUTHENTICATED = "missing, invalid or expired cluster-secret signature"
BEFORE_RESTART = "signed before this agent's last restart: refused as a possible replay"


def refusal(
    headers: Mapping[str, str], content_length: int | None, max_body: int, now: float, floor: float
) -> tuple[int, str] | None:
    """Why a request is refused from its headers alone (status, message), or None."""
    timestamp = parse_time(headers.get(TIMESTAMP_HEADER))
    signature = headers.get(SIGNATURE_HEADER) or ""
    if (
        timestamp is None
        or not valid_nonce(headers.get(NONCE_HEADER))
        or not _SIGNATURE.fullmatch(signature)
        or not within_skew(timestamp, now, MAX_SKEW)
    ):
        return 401, UNAUTHENTICATED
    if timestamp <= floor:
        return 401, BEFORE_RESTART
    if content_length is not None and content_length > max_body:
        return 413, f"request body over {max_body} bytes"
    return None


class NonceFloor:
    """The signed time at or below which requests are refused (see the module docstring).

    `path` is where the newest accepted time is kept (None: nowhere, only the start counts);
    `started` the agent's clock when its server started.
    """

    def __init__(self, path: Path | None, started: float) -> None:
        self._path = path
        recorded = _read(path) if path is not None else None
        self.floor = recorded if recorded is not None else started - START_MARGIN
        self._recorded = recorded if recorded is not None else float("-inf")

    def accepted(self, timestamp: float) -> None:
        """Record that a request signed at `timestamp` is accepted; before it runs."""
        if self._path is None or timestamp <= self._recorded:
            return
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            tmp.write_text(repr(timestamp))
            os.replace(tmp, self._path)
        except OSError as exc:
            # Served all the same: a full disk must not stop the agent; a restart then falls back
            # on an older record.
            log.warning("rpc.floor_not_recorded", path=str(self._path), error=str(exc))
            return
        self._recorded = timestamp


def _read(path: Path) -> float | None:
    try:
        recorded = float(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("rpc.floor_unreadable", path=str(path), error=str(exc))
        return None
    if not math.isfinite(recorded):
        log.warning("rpc.floor_unreadable", path=str(path), error=f"not a time: {recorded}")
        return None
    return recorded
