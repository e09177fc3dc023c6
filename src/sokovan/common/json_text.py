"""JSON text for the documents the writers hand PostgreSQL (a batch of moves, of new sessions, of
refreshed agents, each read back there with `jsonb_to_recordset`), and the JSON columns' decoder.

Both are msgspec's: encoding a batch's rows takes a seventh of `json.dumps`'s time and decoding a
session's kernels a quarter of `json.loads`'s, for the same JSON (integers of any size kept
exactly, keys in order, non-ASCII text as UTF-8 rather than escaped, which PostgreSQL reads the
same). Where they part: a float NaN or infinity is written `null`, and a lone surrogate U+FFFD
(`json.dumps` wrote a `NaN` token or a surrogate's escape, which PostgreSQL refused, and the whole
statement with it); what msgspec refuses to read (a number past a float's range, a lone surrogate)
is read by `json.loads`, so no stored value fails to come back.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

_ENCODER = msgspec.json.Encoder()
_AS_TEXT = msgspec.json.Encoder(enc_hook=str)
_DECODER = msgspec.json.Decoder()


def dumps(value: Any, *, as_text: bool = False) -> str:
    """`value` as compact JSON text: JSON's own types, datetimes as RFC 3339, UUIDs, enums and
    decimals as their text; with `as_text`, any other value as its `str()` (as `json.dumps` with
    `default=str` wrote it), else such a value is refused (TypeError). A lone surrogate in a string
    (which no UTF-8 text, and so no jsonb, can hold; an agent's message could carry one) is written
    as U+FFFD, where `json.dumps` wrote an escape PostgreSQL refused."""
    encoder = _AS_TEXT if as_text else _ENCODER
    try:
        return encoder.encode(value).decode()
    except UnicodeEncodeError:
        return encoder.encode(_mended(value)).decode()


def _mended(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mended(v) for v in value]
    return value


def loads(text: str | bytes) -> Any:
    """JSON text as Python values, exactly as `json.loads` reads them."""
    try:
        return _DECODER.decode(text)
    except msgspec.MsgspecError:
        return json.loads(text)
