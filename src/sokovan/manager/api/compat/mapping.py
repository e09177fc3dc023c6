"""Sokovan's session statuses and results as Backend.AI's client reads them.

The statuses have the same names (Sokovan mirrors Backend.AI's lifecycle); a session whose result
is not known yet is `UNDEFINED` to the client, as Backend.AI writes it.
"""

from __future__ import annotations

from sokovan.common.types import SessionStatus

UNDEFINED = "UNDEFINED"


def bai_status(status: str) -> str:
    """The client's name for a Sokovan session status (the same name)."""
    return SessionStatus(status).value


def bai_result(result: str | None) -> str:
    """`SUCCESS`, `FAILURE` or `UNDEFINED` (no result yet)."""
    return result.upper() if result else UNDEFINED
