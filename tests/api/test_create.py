"""POST /v2/sessions: what is written, and that a refused request writes nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select

from sokovan.db.models import AuditLog, Kernel, Session, SessionDependency
from tests.api.conftest import Api
from tests.api.test_auth_and_errors import assert_problem


async def test_create_writes_session_and_kernels(api: Api) -> None:
    resp = await api.create(
        api.alice,
        name="job-1",
        resources={"cpu": 2, "mem": "1g"},
        cluster_size=2,
        environ={"A": "1"},
        priority=5,  # users may lower their priority; raising it is for admins
        retry_policy={"max_retries": 2},
    )
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert body["status"] == "PENDING"
    assert body["owner"] == "alice"
    assert body["name"] == "job-1"
    assert body["resources"] == {"cpu": "2", "mem": str(2**30)}
    assert [k["cluster_role"] for k in body["kernels"]] == ["main", "sub"]
    assert all(k["status"] == "PENDING" and k["agent_id"] is None for k in body["kernels"])
    assert body["retry_state"] == "attempt 1 of 3"
    assert body["retry_chain"] == [body["id"]]
    assert body["created_at"].endswith("Z")
    sid = uuid.UUID(body["id"])
    async with api.engine.connect() as conn:
        s = (await conn.execute(select(*Session.__table__.c).where(Session.id == sid))).one()
        assert (s.status, s.status_info, s.max_retries, s.priority) == ("PENDING", {}, 2, 5)
        assert s.retry_policy["max_retries"] == 2
        kernels = (await conn.execute(select(*Kernel.__table__.c).where(Kernel.session_id == sid))).all()
        assert sorted(k.cluster_idx for k in kernels) == [0, 1]
        assert all(k.occupied_slots == {"cpu": "2", "mem": str(2**30)} for k in kernels)
        audit = (await conn.execute(select(AuditLog.action, AuditLog.target))).all()
        assert ("session.create", str(sid)) in audit


async def test_defaults(api: Api) -> None:
    resp = await api.client.post(
        "/v2/sessions", json={"image": "shell", "type": "interactive"}, headers=api.alice
    )
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    assert body["resources"] == {"cpu": "1", "mem": str(256 * 2**20)}
    assert body["name"] == f"s-{uuid.UUID(body['id']).hex[:8]}"
    assert (body["priority"], body["cluster_size"], body["scaling_group"]) == (10, 1, "default")
    assert body["command"] is None


BAD: list[tuple[str, dict[str, Any], int]] = [
    ("cpu-not-a-number", {"resources": {"cpu": "abc"}}, 422),
    ("unknown-image", {"image": "no-such-image:1"}, 422),
    ("batch-without-command", {"command": None}, 422),
    ("unknown-scaling-group", {"scaling_group": "nowhere"}, 422),
    ("too-big-for-any-agent", {"resources": {"cpu": 64}}, 422),
    ("single-node-cluster-too-big", {"resources": {"cpu": 3}, "cluster_size": 2}, 422),
    ("multi-node-needs-more-agents", {"cluster_size": 3, "cluster_mode": "multi-node"}, 422),
    ("slot-no-agent-has", {"resources": {"cuda.device": 1}}, 422),
    ("cluster-size-zero", {"cluster_size": 0}, 422),
    ("priority-out-of-range", {"priority": 101}, 422),
    ("bad-cluster-mode", {"cluster_mode": "sideways"}, 422),
    ("unknown-field", {"gpus": 1}, 422),
    ("unknown-dependency", {"depends_on": [str(uuid.uuid4())]}, 422),
    ("bad-retry-policy", {"retry_policy": {"max_retries": -1}}, 422),
    ("never-retry-cause", {"retry_policy": {"eligible_causes": ["USER_CANCELLED"]}}, 422),
]


@pytest.mark.parametrize(("case", "patch", "status"), BAD, ids=[b[0] for b in BAD])
async def test_refused_requests_write_nothing(
    api: Api, case: str, patch: dict[str, Any], status: int
) -> None:
    before = await api.counts()
    body = await assert_problem(await api.create(api.alice, **patch), status)
    assert body["detail"]
    assert await api.counts() == before


async def test_field_errors_are_listed(api: Api) -> None:
    body = await assert_problem(await api.create(api.alice, resources={"cpu": "abc"}), 422)
    assert any(e["field"] == "resources" for e in body["errors"])  # type: ignore[attr-defined]


async def test_too_big_names_the_short_slot(api: Api) -> None:
    body = await assert_problem(await api.create(api.alice, resources={"cpu": 64}), 422)
    assert "cpu" in str(body["detail"]) and "mem" not in str(body["detail"])


async def test_body_not_json_is_400_and_writes_nothing(api: Api) -> None:
    before = await api.counts()
    for raw in (b"{not json", b"", b"null"):
        resp = await api.client.post(
            "/v2/sessions", data=raw, headers={**api.alice, "Content-Type": "application/json"}
        )
        await assert_problem(resp, 400)
    await assert_problem(await api.client.post("/v2/sessions", json=[1, 2], headers=api.alice), 422)
    assert await api.counts() == before


async def test_session_type_not_allowed_by_scaling_group(api: Api) -> None:
    from sqlalchemy import update

    from sokovan.db.models import ScalingGroup

    async with api.engine.begin() as conn:
        await conn.execute(update(ScalingGroup).values(allowed_session_types=["interactive"]))
    before = await api.counts()
    await assert_problem(await api.create(api.alice), 422)
    assert await api.counts() == before


async def test_repeated_creation_id_returns_existing(api: Api) -> None:
    first = await api.create(api.alice, creation_id="abc")
    assert first.status == 201
    counts = await api.counts()
    again = await api.create(api.alice, creation_id="abc")
    assert again.status == 200
    assert (await again.json())["id"] == (await first.json())["id"]
    assert await api.counts() == counts
    other = await api.create(api.bob, creation_id="abc")  # another owner: its own session
    assert other.status == 201


async def test_concurrent_creation_id_makes_one_session(api: Api) -> None:
    import asyncio

    resps = await asyncio.gather(*(api.create(api.alice, creation_id="race") for _ in range(5)))
    assert sorted(r.status for r in resps) == [200, 200, 200, 200, 201]
    assert len({(await r.json())["id"] for r in resps}) == 1


async def test_depends_on_is_stored_and_must_be_visible(api: Api) -> None:
    parent = await (await api.create(api.alice)).json()
    child = await api.create(api.alice, depends_on=[parent["id"]])
    assert child.status == 201
    body = await child.json()
    assert body["depends_on"] == [parent["id"]]
    async with api.engine.connect() as conn:
        rows = (await conn.execute(select(SessionDependency.depends_on))).scalars().all()
    assert [str(r) for r in rows] == [parent["id"]]
    before = await api.counts()
    await assert_problem(await api.create(api.bob, depends_on=[parent["id"]]), 422)
    assert await api.counts() == before


async def test_multi_node_fits_across_agents(api: Api) -> None:
    resp = await api.create(api.alice, resources={"cpu": 4}, cluster_size=2, cluster_mode="multi-node")
    assert resp.status == 201, await resp.text()
