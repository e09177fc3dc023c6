"""`GET /` on the manager, without a token: a browser is sent to the console, any other client
gets what the server is and where its API and console are."""

from __future__ import annotations

from tests.api.conftest import Api
from tests.api.test_auth_and_errors import assert_problem

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


async def test_a_browser_is_redirected_to_the_console(api: Api) -> None:
    resp = await api.client.get("/", headers={"Accept": BROWSER_ACCEPT}, allow_redirects=False)
    assert resp.status == 302
    assert resp.headers["Location"] == "/ui/"
    assert "Accept" in resp.headers.get("Vary", "")
    followed = await api.client.get("/", headers={"Accept": BROWSER_ACCEPT})
    assert followed.status == 200 and followed.content_type == "text/html"


async def test_any_other_client_gets_the_version_and_where_things_are(api: Api) -> None:
    for headers in ({}, {"Accept": "application/json"}, {"Accept": "*/*"}):
        resp = await api.client.get("/", headers=headers, allow_redirects=False)
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "application/json"
        assert await resp.json() == {"version": "v9.20250722", "api": "/v2", "console": "/ui/"}


async def test_a_token_changes_nothing_and_other_methods_are_405(api: Api) -> None:
    resp = await api.client.get("/", headers={**api.admin, "Accept": "application/json"})
    assert (await resp.json())["version"] == "v9.20250722"
    resp = await api.client.get("/", headers={"Authorization": "Bearer nope"})
    assert resp.status == 200  # no token needed, a bad one is not looked at
    await assert_problem(await api.client.post("/"), 405)
    await assert_problem(await api.client.get("/v2/sessions"), 401)  # the rest still needs one
