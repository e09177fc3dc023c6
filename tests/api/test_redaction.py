"""What a user (not an admin) is not shown: agents' RPC addresses, another keypair's access key
in a session's or agent's status_info, and the raw RPC error text of a logs request. An admin
still sees the addresses and the status_info as written."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update

from sokovan.db.models import Agent, Kernel, Keypair, Session, User
from tests.api.conftest import Api, add_agent

SECRET_ADDR = "10.9.8.7:6001"


async def _admin_key(api: Api) -> str:
    async with api.engine.connect() as conn:
        key = await conn.scalar(select(Keypair.access_key).join(User).where(User.name == "admin"))
    assert key
    return str(key)


def _info(admin_key: str) -> dict[str, Any]:
    return {
        "cause": "PREEMPTED",
        "rpc_addr": SECRET_ADDR,
        "preempted_by": {
            "session_id": str(uuid.uuid4()),
            "access_key": admin_key,
            "agent_rpc_addr": SECRET_ADDR,
        },
        "agents": [{"id": "agent-9", "rpc_addr": SECRET_ADDR}],
    }


async def test_a_user_is_not_shown_addresses_or_other_access_keys(api: Api) -> None:
    admin_key = await _admin_key(api)
    info = _info(admin_key)
    await add_agent(api.engine, "agent-9", rpc_addr=SECRET_ADDR, status_info=info)
    resp = await api.create(api.alice)
    sid = (await resp.json())["id"]
    async with api.engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == sid).values(status_info=info))
        await conn.execute(update(Kernel).where(Kernel.session_id == sid).values(agent_id="agent-9"))
    paths = [
        f"/v2/sessions/{sid}",
        "/v2/sessions",
        "/v2/agents",
        "/v2/agents/agent-9",
        f"/v2/sessions/{sid}/logs",
    ]
    for path in paths:
        resp = await api.client.get(path, headers=api.alice)
        assert resp.status == 200, (path, await resp.text())
        text = await resp.text()
        assert SECRET_ADDR not in text, (path, text)
        assert admin_key not in text, (path, text)
        assert "127.0.0.1" not in text, (path, text)
    session = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)).json()
    assert session["status_info"]["cause"] == "PREEMPTED"  # what is not secret stays
    logs = await (await api.client.get(f"/v2/sessions/{sid}/logs", headers=api.alice)).json()
    assert logs["items"] and all(i["error"] for i in logs["items"])
    # an admin still sees them
    agent = await (await api.client.get("/v2/agents/agent-9", headers=api.admin)).json()
    assert agent["rpc_addr"] == SECRET_ADDR and agent["status_info"]["rpc_addr"] == SECRET_ADDR
    shown = await (await api.client.get(f"/v2/sessions/{sid}", headers=api.admin)).json()
    assert shown["status_info"] == info
    async with api.engine.connect() as conn:
        assert await conn.scalar(select(Agent.rpc_addr).where(Agent.id == "agent-9")) == SECRET_ADDR
