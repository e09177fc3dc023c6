"""Resource slots: a mapping of slot name to a non-negative decimal amount.

Memory takes bytes or binary units ("512m" = 512 MiB, "8g" = 8 GiB). Slots travel as
strings of decimals in JSON so that no precision is lost. Every amount is at most `MAX_AMOUNT`
(after units: memory in bytes) with at most `MAX_PLACES` decimal places, so that sums and
products of slots stay exact; what a session asks for must also be positive (`positive_request`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_NAME_RE = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
MAX_AMOUNT = Decimal(10) ** 15
MAX_PLACES = 6


class SlotError(ValueError):
    """A slot name or amount that cannot be understood."""


def parse_amount(name: str, value: object) -> Decimal:
    """Parse one slot amount; memory-like slots accept binary units."""
    if isinstance(value, bool):
        raise SlotError(f"slot {name!r}: expected a number, got {value!r}")
    if isinstance(value, int) and abs(value) > MAX_AMOUNT:  # before Decimal: no huge arithmetic
        raise SlotError(f"slot {name!r}: amount must be at most {MAX_AMOUNT:.0e}")
    if isinstance(value, int | Decimal):
        amount = Decimal(value)
    elif isinstance(value, float):
        amount = Decimal(str(value))
    elif isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match is None:
            raise SlotError(f"slot {name!r}: {value!r} is not a number or a size like '512m'")
        number, unit = match.groups()
        if unit and name != "mem" and not name.endswith(".mem"):
            raise SlotError(f"slot {name!r}: size units are only allowed for memory slots")
        try:
            amount = Decimal(number) * _UNITS[unit.lower()]
        except InvalidOperation as exc:  # pragma: no cover - the regex admits only digits
            raise SlotError(f"slot {name!r}: {value!r} is not a number") from exc
    else:
        raise SlotError(f"slot {name!r}: expected a number or a string, got {type(value).__name__}")
    return _bounded(name, amount)


def _bounded(name: str, amount: Decimal) -> Decimal:
    """`amount` in its canonical form, if it is finite, non-negative and within the bounds."""
    if not amount.is_finite() or amount < 0:
        raise SlotError(f"slot {name!r}: amount must be a finite non-negative number")
    if amount > MAX_AMOUNT:
        raise SlotError(f"slot {name!r}: amount must be at most {MAX_AMOUNT:.0e}")
    if amount != amount.to_integral_value():
        amount = amount.normalize()
        exponent = amount.as_tuple().exponent
        if isinstance(exponent, int) and -exponent > MAX_PLACES:
            raise SlotError(f"slot {name!r}: at most {MAX_PLACES} decimal places")
        return amount
    return amount.quantize(Decimal(1))


def positive_request(slots: Mapping[str, Decimal]) -> ResourceSlots:
    """What one kernel asks for: every slot it names must be more than zero (a slot it does not
    need is left out), so that no session runs on nothing."""
    zero = sorted(name for name, amount in slots.items() if amount <= 0)
    if zero:
        raise SlotError(f"{', '.join(zero)} must be more than 0 (leave out a slot that is not needed)")
    return ResourceSlots(slots)


_ZERO = Decimal(0)


class ResourceSlots(dict[str, Decimal]):
    """Slot name → decimal amount, with the arithmetic placement needs."""

    @classmethod
    def parse(cls, raw: Mapping[str, object]) -> ResourceSlots:
        slots = cls()
        for name, value in raw.items():
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise SlotError(f"invalid slot name {name!r}")
            slots[name] = parse_amount(name, value)
        return slots

    @classmethod
    def parse_cli(cls, text: str) -> ResourceSlots:
        """Parse `cpu=4,mem=8g,cuda.device=2`."""
        raw: dict[str, object] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            if not sep:
                raise SlotError(f"expected NAME=AMOUNT, got {part!r}")
            raw[name.strip()] = value.strip()
        return cls.parse(raw)

    @classmethod
    def from_json(cls, raw: Mapping[str, str] | None) -> ResourceSlots:
        return cls({k: Decimal(v) for k, v in (raw or {}).items()})

    def to_json(self) -> dict[str, str]:
        return {k: _fmt(v) for k, v in sorted(self.items())}

    def __add__(self, other: Mapping[str, Decimal]) -> ResourceSlots:
        out = ResourceSlots(self)
        for k, v in other.items():
            out[k] = out.get(k, Decimal(0)) + v
        return out

    def __sub__(self, other: Mapping[str, Decimal]) -> ResourceSlots:
        out = ResourceSlots(self)
        for k, v in other.items():
            out[k] = out.get(k, Decimal(0)) - v
        return out

    def scaled(self, factor: int) -> ResourceSlots:
        return ResourceSlots({k: v * factor for k, v in self.items()})

    def fits_in(self, capacity: Mapping[str, Decimal]) -> bool:
        """`not shortfall(capacity)`, without building the list (placement asks it a lot)."""
        for k, v in self.items():
            if v > 0 and v > capacity.get(k, _ZERO):
                return False
        return True

    def shortfall(self, capacity: Mapping[str, Decimal]) -> list[str]:
        """Names of the slots this request needs more of than `capacity` has."""
        return sorted(k for k, v in self.items() if v > 0 and v > capacity.get(k, Decimal(0)))

    @staticmethod
    def total(items: Iterable[Mapping[str, Decimal]]) -> ResourceSlots:
        out = ResourceSlots()
        for item in items:
            out = out + item
        return out


def _fmt(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(value.quantize(Decimal(1)))
    return format(value.normalize(), "f")
