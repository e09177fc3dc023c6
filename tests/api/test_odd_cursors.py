"""Every list that takes a `cursor` answers 400 problem+json, never a 500, to a cursor it did not
hand out: bare numbers (`1e308`, NaN), JSON documents whose values are huge, infinite or NaN
numbers, and integers past any column's range."""

from __future__ import annotations

import base64
import re

import pytest

from sokovan.manager.api.app import all_routes
from tests.api.conftest import Api
from tests.api.deployment_helpers import add_model_agent, add_route, created
from tests.api.test_auth_and_errors import assert_problem


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


KEYS = ("t", "id", "seq", "name")
ODD_CURSORS: list[str] = [
    "1e308",
    "-1e308",
    "NaN",
    "Infinity",
    "9" * 400,
    _b64("1e308"),
    _b64("NaN"),
    _b64("9" * 400),
    *[_b64(f'{{"{k}": {v}}}') for k in KEYS for v in ("1e308", "1e999", "-1e999", "NaN", "Infinity")],
    *[_b64(f'{{"{k}": {"9" * 400}}}') for k in KEYS],
    _b64('{"t": 1e308, "id": 1e308}'),
    _b64('{"t": NaN, "id": NaN}'),
    _b64('{"t": "2024-01-01T00:00:00+00:00", "id": 1e308}'),
]


def cursor_paths() -> list[str]:
    """The paths of every GET route that takes a `cursor` query parameter."""
    return sorted(
        r.path
        for r in all_routes()
        if r.method == "GET" and any(p.name == "cursor" and p.where == "query" for p in r.params)
    )


def test_the_lists_are_found() -> None:
    paths = cursor_paths()
    assert "/v2/sessions" in paths and "/v2/deployments/{id}/routes" in paths, paths


@pytest.mark.parametrize("raw", ODD_CURSORS, ids=range(len(ODD_CURSORS)))
async def test_odd_cursors_are_400_on_every_list(api: Api, raw: str) -> None:
    sid = (await (await api.create(api.alice)).json())["id"]
    await add_model_agent(api)
    did = (await created(api, api.admin))["id"]
    rid = str(await add_route(api, did, "HEALTHY"))
    idents = {"/v2/sessions/": sid, "/v2/deployments/": did, "/v2/agents/": "agent-1", "/v2/routes/": rid}
    for template in cursor_paths():
        ident = next((v for k, v in idents.items() if template.startswith(k)), "")
        path = re.sub(r"\{[^}]+\}", ident, template)
        for params in ({"cursor": raw}, {"cursor": raw, "limit": "1"}):
            resp = await api.client.get(path, params=params, headers=api.admin)
            body = await assert_problem(resp, 400)
            assert "Traceback" not in str(body), (path, raw)
