"""`GET /v2/sessions/{id}` shows where each kernel's server answers, once its agent has told it."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select, update

from sokovan.common.events import KernelRunning
from sokovan.db.models import Kernel
from sokovan.state.kernel_events import KernelEventApplier
from tests.api.conftest import Api

ADDR = "http://127.0.0.1:40123"


async def created(api: Api, **body: Any) -> str:
    resp = await api.create(api.alice, **body)
    assert resp.status == 201, await resp.text()
    sid: str = (await resp.json())["id"]
    return sid


async def started_on_agent_1(api: Api, sid: str) -> uuid.UUID:
    """Put the session's kernel where an agent's KernelRunning moves it (placed, CREATING)."""
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Kernel)
            .where(Kernel.session_id == uuid.UUID(sid))
            .values(status="CREATING", agent_id="agent-1")
        )
        kid: uuid.UUID = (
            await conn.execute(select(Kernel.id).where(Kernel.session_id == uuid.UUID(sid)))
        ).scalar_one()
    return kid


async def kernels_of(api: Api, sid: str) -> list[dict[str, Any]]:
    resp = await api.client.get(f"/v2/sessions/{sid}", headers=api.alice)
    assert resp.status == 200
    kernels: list[dict[str, Any]] = (await resp.json())["kernels"]
    return kernels


async def test_kernel_service_addr_is_shown(api: Api) -> None:
    served = await created(api, type="inference", command="python3 -m http.server $PORT")
    plain = await created(api)
    assert [k["service_addr"] for k in await kernels_of(api, served)] == [None]  # not running yet

    served_kernel = await started_on_agent_1(api, served)
    plain_kernel = await started_on_agent_1(api, plain)
    moved = await KernelEventApplier(api.engine).apply_many(
        [
            KernelRunning(
                agent_id="agent-1", kernel_id=str(served_kernel), session_id=served, service_addr=ADDR
            ),
            KernelRunning(agent_id="agent-1", kernel_id=str(plain_kernel), session_id=plain),
        ]
    )
    assert len(moved) == 2

    [kernel] = await kernels_of(api, served)
    assert (kernel["status"], kernel["service_addr"]) == ("RUNNING", ADDR)
    assert [k["service_addr"] for k in await kernels_of(api, plain)] == [None]
    listed = await (await api.client.get("/v2/sessions?type=inference", headers=api.alice)).json()
    assert [k["service_addr"] for s in listed["items"] for k in s["kernels"]] == [ADDR]
