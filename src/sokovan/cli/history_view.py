"""How `session history` shows a session's scheduling history.

A handler run that moved nothing (from_status equal to to_status: a repeated cycle, a run that
found the session already where it was going) is hidden unless asked for (`--all`). Messages are
printed in words: rows written before the stale message was fixed carry Python's enum reprs
(`stale: expected [<SessionStatus.TERMINATING: 'TERMINATING'>], found TERMINATED`), shown here
as `stale: expected TERMINATING, found TERMINATED`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_ENUM_REPR = re.compile(r"<[A-Za-z_][\w.]*\.([A-Za-z_]\w*): '[^']*'>")
_EXPECTED_LIST = re.compile(r"expected \[([^\]]*)\]")


def moved(row: dict[str, Any]) -> bool:
    """Whether a history row changed the status (a row with a side missing counts as a move)."""
    src, dst = row.get("from_status"), row.get("to_status")
    return not src or not dst or src != dst


def shown_rows(rows: Iterable[dict[str, Any]], *, show_all: bool) -> tuple[list[dict[str, Any]], int]:
    """The rows to print and how many were hidden for moving nothing."""
    rows = list(rows)
    if show_all:
        return rows, 0
    kept = [row for row in rows if moved(row)]
    return kept, len(rows) - len(kept)


def _names(listed: re.Match[str]) -> str:
    names = [name.strip().strip("'\"") for name in listed.group(1).split(",") if name.strip()]
    return "expected " + " or ".join(names)


def clean_message(message: Any) -> str:
    """A history message in words: enum reprs become their values, `expected [A, B]` reads
    `expected A or B`; None is the empty string."""
    if message is None:
        return ""
    text = _ENUM_REPR.sub(r"\1", str(message))
    return _EXPECTED_LIST.sub(_names, text)
