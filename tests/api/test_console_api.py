"""The console's server side: `GET /v2/whoami`, the static files under `/ui/` and the events the
page lives on (`session.created`)."""

from __future__ import annotations

import re
import uuid

from sokovan.manager.api.console import STATIC_DIR
from tests.api.conftest import Api, user_id
from tests.api.test_auth_and_errors import assert_problem
from tests.api.test_events import next_event, stream


async def test_whoami_names_the_tokens_owner_and_role(api: Api) -> None:
    resp = await api.client.get("/v2/whoami", headers=api.admin)
    assert resp.status == 200
    admin = await resp.json()
    assert admin.keys() == {"access_key", "user", "project", "domain", "role"}
    assert (admin["user"], admin["project"], admin["domain"], admin["role"]) == (
        "admin",
        "default",
        "default",
        "admin",
    )
    resp = await api.client.get("/v2/whoami", headers=api.alice)
    alice = await resp.json()
    assert (alice["user"], alice["role"]) == ("alice", "user") and alice["access_key"] != admin["access_key"]
    await assert_problem(await api.client.get("/v2/whoami"), 401)
    await assert_problem(await api.client.get("/v2/whoami", headers={"Authorization": "Bearer nope"}), 401)


async def test_the_console_is_served_without_a_token_with_a_strict_policy(api: Api) -> None:
    resp = await api.client.get("/ui", allow_redirects=False)
    assert resp.status == 301 and resp.headers["Location"] == "/ui/"
    resp = await api.client.get("/ui/")
    assert resp.status == 200 and resp.content_type == "text/html"
    page = await resp.text()
    assert 'id="token"' in page and 'type="password"' in page
    policy = resp.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe" not in policy
    assert resp.headers["X-Content-Type-Options"] == "nosniff"
    resp = await api.client.get("/ui/app.js")
    assert resp.status == 200 and resp.content_type == "text/javascript"
    assert (await api.client.get("/ui/console.css")).content_type == "text/css"


async def test_unknown_or_escaping_console_paths_are_404_problems(api: Api) -> None:
    # ("/ui/%2e%2e" alone the client itself normalizes to "/", the root document since issue 31)
    for path in ("/ui/nope.js", "/ui/..%2Fapi%2Fapp.py", "/ui/%2e%2e/api/app.py", "/ui/sub/app.js"):
        await assert_problem(await api.client.get(path), 404)


def test_every_module_the_page_loads_is_shipped() -> None:
    """A typo in an import would leave the page blank: every `./x.js` named is a shipped file."""
    shipped = {p.name for p in STATIC_DIR.iterdir()}
    named: set[str] = set()
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        named |= set(re.findall(r"""from\s+["']\./([\w.-]+)["']""", text))
        named |= set(re.findall(r"""(?:src|href)=["']([\w.-]+\.(?:js|css))["']""", text))
    assert named and named <= shipped, named - shipped
    # Nothing is fetched from elsewhere at run time.
    for path in STATIC_DIR.iterdir():
        assert not re.search(r"https?://", path.read_text()), path.name


async def test_a_create_is_announced_to_its_owner_and_admins_only(api: Api) -> None:
    alice = await user_id(api, "alice")
    async with (
        stream(api, api.admin) as admins,
        stream(api, api.alice) as alices,
        stream(api, api.bob) as bobs,
    ):
        resp = await api.create(api.alice, type="interactive", image="shell", command=None)
        assert resp.status == 201, await resp.text()
        sid = (await resp.json())["id"]
        for s in (admins, alices):
            name, data = await next_event(s)
            assert (name, data["session_id"], data["to"], data["owner"]) == (
                "session.created",
                sid,
                "PENDING",
                alice,
            )
        # bob hears nothing of it; his own create is the next thing he hears.
        resp = await api.create(api.bob, type="interactive", image="shell", command=None)
        name, data = await next_event(bobs)
        assert (name, data["session_id"]) == ("session.created", (await resp.json())["id"])
        assert data["session_id"] != sid
    assert uuid.UUID(sid)
