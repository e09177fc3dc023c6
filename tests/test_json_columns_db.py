"""The manager's engine decodes JSON columns with msgspec, falling back to Python's json for what
msgspec refuses: every value stored comes back as Python's own decoder would give it."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from sokovan.common.settings import Settings
from sokovan.db.engine import json_loads, make_engine

SAMPLES = [
    '{"a": 123456789012345678901234567890, "b": [1.5, -0, null, true], "c": "é\\u00e9"}',
    '{"big": -98765432109876543210987654321}',
    "[1e400]",  # past a float's range: msgspec refuses it, json reads inf
    '"\\ud800"',  # a lone surrogate: the same
    "{}",
]


@pytest.mark.parametrize("raw", SAMPLES)
def test_decodes_as_python_does(raw: str) -> None:
    assert repr(json_loads(raw)) == repr(json.loads(raw))
    assert repr(json_loads(raw.encode())) == repr(json.loads(raw))


def test_malformed_json_is_still_an_error() -> None:
    with pytest.raises(ValueError):
        json_loads("{bad")


async def test_json_and_jsonb_columns_come_back_exact(settings: Settings) -> None:
    engine = make_engine(settings.db_url, pool_size=1, max_overflow=0)
    assert engine.dialect._json_deserializer is json_loads
    try:
        async with engine.connect() as conn:
            for raw in SAMPLES[:2]:
                for kind in ("json", "jsonb"):
                    row = (await conn.execute(text(f"SELECT CAST(:v AS {kind}) AS v"), {"v": raw})).one()
                    assert row.v == json.loads(raw), (kind, raw)
    finally:
        await engine.dispose()
