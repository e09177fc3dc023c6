"""`common.json_text`: the manager's engine decodes JSON columns with msgspec, falling back to
Python's json for what msgspec refuses (every value stored comes back as Python's own decoder would
give it), and the writers' batches are encoded by msgspec into JSON PostgreSQL reads as it read
`json.dumps`'s."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import uuid

import pytest
from sqlalchemy import text

from sokovan.common.json_text import dumps
from sokovan.common.json_text import loads as json_loads
from sokovan.common.settings import Settings
from sokovan.db.engine import make_engine

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


BATCH = [
    {"n": 123456789012345678901234567890, "t": 'é " \\ \n\u2028 end', "d": {"k": [1, 2.5, None, True]}},
    {"n": -1, "t": "", "d": {}},
    {"n": 0, "t": "lone \ud800", "d": {"k\udfff": "v"}},
]
STORED = [*BATCH[:2], {"n": 0, "t": "lone \ufffd", "d": {"k\ufffd": "v"}}]


def test_dumps_writes_what_json_reads_back_alike() -> None:
    assert json.loads(dumps(BATCH)) == STORED
    assert (
        dumps({"at": dt.datetime(2026, 11, 30, 1, 2, 3, 4, tzinfo=dt.UTC)})
        == '{"at":"2026-11-30T01:02:03.000004Z"}'
    )
    assert dumps([math.nan, math.inf]) == "[null,null]"  # json.dumps: NaN, which PostgreSQL refuses
    # a lone surrogate (an agent's message may carry one): U+FFFD, where json.dumps wrote an
    # escape PostgreSQL refused
    assert dumps({"m\ud800": ["a\udc00b", ("\ud83d",)]}) == '{"m\ufffd":["a\ufffdb",["\ufffd"]]}'


class _Odd:
    def __str__(self) -> str:
        return "odd"


def test_as_text_writes_what_json_cannot_say_as_its_str() -> None:
    value = {"o": _Odd(), "u": uuid.UUID(int=1), "d": decimal.Decimal("1.50")}
    assert dumps(value, as_text=True) == '{"o":"odd","u":"00000000-0000-0000-0000-000000000001","d":"1.50"}'
    with pytest.raises(TypeError):
        dumps(value)


async def test_a_batch_reads_back_through_jsonb_to_recordset(settings: Settings) -> None:
    engine = make_engine(settings.db_url, pool_size=1, max_overflow=0)
    try:
        async with engine.connect() as conn:
            rows = (
                await conn.execute(
                    text(
                        "SELECT n::text AS n, t AS txt, d FROM jsonb_to_recordset(CAST(:b AS jsonb)) "
                        "AS v(n numeric, t text, d jsonb)"
                    ),
                    {"b": dumps(BATCH)},
                )
            ).all()
        assert [(int(r.n), r.txt, r.d) for r in rows] == [(b["n"], b["t"], b["d"]) for b in STORED]
    finally:
        await engine.dispose()
