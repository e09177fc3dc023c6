"""Backend.AI's session endpoints over the real app (bearer tokens here; the signature has its own
tests): create as the client sends it, reuse by name, info, destroy, and the event stream from the
session's current state to `server_close`."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import update

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.db.models import Kernel, Session
from tests.api.conftest import Api, user_id


def client_body(name: str, **extra: Any) -> dict[str, Any]:
    """What `ComputeSession.get_or_create` sends (API v9), trimmed of the Nones it sends too."""
    body: dict[str, Any] = {
        "tag": None,
        "name": name,
        "config": {
            "mounts": [],
            "mount_ids": [],
            "environ": {"GREETING": "hi"},
            "resources": {"cpu": "1", "mem": "256m"},
            "resource_opts": {},
            "scalingGroup": None,
            "attach_network": None,
            "mount_map": {},
            "mount_id_map": {},
            "mount_options": {},
            "preopen_ports": None,
        },
        "dependencies": None,
        "callback_url": None,
        "architecture": "x86_64",
        "clusterSize": 1,
        "clusterMode": "single-node",
        "starts_at": None,
        "bootstrap_script": None,
        "owner_access_key": None,
        "domain": "default",
        "group": "default",
        "type": "batch",
        "enqueueOnly": True,
        "maxWaitSeconds": 0,
        "reuseIfExists": True,
        "startupCommand": "echo hi",
        "image": "python:3",
    }
    body.update(extra)
    return body


async def _events(api: Api, headers: dict[str, str], query: str) -> list[tuple[str, dict[str, Any]]]:
    resp = await api.client.get(f"/events/session?{query}", headers=headers)
    assert resp.status == 200, await resp.text()
    out: list[tuple[str, dict[str, Any]]] = []
    name = ""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            out.append((name, json.loads(line[len("data: ") :])))
            if name == "server_close":
                break
    return out


async def test_create_reuse_info_and_destroy(api: Api) -> None:
    resp = await api.client.post("/session", json=client_body("job-one"), headers=api.alice)
    assert resp.status == 201, await resp.text()
    made = await resp.json()
    assert (made["sessionName"], made["status"], made["created"]) == ("job-one", "PENDING", True)
    again = await api.client.post("/session", json=client_body("job-one"), headers=api.alice)
    assert again.status == 200 and (await again.json())["sessionId"] == made["sessionId"]
    assert (await again.json())["created"] is False
    refused = await api.client.post(
        "/session", json=client_body("job-one", reuseIfExists=False), headers=api.alice
    )
    assert refused.status == 409 and "title" in await refused.json()

    info = await (await api.client.get("/session/job-one", headers=api.alice)).json()
    assert (info["sessionId"], info["status"], info["type"]) == (made["sessionId"], "PENDING", "BATCH")
    assert info["environ"] == {"GREETING": "hi"} and info["result"] == "UNDEFINED"
    # Bob cannot see Alice's session by its name, nor by its id.
    assert (await api.client.get("/session/job-one", headers=api.bob)).status == 404
    assert (await api.client.get(f"/session/{made['sessionId']}", headers=api.bob)).status == 404
    assert (await api.client.delete(f"/session/{made['sessionId']}", headers=api.bob)).status == 404

    gone = await api.client.delete("/session/job-one", headers=api.alice)
    assert gone.status == 200 and await gone.json() == {"stats": {}}
    ended = await (await api.client.get(f"/session/{made['sessionId']}", headers=api.alice)).json()
    assert ended["status"] == "CANCELLED"
    events = await _events(api, api.alice, f"sessionName={made['sessionId']}")
    assert [n for n, _ in events] == ["session_cancelled", "session_terminated", "server_close"]
    assert events[0][1]["sessionId"] == made["sessionId"]


async def test_bad_bodies_are_problems_not_errors(api: Api) -> None:
    for body in (b"not json", b"[1, 2]"):
        resp = await api.client.post("/session", data=body, headers=api.alice)
        assert resp.status == 400 and (await resp.json())["title"]
    mounts = client_body("job-two", config={"mounts": ["data"], "resources": {}})
    assert (await api.client.post("/session", json=mounts, headers=api.alice)).status == 422
    no_command = client_body("job-two", startupCommand=None)
    resp = await api.client.post("/session", json=no_command, headers=api.alice)
    assert resp.status == 422 and "command" in (await resp.json())["detail"]
    assert (await api.client.get("/events/session", headers=api.alice)).status == 400
    assert (await api.client.get("/events/session?sessionName=nope", headers=api.alice)).status == 404
    assert (await api.client.get("/session/job-two", headers=api.alice)).status == 404


async def test_the_stream_follows_the_session_to_its_end(api: Api, publisher: UserEventPublisher) -> None:
    made = await (await api.client.post("/session", json=client_body("job-three"), headers=api.alice)).json()
    session_id = made["sessionId"]
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == session_id).values(status="RUNNING"))
    stream = await api.client.get(f"/events/session?sessionId={session_id}", headers=api.alice)
    assert stream.status == 200
    first = await stream.content.readuntil(b"\n\n")
    assert first.startswith(b"event: session_started\n")
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == session_id).values(status="TERMINATED", result="FAILURE")
        )
        await conn.execute(update(Kernel).where(Kernel.session_id == session_id).values(exit_code=3))
    owner = await user_id(api, "alice")
    await publisher.publish_many(
        [
            UserEvent(
                name="session.status",
                session_id=session_id,
                owner=owner,
                **{"from": "RUNNING", "to": "TERMINATED"},
            )
        ]
    )
    rest = (await stream.content.read()).decode()
    names = [line[len("event: ") :] for line in rest.splitlines() if line.startswith("event: ")]
    assert names == ["session_failure", "session_terminated", "server_close"]
    assert '"exitCode": 3' in rest
