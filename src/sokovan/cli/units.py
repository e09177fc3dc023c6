"""Sizes as people read them: the CLI prints memory slots in binary units (`mem=256 MiB`) unless
asked for raw values (`--bytes`, `--json`).

The API gives slots as strings of decimals (`{"cpu": "1", "mem": "268435456"}`); a memory slot is
`mem` or any slot whose name ends in `.mem` (as the console reads them too). Other slots are
printed as they come, a count with no trailing zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import click

TENTH = Decimal("0.1")
UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

BYTES_OPTION = click.option(
    "--bytes",
    "raw_bytes",
    is_flag=True,
    help="Print memory sizes in bytes (for scripts) instead of KiB/MiB/GiB.",
)


def is_size(slot: str) -> bool:
    """Whether the slot named `slot` is a size in bytes."""
    return slot == "mem" or slot.endswith(".mem")


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _plain(number: Decimal) -> str:
    """A decimal without exponent or trailing zeros: 1, 0.5, 268435456."""
    text = f"{number:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def size_text(value: Any) -> str:
    """Bytes in the largest binary unit that keeps the number at 1 or more, to one decimal where
    it is not whole: 268435456 → `256 MiB`, 1610612736 → `1.5 GiB`, 512 → `512 B`. A value that
    is not a number is returned as it came."""
    if value is None:
        return "-"
    number = _number(value)
    if number is None:
        return str(value)
    sign = "-" if number < 0 else ""
    scaled, unit = abs(number), 0
    while scaled >= 1024 and unit < len(UNITS) - 1:
        scaled /= 1024
        unit += 1
    rounded = scaled.quantize(TENTH, rounding=ROUND_HALF_UP)
    if rounded >= 1024 and unit < len(UNITS) - 1:  # 1023.96 KiB reads as 1 MiB, not 1024 KiB
        rounded, unit = (rounded / 1024).quantize(TENTH, rounding=ROUND_HALF_UP), unit + 1
    return f"{sign}{_plain(rounded)} {UNITS[unit]}"


def slot_text(slot: str, value: Any, *, raw: bool = False) -> str:
    """One slot's amount: a size in binary units (bytes with `raw`), any other a plain number."""
    if is_size(slot) and not raw:
        return size_text(value)
    number = _number(value)
    return _plain(number) if number is not None else str(value)


def slots_text(slots: Mapping[str, Any] | None, *, raw: bool = False, empty: str = "-") -> str:
    """`cpu=1, mem=256 MiB`; `empty` when there are none."""
    parts = [f"{slot}={slot_text(slot, value, raw=raw)}" for slot, value in (slots or {}).items()]
    return ", ".join(parts) or empty


_SPAN_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def span_seconds(text: str, option: str) -> int:
    """A span as people write it (`90`, `90s`, `30m`, `2h`, `7d`, `1w`) in whole seconds; a
    `click.BadParameter` naming `option` for anything else."""
    value = text.strip().lower()
    unit = _SPAN_UNITS.get(value[-1:], 0)
    digits = value[:-1] if unit else value
    if not digits.isdigit() or int(digits) <= 0:
        raise click.BadParameter(
            f"{text!r} is not a span: a positive whole number of seconds, or one followed by s, m, h, d or w",
            param_hint=option,
        )
    return int(digits) * (unit or 1)
