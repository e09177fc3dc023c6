"""The keys a waiting session's foresight is written under (CONTRACT section 16), and when a new
estimate is worth a write.

Every PENDING session carries `estimated_start_at` (ISO time, or null when nothing bounds it) and
`estimate_reason`; under the `reserve` queue policy the first sessions that do not fit (up to 16) also
carries `reservation` `{"agents": [...], "at": ISO time}`. They are recomputed every placement
cycle but written only when they moved enough to matter to a reader: a write per waiting session
per cycle would cost more than the estimate is worth."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

ESTIMATED_START_AT = "estimated_start_at"
ESTIMATE_REASON = "estimate_reason"
RESERVATION = "reservation"
KEYS = (ESTIMATED_START_AT, ESTIMATE_REASON, RESERVATION)

# An estimate is rewritten when it moves by more than this many seconds or this share of the wait
# still ahead of it, whichever is larger.
SLACK_SECONDS = 5.0
SLACK_SHARE = 0.1


def iso(at: dt.datetime | None) -> str | None:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z") if at is not None else None


def parse_iso(text: Any) -> dt.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _moved(old: Any, new: Any, now: dt.datetime) -> bool:
    before, after = parse_iso(old), parse_iso(new)
    if before is None or after is None:
        return before is not after
    ahead = max((after - now).total_seconds(), 0.0)
    return abs((after - before).total_seconds()) > max(SLACK_SECONDS, SLACK_SHARE * ahead)


def changed(old: Mapping[str, Any], new: Mapping[str, Any], now: dt.datetime) -> bool:
    """Whether `new` foresight differs from the stored `old` enough to be written."""
    if _moved(old.get(ESTIMATED_START_AT), new.get(ESTIMATED_START_AT), now):
        return True
    if (old.get(ESTIMATE_REASON) is None) != (new.get(ESTIMATE_REASON) is None):
        return True
    old_res, new_res = old.get(RESERVATION), new.get(RESERVATION)
    if not isinstance(old_res, dict) or not isinstance(new_res, dict):
        return (old_res is None) != (new_res is None)
    return old_res.get("agents") != new_res.get("agents") or _moved(old_res.get("at"), new_res.get("at"), now)
