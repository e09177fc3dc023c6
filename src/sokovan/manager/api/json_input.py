"""Request bodies as JSON, within bounds: what every handler's body goes through before its model.

`load_json` refuses what JSON allows but a request must not carry: nesting deeper than
`MAX_DEPTH` (Python's parser would raise RecursionError long before a model could say no), NUL
characters in any string or key (PostgreSQL cannot store them in text, and no name or command
needs one), and numbers that are not finite (the constants NaN and Infinity, or 1e400). Each
refusal is an `InputError` (a ValueError) with a message fit for the client; the body size is
bounded by the server (aiohttp's `client_max_size`, 413).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32
NUL = "\x00"


class InputError(ValueError):
    """A body or parameter the API will not read."""


def _no_constants(name: str) -> Any:
    raise InputError(f"{name} is not a JSON number")


def load_json(raw: bytes) -> Any:
    """The JSON value of `raw` (UTF-8/16/32), checked by `check_value`."""
    try:
        value = json.loads(raw, parse_constant=_no_constants)
    except RecursionError as exc:
        raise InputError(f"JSON nested deeper than {MAX_DEPTH} levels") from exc
    except InputError:
        raise
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise InputError(f"the request body is not valid JSON: {exc}") from exc
    check_value(value)
    return value


def check_value(value: Any) -> None:
    """Refuse nesting deeper than `MAX_DEPTH`, NUL in any string or key and numbers that are not
    finite, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                raise InputError("strings must not contain NUL (\\u0000)")
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise InputError("numbers must be finite")
        elif isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise InputError(f"JSON nested deeper than {MAX_DEPTH} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def check_text(what: str, text: str) -> None:
    """A path or query parameter: no NUL."""
    if NUL in text:
        raise InputError(f"{what} must not contain NUL (%00)")
