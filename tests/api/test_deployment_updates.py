"""Deployment updates (CONTRACT section 12): access tokens, PATCH of a definition (a new
revision, DEPLOYING), autoscaling owning replicas, rollbacks on demand, and `from` on first
status events."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from sqlalchemy import select, update

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.common.types import EndpointLifecycle
from sokovan.db.models import AuditLog, Deployment, DeploymentHistory, DeploymentRevision
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.api.deployment_helpers import add_model_agent, counts, created, set_status
from tests.api.test_auth_and_errors import assert_problem
from tests.api.test_events import next_event, stream


def _path(deployment_id: str, tail: str = "") -> str:
    return f"/v2/deployments/{deployment_id}{tail}"


async def _row(api: Api, deployment_id: str) -> Any:
    async with api.engine.connect() as conn:
        return (
            await conn.execute(
                select(*Deployment.__table__.c).where(Deployment.id == uuid.UUID(deployment_id))
            )
        ).one()


async def _revisions(api: Api, deployment_id: str) -> dict[int, dict[str, Any]]:
    async with api.engine.connect() as conn:
        rows = await conn.execute(
            select(DeploymentRevision.revision, DeploymentRevision.definition).where(
                DeploymentRevision.deployment_id == uuid.UUID(deployment_id)
            )
        )
        return {r.revision: r.definition for r in rows}


async def _history(api: Api, deployment_id: str) -> list[tuple[str, str | None, str | None, str]]:
    async with api.engine.connect() as conn:
        rows = await conn.execute(
            select(
                DeploymentHistory.handler,
                DeploymentHistory.from_status,
                DeploymentHistory.to_status,
                DeploymentHistory.message,
            )
            .where(DeploymentHistory.deployment_id == uuid.UUID(deployment_id))
            .order_by(DeploymentHistory.id)
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def _patch(
    api: Api, deployment_id: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Any:
    return await api.client.patch(_path(deployment_id), json=body, headers=headers or api.alice)


async def _finish(api: Api, deployment_id: str) -> None:
    """What the orchestrator does once an update serves alone."""
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Deployment)
            .where(Deployment.id == uuid.UUID(deployment_id))
            .values(status="READY", rollout=None, serving_revision=None)
        )


# -- tokens ------------------------------------------------------------------------------------


async def test_token_is_answered_once_and_only_its_digest_kept(api: Api) -> None:
    made = await created(api, api.alice)
    token = made["token"]
    assert isinstance(token, str) and len(token) >= 40
    row = await _row(api, made["id"])
    assert row.token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    assert row.open_to_public is False and made["open_to_public"] is False
    for resp in (
        await api.client.get(_path(made["id"]), headers=api.alice),
        await api.client.get("/v2/deployments", headers=api.alice),
    ):
        text = await resp.text()
        assert token not in text and '"token"' not in text


async def test_open_to_public_has_no_token(api: Api) -> None:
    made = await created(api, api.alice, open_to_public=True)
    assert "token" not in made and made["open_to_public"] is True
    assert (await _row(api, made["id"])).token_sha256 is None


async def test_a_new_token_replaces_the_old_and_closes_an_open_deployment(api: Api) -> None:
    made = await created(api, api.alice, open_to_public=True)
    before = await counts(api)
    resp = await api.client.post(_path(made["id"], "/token"), headers=api.alice)
    assert resp.status == 200, await resp.text()
    first = (await resp.json())["token"]
    row = await _row(api, made["id"])
    assert (row.open_to_public, row.token_sha256) == (False, hashlib.sha256(first.encode()).hexdigest())
    second = (await (await api.client.post(_path(made["id"], "/token"), headers=api.alice)).json())["token"]
    assert second != first
    assert (await _row(api, made["id"])).token_sha256 == hashlib.sha256(second.encode()).hexdigest()
    got = await (await api.client.get(_path(made["id"]), headers=api.alice)).json()
    assert got["open_to_public"] is False
    deployments, histories, audits = await counts(api)
    assert (deployments, histories, audits) == (before[0], before[1], before[2] + 2)
    async with api.engine.connect() as conn:
        actions = (await conn.execute(select(AuditLog.action).where(AuditLog.target == made["id"]))).scalars()
        assert list(actions).count("deployment.token") == 2
    await assert_problem(await api.client.post(_path(made["id"], "/token"), headers=api.bob), 404)
    await set_status(api, made["id"], EndpointLifecycle.DESTROYING)
    await assert_problem(await api.client.post(_path(made["id"], "/token"), headers=api.alice), 409)


# -- updates -----------------------------------------------------------------------------------


async def test_a_new_definition_is_revision_2_deploying(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    made = await created(api, api.alice, replicas=2, environ={"A": "1"})
    assert (made["revision"], made["rollout"], made["autoscaling"]) == (1, None, None)
    await set_status(api, made["id"], EndpointLifecycle.READY)
    async with stream(api, api.alice) as events:
        resp = await _patch(api, made["id"], {"command": "python3 -m http.server --bind 0.0.0.0 $PORT"})
        assert resp.status == 202, await resp.text()
        name, data = await next_event(events)
    assert (name, data["deployment_id"], data["from"], data["to"]) == (
        "deployment.status",
        made["id"],
        "READY",
        "DEPLOYING",
    )
    assert (data["detail"]["from_revision"], data["detail"]["to_revision"]) == (1, 2)
    body = await resp.json()
    assert (body["status"], body["revision"], body["replicas"]) == ("DEPLOYING", 2, 2)
    assert body["definition"]["command"] == "python3 -m http.server --bind 0.0.0.0 $PORT"
    assert body["definition"]["environ"] == {"A": "1"} and body["definition"]["image"] == "python:3"
    rollout = body["rollout"]
    assert rollout["from_revision"] == 1 and rollout["to_revision"] == 2 and rollout["rolled_back"] is False
    assert rollout["strategy"] == {"type": "rolling", "max_surge": "1", "max_unavailable": "0"}
    assert rollout["rollback_after"] == 600.0 and rollout["rollback_at"] > rollout["started_at"]
    assert body["serving_revision"] is None
    revisions = await _revisions(api, made["id"])
    assert sorted(revisions) == [1, 2] and revisions[2]["command"] == body["definition"]["command"]
    assert revisions[1]["command"] == made["definition"]["command"]
    handler, src, dst, message = (await _history(api, made["id"]))[-1]
    assert (handler, src, dst) == ("api.update", "READY", "DEPLOYING")
    assert "revision 1 -> 2" in message
    # an update over a running update falls back to the last good revision, 1
    resp = await _patch(
        api,
        made["id"],
        {"environ": {"B": "2"}, "strategy": {"type": "blue_green"}, "rollback_after": 30},
    )
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert body["revision"] == 3 and body["definition"]["environ"] == {"B": "2"}
    assert body["rollout"]["from_revision"] == 1 and body["rollout"]["strategy"] == {"type": "blue_green"}
    assert body["rollout"]["rollback_after"] == 30.0 and body["serving_revision"] == 1
    # the same definition again starts nothing
    same = await _patch(api, made["id"], {"environ": {"B": "2"}})
    assert same.status == 200 and (await same.json())["revision"] == 3


async def test_a_model_type_keeps_its_model_and_takes_a_new_one(api: Api) -> None:
    await add_model_agent(api)
    made = await created(api, api.alice, type="vllm", model="org/m x", image=None, command=None)
    resp = await _patch(api, made["id"], {"health_check": {"path": "/v1/models"}})
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert body["definition"]["command"] == made["definition"]["command"]
    assert body["health_check"]["path"] == "/v1/models" and body["health_check"]["interval"] == 5.0
    resp = await _patch(
        api, made["id"], {"model": "other/m", "strategy": {"type": "rolling", "max_surge": "50%"}}
    )
    body = await resp.json()
    assert body["definition"]["command"] == "vllm serve other/m --host 0.0.0.0 --port $PORT"
    assert body["rollout"]["strategy"] == {"type": "rolling", "max_surge": "50%", "max_unavailable": "0"}
    await assert_problem(await _patch(api, made["id"], {"command": "x"}), 422)
    await assert_problem(await _patch(api, made["id"], {"image": "nosuch:1"}), 422)


async def test_bad_updates_write_nothing(api: Api) -> None:
    made = await created(api, api.alice)
    before = await counts(api)
    for bad in (
        {"image": "x", "strategy": {"type": "rolling", "max_surge": 0, "max_unavailable": 0}},
        {"image": "x", "strategy": {"type": "rolling", "max_surge": "0%", "max_unavailable": 0}},
        {"image": "x", "strategy": {"type": "canary"}},
        {"image": "x", "strategy": {"type": "rolling", "max_surge": "150%"}},
        {"image": "x", "strategy": {"type": "rolling", "max_surge": -1}},
        {"strategy": {"type": "blue_green"}},  # no new definition
        {"rollback_after": 10},
        {"image": "x", "rollback_after": 0},
        {"image": None},
        {"replicas": None},
        {"autoscaling": {"metric": "rps", "target": 1, "min_replicas": 3, "max_replicas": 2}},
        {"autoscaling": {"metric": "gpu", "target": 1, "min_replicas": 1, "max_replicas": 2}},
        {"autoscaling": {"metric": "rps", "target": 0, "min_replicas": 1, "max_replicas": 2}},
        {
            "autoscaling": {
                "metric": "rps",
                "target": 1,
                "min_replicas": 1,
                "max_replicas": 2,
                "scale_up_cooldown": -1,
            }
        },
        {"drain_timeout": -1},
        {"image": "nosuch:1"},  # no agent offers it
        {"command": "  "},
        {"model": "m"},  # custom runs its command
    ):
        await assert_problem(await _patch(api, made["id"], bad), 422)
    assert await counts(api) == before
    assert (await _row(api, made["id"])).revision == 1


async def test_autoscaling_owns_replicas(api: Api) -> None:
    rules = {"metric": "inflight", "target": 4, "min_replicas": 2, "max_replicas": 5}
    made = await created(api, api.alice, replicas=1, autoscaling=rules)
    assert made["replicas"] == 2  # clamped to min_replicas
    assert made["autoscaling"] == {
        **rules,
        "target": 4.0,
        "scale_up_cooldown": 30.0,
        "scale_down_cooldown": 120.0,
        "scale_to_zero_after": None,
        "activation_timeout": 60.0,
    }
    before = await counts(api)
    problem = await assert_problem(await _patch(api, made["id"], {"replicas": 3}), 409)
    assert "autoscal" in problem["detail"]
    assert await counts(api) == before
    resp = await _patch(
        api, made["id"], {"autoscaling": {**rules, "min_replicas": 3, "scale_to_zero_after": 60}}
    )
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["replicas"] == 3 and body["autoscaling"]["scale_to_zero_after"] == 60.0
    resp = await _patch(api, made["id"], {"autoscaling": None, "replicas": 1})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["autoscaling"], body["replicas"]) == (None, 1)
    assert (await (await _patch(api, made["id"], {"drain_timeout": 5})).json())["drain_timeout"] == 5.0
    big = await created(api, api.alice, name="big", replicas=9, autoscaling=rules)
    assert big["replicas"] == 5


async def test_create_takes_serving_fields(api: Api) -> None:
    made = await created(api, api.alice, drain_timeout=12.5, health_check={"eviction_grace": 40})
    assert made["drain_timeout"] == 12.5 and made["health_check"]["eviction_grace"] == 40.0
    assert made["backoff_until"] is None and made["serving_revision"] is None
    before = await counts(api)
    for bad in ({"drain_timeout": -1}, {"open_to_public": "yes"}, {"autoscaling": {"metric": "rps"}}):
        await assert_problem(
            await api.client.post(
                "/v2/deployments",
                json={"name": "x", "image": "python:3", "command": "c", **bad},
                headers=api.alice,
            ),
            422,
        )
    assert await counts(api) == before


async def test_updates_end_with_the_deployment(api: Api) -> None:
    made = await created(api, api.alice)
    await set_status(api, made["id"], EndpointLifecycle.DESTROYING)
    before = await counts(api)
    for body in ({"image": "shell"}, {"replicas": 2}, {"autoscaling": None}):
        problem = await assert_problem(await _patch(api, made["id"], body), 409)
        assert "DESTROYING" in problem["detail"]
    await assert_problem(await api.client.post(_path(made["id"], "/rollback"), headers=api.alice), 409)
    assert await counts(api) == before
    await assert_problem(await _patch(api, made["id"], {"image": "shell"}, api.bob), 404)


# -- rollbacks ---------------------------------------------------------------------------------


async def test_rollback_while_deploying_restores_the_last_good_revision(api: Api) -> None:
    made = await created(api, api.alice)
    await set_status(api, made["id"], EndpointLifecycle.READY)
    await _patch(api, made["id"], {"command": "false $PORT", "strategy": {"type": "blue_green"}})
    resp = await api.client.post(_path(made["id"], "/rollback"), headers=api.alice)
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert (body["status"], body["revision"]) == ("DEPLOYING", 1)
    assert body["definition"] == made["definition"]
    rollout = body["rollout"]
    assert (rollout["from_revision"], rollout["to_revision"], rollout["rolled_back"]) == (2, 1, True)
    assert rollout["strategy"] == {"type": "blue_green"} and body["serving_revision"] == 1
    handler, src, dst, message = (await _history(api, made["id"]))[-1]
    assert (handler, src, dst) == ("api.rollback", "DEPLOYING", "DEPLOYING")
    assert message.startswith("rolled back from revision 2 to 1")
    # a rollback already under way has nothing more to roll back to
    await assert_problem(await api.client.post(_path(made["id"], "/rollback"), headers=api.alice), 409)
    # the next update is revision 3 (2 was the failed one), falling back to 1
    body = await (await _patch(api, made["id"], {"command": "serve $PORT"})).json()
    assert (body["revision"], body["rollout"]["from_revision"]) == (3, 1)


async def test_rollback_when_not_deploying_is_a_new_revision_of_the_previous_definition(api: Api) -> None:
    made = await created(api, api.alice)
    problem = await assert_problem(
        await api.client.post(_path(made["id"], "/rollback"), headers=api.alice), 409
    )
    assert "nothing to roll back" in problem["detail"]
    await _patch(api, made["id"], {"command": "serve $PORT"})
    await _finish(api, made["id"])
    resp = await api.client.post(_path(made["id"], "/rollback"), headers=api.alice)
    assert resp.status == 202, await resp.text()
    body = await resp.json()
    assert (body["status"], body["revision"]) == ("DEPLOYING", 3)
    assert body["definition"]["command"] == made["definition"]["command"]
    assert body["rollout"]["from_revision"] == 2 and body["rollout"]["rolled_back"] is False
    assert body["rollout"]["strategy"]["type"] == "rolling"
    assert (await _revisions(api, made["id"]))[3]["command"] == made["definition"]["command"]
    assert any("roll back to revision 1" in h[3] for h in await _history(api, made["id"]))


async def test_first_status_events_carry_a_null_from(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher
) -> None:
    alice = await user_id(api, "alice")
    async with stream(api, api.alice) as events:
        await publisher.publish_many(
            [
                UserEvent(
                    name="route.status",
                    deployment_id=str(uuid.uuid4()),
                    route_id="r1",
                    owner=alice,
                    to_status="PROVISIONING",
                ),
                UserEvent(
                    name="session.status",
                    session_id=str(uuid.uuid4()),
                    owner=alice,
                    **{"from": "PENDING", "to": "SCHEDULED"},
                ),
            ]
        )
        name, data = await next_event(events)
        assert name == "route.status" and "from" in data and data["from"] is None
        assert data["to"] == "PROVISIONING"
        name, data = await next_event(events)
        assert (data["from"], data["to"]) == ("PENDING", "SCHEDULED")
    other = UserEvent(name="session.preempted", session_id="s", preempted_by="t").wire()
    assert '"from"' not in other
