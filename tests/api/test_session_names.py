"""A session by its name or an id prefix wherever a REST v2 path takes its id (CONTRACT section 17):
live first, then the newest ended one; an ambiguous one is 409 with its candidates; another
owner's is 404, like one that does not exist."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import insert, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.common.types import Role
from sokovan.db.models import Session
from sokovan.manager.context import ManagerContext
from sokovan.manager.controller.session_spec import NAME_PATTERN
from sokovan.manager.repositories import session_lookup
from sokovan.manager.repositories.tenancy import Principal, resolve_token
from tests.api.conftest import Api, user_id
from tests.api.test_auth_and_errors import assert_problem
from tests.api.test_events import next_event, stream, wait_no_subscribers
from tests.support import statements_sent

TAILS = ("", "/attempts", "/history", "/logs")


async def _create(api: Api, headers: dict[str, str], **body: Any) -> str:
    resp = await api.create(headers, **body)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["id"])


async def _get(api: Api, ref: str, headers: dict[str, str], tail: str = "") -> Any:
    resp = await api.client.get(f"/v2/sessions/{ref}{tail}", headers=headers)
    assert resp.status == 200, (ref, tail, await resp.text())
    return await resp.json()


async def _id_of(api: Api, ref: str, headers: dict[str, str]) -> str:
    return str((await _get(api, ref, headers))["id"])


async def _cancel(api: Api, ref: str, headers: dict[str, str]) -> dict[str, Any]:
    resp = await api.client.delete(f"/v2/sessions/{ref}", headers=headers)
    assert resp.status == 202, await resp.text()
    body: dict[str, Any] = await resp.json()
    assert body["status"] == "CANCELLED"
    return body


async def _clone(engine: AsyncEngine, source: str, new_id: str, **changes: Any) -> None:
    """A copy of session `source`'s row (no kernels) under an id chosen by the test."""
    async with engine.begin() as conn:
        row = (await conn.execute(select(Session.__table__).where(Session.id == uuid.UUID(source)))).one()
        values = {**row._asdict(), "id": uuid.UUID(new_id), "creation_id": None, **changes}
        await conn.execute(insert(Session).values(**values))


async def _principal(api: Api, headers: dict[str, str]) -> Principal:
    async with api.engine.connect() as conn:
        principal = await resolve_token(conn, headers["Authorization"].removeprefix("Bearer "))
    assert principal is not None
    return principal


async def _ambiguous(resp: Any, *expected: str) -> None:
    body = await assert_problem(resp, 409)
    candidates = body["candidates"]
    assert isinstance(candidates, list) and sorted(candidates) == sorted(expected)
    assert str(body["type"]).endswith("/ambiguous-session")
    for sid in expected:
        assert sid in str(body["detail"])


# -- names -------------------------------------------------------------------------------------


async def test_a_name_works_for_every_verb(api: Api) -> None:
    sid = await _create(api, api.alice, name="train-1")
    await _create(api, api.alice, name="other")
    assert (await _get(api, "train-1", api.alice))["id"] == sid
    attempts = await _get(api, "train-1", api.alice, "/attempts")
    assert [a["id"] for a in attempts["items"]] == [sid]
    history = await _get(api, "train-1", api.alice, "/history")
    assert [h["to_status"] for h in history["items"]] == ["PENDING"]
    assert await _get(api, "train-1", api.alice, "/logs") == {"items": []}  # no kernel placed yet
    assert (await _cancel(api, "train-1", api.alice))["id"] == sid
    # ended now: still its name (the newest ended session of that name), and DELETE stays idempotent
    assert (await _cancel(api, "train-1", api.alice))["id"] == sid
    history = await _get(api, "train-1", api.alice, "/history")
    assert [h["to_status"] for h in history["items"]] == ["PENDING", "CANCELLED"]
    for tail in TAILS:
        await assert_problem(await api.client.get(f"/v2/sessions/train-2{tail}", headers=api.alice), 404)
    await assert_problem(await api.client.delete("/v2/sessions/train-2", headers=api.alice), 404)


async def test_live_first_then_the_newest_ended(api: Api) -> None:
    first = await _create(api, api.alice, name="job")
    await _cancel(api, first, api.alice)
    second = await _create(api, api.alice, name="job")
    await _cancel(api, second, api.alice)
    assert await _id_of(api, "job", api.alice) == second  # none live: the newest ended
    live = await _create(api, api.alice, name="job")
    assert await _id_of(api, "job", api.alice) == live  # a live one comes before any ended one
    assert (await _get(api, "job", api.alice, "/attempts"))["items"][0]["id"] == live
    await _cancel(api, "job", api.alice)
    assert await _id_of(api, "job", api.alice) == live  # now the newest ended
    # a live session comes first however old it is (the oldest one, put back to PENDING by hand)
    async with api.engine.begin() as conn:
        await conn.execute(
            Session.__table__.update()
            .where(Session.id == uuid.UUID(first))
            .values(status="PENDING", terminated_at=None)
        )
    assert await _id_of(api, "job", api.alice) == first


async def test_two_live_sessions_of_one_name_are_409_with_the_candidates(api: Api) -> None:
    one = await _create(api, api.alice, name="twin")
    two = await _create(api, api.alice, name="twin")
    ended = await _create(api, api.alice, name="twin")
    await _cancel(api, ended, api.alice)  # an ended one is no candidate while live ones exist
    for tail in TAILS:
        await _ambiguous(await api.client.get(f"/v2/sessions/twin{tail}", headers=api.alice), one, two)
    await _ambiguous(await api.client.delete("/v2/sessions/twin", headers=api.alice), one, two)
    assert [(await _get(api, s, api.alice))["status"] for s in (one, two)] == ["PENDING", "PENDING"]
    await _cancel(api, one, api.alice)
    assert await _id_of(api, "twin", api.alice) == two


async def test_the_default_name_is_a_name(api: Api) -> None:
    sid = await _create(api, api.alice)
    name = f"s-{uuid.UUID(sid).hex[:8]}"
    assert (await _get(api, sid, api.alice))["name"] == name
    assert await _id_of(api, name, api.alice) == sid
    await assert_problem(await api.client.get(f"/v2/sessions/{name.upper()}", headers=api.alice), 404)
    assert (await _cancel(api, name, api.alice))["id"] == sid


# -- id prefixes -------------------------------------------------------------------------------


async def test_an_id_prefix_of_eight_or_more_hex_characters(api: Api) -> None:
    sid = await _create(api, api.alice, name="p")
    for ref in (sid[:8], sid[:8].upper(), sid[:9], sid[:13], sid[:14], sid[:35], uuid.UUID(sid).hex[:20]):
        assert await _id_of(api, ref, api.alice) == sid, ref
    for tail in TAILS:
        assert (await api.client.get(f"/v2/sessions/{sid[:8]}{tail}", headers=api.alice)).status == 200
    for ref in (sid[:7], sid[:4] + "-" + sid[4:12], sid[:8] + "--", sid[:8] + "g"):
        for tail in TAILS:
            await assert_problem(await api.client.get(f"/v2/sessions/{ref}{tail}", headers=api.alice), 404)
    assert (await _cancel(api, sid[:10], api.alice))["id"] == sid
    assert await _id_of(api, sid[:8], api.alice) == sid  # an ended session's prefix too


async def test_an_ambiguous_prefix_is_409_with_the_candidates(api: Api) -> None:
    source = await _create(api, api.alice, name="src")
    a = "abcdef01-0000-4000-8000-000000000001"
    b = "abcdef01-1111-4000-8000-000000000002"
    await _clone(api.engine, source, a, name="clone-a")
    await _clone(api.engine, source, b, name="clone-b", status="CANCELLED")  # ended ones count too
    for ref in ("abcdef01", "ABCDEF01", "abcdef01-"):
        for tail in TAILS:
            await _ambiguous(await api.client.get(f"/v2/sessions/{ref}{tail}", headers=api.alice), a, b)
        await _ambiguous(await api.client.delete(f"/v2/sessions/{ref}", headers=api.alice), a, b)
    assert await _id_of(api, "abcdef01-0", api.alice) == a
    assert await _id_of(api, "abcdef011", api.alice) == b
    await assert_problem(await api.client.get("/v2/sessions/abcdef01-2", headers=api.alice), 404)
    assert await _id_of(api, "clone-a", api.alice) == a


async def test_a_name_comes_before_an_id_prefix(api: Api) -> None:
    target = await _create(api, api.alice, name="target")
    prefix = target[:8]
    named = await _create(api, api.alice, name=prefix)
    assert await _id_of(api, prefix, api.alice) == named
    assert await _id_of(api, target[:9], api.alice) == target


# -- owners ------------------------------------------------------------------------------------


async def test_another_owners_name_and_prefix_are_404(api: Api) -> None:
    bobs = await _create(api, api.bob, name="secret")
    await _create(api, api.alice, name="mine")
    for ref in ("secret", bobs[:8], bobs[:13], f"s-{uuid.UUID(bobs).hex[:8]}"):
        for tail in TAILS:
            body = await assert_problem(
                await api.client.get(f"/v2/sessions/{ref}{tail}", headers=api.alice), 404
            )
            assert str(body["type"]).endswith("/not-found")
        await assert_problem(await api.client.delete(f"/v2/sessions/{ref}", headers=api.alice), 404)
    assert (await _get(api, "secret", api.bob))["status"] == "PENDING"  # alice's DELETE did nothing
    # an admin sees every owner's sessions: the lookup is over all of them
    assert await _id_of(api, "secret", api.admin) == bobs
    assert await _id_of(api, bobs[:8], api.admin) == bobs


async def test_one_name_for_two_owners(api: Api) -> None:
    alices = await _create(api, api.alice, name="shared")
    bobs = await _create(api, api.bob, name="shared")
    assert await _id_of(api, "shared", api.alice) == alices  # bob's is no candidate for alice
    assert await _id_of(api, "shared", api.bob) == bobs
    await _ambiguous(await api.client.get("/v2/sessions/shared", headers=api.admin), alices, bobs)


# -- events ------------------------------------------------------------------------------------


async def test_events_take_a_name_or_a_prefix(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    alice = await user_id(api, "alice")
    watched = await _create(api, api.alice, name="watched")
    other = await _create(api, api.alice, name="other")
    twice = [await _create(api, api.alice, name="twice") for _ in range(2)]
    await _create(api, api.bob, name="bobs")
    async with (
        stream(api, api.alice, session_id="watched") as by_name,
        stream(api, api.alice, session_id=watched[:8]) as by_prefix,
        stream(api, api.admin, session_id="watched") as admins,
    ):
        await publisher.publish_many(
            [
                UserEvent(
                    name="session.status",
                    session_id=other,
                    owner=alice,
                    **{"from": "PENDING", "to": "CANCELLED"},
                ),
                UserEvent(
                    name="session.status",
                    session_id=watched,
                    owner=alice,
                    **{"from": "PENDING", "to": "SCHEDULED"},
                ),
            ]
        )
        for resp in (by_name, by_prefix, admins):
            name, data = await next_event(resp)
            assert (name, data["session_id"], data["to"]) == ("session.status", watched, "SCHEDULED")
    for ref in ("nothing", "bobs", "abc"):
        body = await assert_problem(
            await api.client.get("/v2/events", params={"session_id": ref}, headers=api.alice), 400
        )
        assert "session_id" in str(body["detail"])
    await _ambiguous(
        await api.client.get("/v2/events", params={"session_id": "twice"}, headers=api.alice), *twice
    )
    await wait_no_subscribers(ctx)


# -- the statement, the document ---------------------------------------------------------------


def test_what_can_be_a_name_is_what_a_create_takes() -> None:
    assert session_lookup.NAME_RE.pattern == NAME_PATTERN
    principal = Principal("AK", uuid.uuid4(), "u", uuid.uuid4(), "default", Role.USER)
    for ref in ("-x", "a/b", "a b", "x" * 129, "\u00e9t\u00e9", "%FF"):
        assert session_lookup.lookup_query(ref, principal) is None, ref


def test_id_range() -> None:
    lo = uuid.UUID("cb46a98d-0000-0000-0000-000000000000")
    hi = uuid.UUID("cb46a98d-ffff-ffff-ffff-ffffffffffff")
    assert session_lookup.id_range("cb46a98d") == (lo, hi)
    assert session_lookup.id_range("CB46A98D-") == (lo, hi)
    assert session_lookup.id_range("cb46a98d-12") == (
        uuid.UUID("cb46a98d-1200-0000-0000-000000000000"),
        uuid.UUID("cb46a98d-12ff-ffff-ffff-ffffffffffff"),
    )
    assert session_lookup.id_range("cb46a98d12") == session_lookup.id_range("cb46a98d-12")
    for ref in ("cb46a98", "cb46-a98d", "cb46a98d-1-", "s-cb46a98d", "cb46a98g", "", "-" * 12):
        assert session_lookup.id_range(ref) is None, ref


async def test_a_lookup_is_one_statement_over_indexes(api: Api) -> None:
    sid = await _create(api, api.alice, name="indexed")
    for who in (api.alice, api.admin):
        principal = await _principal(api, who)
        for ref, by in (("indexed", "name"), (sid[:8], "prefix")):
            async with api.engine.connect() as conn:
                with statements_sent(api.engine) as sent:
                    found = await session_lookup.resolve(conn, ref, principal)
            assert (found.session_id, found.by) == (uuid.UUID(sid), by)
            assert len(sent) == 1
        query = session_lookup.lookup_query(sid[:8], principal)
        assert query is not None
        compiled = query.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True})
        async with api.engine.connect() as conn:
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            plan = "\n".join(r[0] for r in await conn.exec_driver_sql(f"EXPLAIN {compiled}"))
        assert "ix_sessions_name_user_created" in plan, plan
        assert "pk_sessions" in plan, plan
        assert "Seq Scan" not in plan, plan
        if who is api.alice:  # the index gives a user's sessions of a name newest first: no sort
            assert "Index Scan Backward using ix_sessions_name_user_created" in plan, plan
            assert plan.count("Sort  (cost") == 1, plan  # the union's own few rows only


async def test_openapi_says_what_the_id_takes(api: Api) -> None:
    doc = await (await api.client.get("/v2/openapi.json")).json()
    for path, method in (
        ("/v2/sessions/{id}", "get"),
        ("/v2/sessions/{id}", "delete"),
        ("/v2/sessions/{id}/attempts", "get"),
        ("/v2/sessions/{id}/history", "get"),
        ("/v2/sessions/{id}/logs", "get"),
    ):
        op = doc["paths"][path][method]
        (param,) = [p for p in op["parameters"] if p["name"] == "id"]
        assert param["in"] == "path" and param["required"] is True
        assert "id, name, or id prefix of 8+ hex characters" in param["description"]
        assert param["schema"] == {"type": "string"}
        assert "409" in op["responses"]
    events = doc["paths"]["/v2/events"]["get"]
    (param,) = [p for p in events["parameters"] if p["name"] == "session_id"]
    assert "name" in param["description"] and "409" in events["responses"]
