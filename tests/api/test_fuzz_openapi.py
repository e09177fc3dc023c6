"""Schemathesis over `/v2/openapi.json` against the real API (PostgreSQL, Redis, etcd), with an
admin's token and a user's: no input gets a 5xx, every 4xx is a problem document, and a refused
request leaves every table as it was.

Bounded for CI: a fixed seed and a few examples per operation, valid (positive) and invalid
(negative) ones. The server runs on this test's event loop; the generated requests are sent
from a worker thread, which asks the loop for a checksum of the database around each one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.db.models import Base
from tests.api.conftest import Api

PROBLEM = "application/problem+json"
EXAMPLES = 12  # per operation, token and mode


async def table_checksums(engine: AsyncEngine) -> dict[str, str]:
    """Each table's row count and an md5 of its rows: equal maps, equal contents."""
    out = {}
    async with engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            row = (
                await conn.execute(
                    text(
                        f"SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) "
                        f'FROM "{table.name}" t'
                    )
                )
            ).one()
            out[table.name] = f"{row[0]}:{row[1]}"
    return out


# Values that name what exists, so that generated requests get past "unknown image/group/id" to
# the checks behind them: each is put in place of the generated one half of the time.
KNOWN = {"image": "python:3", "scaling_group": "default"}


STATS: dict[Any, int] = {}


def anchor(case: Any, data: Any) -> None:
    if isinstance(case.body, dict):
        for key, value in KNOWN.items():
            if key in case.body and data.draw(st.booleans()):
                case.body[key] = value
    ids = KNOWN.get("session_ids")
    if case.path_parameters and "id" in case.path_parameters and ids and data.draw(st.booleans()):
        case.path_parameters["id"] = data.draw(st.sampled_from(ids))


def fuzz_operation(
    operation: Any,
    mode: GenerationMode,
    base_url: str,
    headers: dict[str, str],
    checksum: Callable[[], dict[str, str]],
    failures: list[str],
) -> None:
    strategy = operation.as_strategy(generation_mode=mode, headers=headers)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, data=st.data())
    def run(case: Any, data: Any) -> None:
        anchor(case, data)
        before = checksum()
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        where = f"{case.method} {case.formatted_path} {case.query} {case.body!r:.300}"
        status = response.status_code
        STATS[(case.method, case.path, status)] = STATS.get((case.method, case.path, status), 0) + 1
        if status >= 500:
            failures.append(f"{status} on {where}: {response.text[:300]}")
            return
        if 400 <= status < 500:
            headers_ = {k.lower(): v for k, v in response.headers.items()}
            content_type = headers_.get("content-type", [""])[0].split(";")[0]
            if content_type != PROBLEM:
                failures.append(f"{status} is {content_type!r}, not a problem, on {where}")
            after = checksum()
            if after != before:
                changed = sorted(k for k in after if after[k] != before.get(k))
                failures.append(f"{status} on {where} changed tables {changed}")

    try:
        run()
    except Unsatisfiable:
        # An operation with nothing to get wrong (no parameters, no body) has no negative case.
        if mode is not GenerationMode.NEGATIVE:
            raise


async def test_no_input_gets_a_5xx_and_refusals_write_nothing(api: Api) -> None:
    resp = await api.client.get("/v2/openapi.json")
    document = await resp.json()
    schema = schemathesis.openapi.from_dict(document)
    base_url = str(api.client.make_url("")).rstrip("/")
    loop = asyncio.get_running_loop()
    made = [await api.create(token) for token in (api.admin, api.alice)]
    KNOWN["session_ids"] = [(await r.json())["id"] for r in made]  # type: ignore[assignment]

    def checksum() -> dict[str, str]:
        return asyncio.run_coroutine_threadsafe(table_checksums(api.engine), loop).result(60)

    skipped = {"/v2/events"}  # a stream: it answers 200 and stays open (tests/api/test_events.py)
    operations = [
        r.ok()
        for r in schema.get_all_operations()
        if r.ok().path not in skipped  # type: ignore[union-attr]
    ]
    failures: list[str] = []

    def fuzz_all() -> None:
        for operation in operations:
            for token in (api.admin, api.alice):
                for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                    fuzz_operation(operation, mode, base_url, token, checksum, failures)

    await asyncio.to_thread(fuzz_all)
    for k, v in sorted(STATS.items()):
        print("STAT", k, v)
    assert not failures, "\n".join(failures[:40])
