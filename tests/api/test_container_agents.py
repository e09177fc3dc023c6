"""Container agents through the API (CONTRACT section 11): `GET /v2/agents` shows each agent's
backend, the images it holds and the registries it may pull from; a create (session or deployment)
is accepted for an image an agent of the group holds or may pull and refused with 422 otherwise; and
`GET /v2/sessions/{id}` shows the image each kernel runs and its digest."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select, update

from sokovan.common.events import KernelRunning
from sokovan.common.image_refs import stored_images
from sokovan.db.models import Kernel
from sokovan.state.kernel_events import KernelEventApplier
from tests.api.conftest import Api, add_agent
from tests.api.deployment_helpers import create as create_deployment
from tests.api.test_auth_and_errors import assert_problem

REGISTRY = "127.0.0.1:5000"
REF = f"{REGISTRY}/python:3"
DIGEST = "sha256:" + "ab" * 32
REFUSAL = "no agent of scaling group 'default' holds it or may pull it from its registry"


async def add_container_agent(api: Api, agent_id: str = "ctr-1") -> None:
    await add_agent(api.engine, agent_id, images=stored_images([REF], [REGISTRY]), backend="container")


async def test_agents_show_their_backend_images_and_registries(api: Api) -> None:
    await add_container_agent(api)
    await add_agent(api.engine, "hollow-0000", backend="hollow")
    body = await (await api.client.get("/v2/agents/ctr-1", headers=api.alice)).json()
    assert (body["backend"], body["images"], body["registries"]) == (
        "container",
        [REF, "python:3"],
        [REGISTRY],
    )
    listed = await (await api.client.get("/v2/agents", headers=api.alice)).json()
    assert [(a["id"], a["backend"], a["images"], a["registries"]) for a in listed["items"]] == [
        ("agent-1", "process", ["python:3", "shell"], []),
        ("agent-2", "process", ["python:3", "shell"], []),
        ("ctr-1", "container", [REF, "python:3"], [REGISTRY]),
        ("hollow-0000", "hollow", ["python:3", "shell"], []),
    ]


async def test_an_image_no_agent_offers_is_refused(api: Api) -> None:
    for image in ("nosuch:1", REF):  # process agents pull nothing
        problem = await assert_problem(await api.create(api.alice, image=image), 422)
        assert str(problem["detail"]) == f"unknown image {image!r}: {REFUSAL}"


@pytest.mark.parametrize(
    ("image", "status"),
    [
        ("python:3", 201),
        ("shell", 201),
        ("nosuch:1", 201),  # a short name: the container agent may pull it from its default registry
        (f"{REGISTRY}/anything:1", 201),
        (REF, 201),
        ("other.registry:5000/x:1", 422),
    ],
)
async def test_a_container_agent_accepts_what_it_holds_or_may_pull(api: Api, image: str, status: int) -> None:
    await add_container_agent(api)
    resp = await api.create(api.alice, image=image)
    assert resp.status == status, await resp.text()
    if status == 422:
        assert REFUSAL in str((await assert_problem(resp, 422))["detail"])


async def test_deployments_refuse_an_image_no_agent_offers(api: Api) -> None:
    await add_container_agent(api)
    refused = await create_deployment(api, api.alice, image="other.registry:5000/x:1")
    assert REFUSAL in str((await assert_problem(refused, 422))["detail"])
    accepted = await create_deployment(api, api.alice, name="web2", image=f"{REGISTRY}/web:1")
    assert accepted.status == 201, await accepted.text()


async def kernels_of(api: Api, sid: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)
    assert resp.status == 200
    kernels: list[dict[str, Any]] = (await resp.json())["kernels"]
    return kernels


async def running_on_agent_1(api: Api, sid: str, **fields: Any) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == uuid.UUID(sid))
            .values(status="CREATING", agent_id="agent-1")
        )
        kid = (await conn.execute(select(Kernel.id).where(Kernel.session_id == uuid.UUID(sid)))).scalar_one()
    event = KernelRunning(agent_id="agent-1", kernel_id=str(kid), session_id=sid, **fields)
    assert len(await KernelEventApplier(api.engine).apply_many([event])) == 1


async def test_session_kernels_show_the_image_they_run_and_its_digest(api: Api) -> None:
    resp = await api.create(api.alice)
    assert resp.status == 201, await resp.text()
    created = await resp.json()
    sid = created["id"]
    # Before any agent said: the session's image, no digest (the create's answer reads the same).
    assert [(k["image"], k["image_digest"]) for k in created["kernels"]] == [("python:3", None)]
    assert [(k["image"], k["image_digest"]) for k in await kernels_of(api, sid)] == [("python:3", None)]
    await running_on_agent_1(api, sid, image=REF, image_digest=DIGEST)
    [kernel] = await kernels_of(api, sid)
    assert (kernel["status"], kernel["image"], kernel["image_digest"]) == ("RUNNING", REF, DIGEST)
    # A process agent's kernel names neither.
    plain = (await (await api.create(api.alice, image="shell")).json())["id"]
    await running_on_agent_1(api, plain)
    assert [(k["image"], k["image_digest"]) for k in await kernels_of(api, plain)] == [("shell", None)]
    listed = await (await api.client.get("/v2/sessions", headers=api.alice)).json()
    assert sorted((k["image"], k["image_digest"]) for s in listed["items"] for k in s["kernels"]) == [
        (REF, DIGEST),
        ("shell", None),
    ]
