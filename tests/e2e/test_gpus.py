"""Black-box: GPUs (CONTRACT section 15) on a real manager with a hollow fleet of 8-GPU agents and a
process agent declaring 2 hollow devices, over REST v2 only.

- Placement at (test) scale: sessions asking 1, 2, 4 or 8 devices get that many distinct devices of
  their own agent, no device is given twice, and one that does not fit waits naming `cuda.device`.
- Binding: a process kernel sees exactly its devices in CUDA_VISIBLE_DEVICES (and
  NVIDIA_VISIBLE_DEVICES); a kernel given none sees an empty list.
- Health: a device marked faulty is shown unhealthy on its agent, the agent offers one device
  fewer and stays READY, and the device takes no new kernel; mended, it is offered again.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.harness import truncate_tables
from tests.e2e.cluster import Client, Cluster

GROUP = "gpu-hollow"
FLEET, PER_AGENT = 4, 8
ENDED = {"TERMINATED", "ERROR", "CANCELLED"}


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gpu") / "device-faults"
    path.write_text("")
    return path


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str, faults: Path
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    c = Cluster(service_env, tmp_path_factory.mktemp("gpu-cluster"))
    try:
        c.bootstrap()
        c.start_manager()
        asyncio.run(_create_group(c))
        c.start_agent(
            "gh",
            "cpu=64,mem=256g",
            simulate=FLEET,
            extra=("--scaling-group", GROUP, "--gpus", str(PER_AGENT), "--device-faults", str(faults)),
        )
        c.start_agent("gpu-proc", "cpu=2,mem=2g", extra=("--gpus", "2"))
        asyncio.run(c.wait_ready(FLEET + 1))
        yield c
    finally:
        c.stop()


async def _create_group(c: Cluster) -> None:
    async with aiohttp.ClientSession() as http:
        status, data = await Client(http, c.api, c.token).request(
            "POST", "/v2/scaling-groups", {"name": GROUP}
        )
        assert status == 201, data


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)


def _gpu_session(devices: int, command: str = "sleep 3600", group: str = GROUP) -> dict[str, Any]:
    return {
        "image": "python:3",
        "type": "batch",
        "command": command,
        "scaling_group": group,
        "resources": {"cpu": 1, "mem": "1g", "cuda.device": devices},
    }


async def _agent(admin: Client, agent_id: str) -> dict[str, Any]:
    status, data = await admin.request("GET", f"/v2/agents/{agent_id}")
    assert status == 200, data
    return data  # type: ignore[no-any-return]


async def _until(check: Any, what: str, within: float = 30) -> Any:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        got = await check()
        if got:
            return got
        assert asyncio.get_running_loop().time() < deadline, f"{what}: not within {within}s"
        await asyncio.sleep(0.3)


async def test_agents_show_their_devices(admin: Client) -> None:
    agent = await _agent(admin, "gh-0000")
    assert agent["available_slots"]["cuda.device"] == str(PER_AGENT)
    assert [d["id"] for d in agent["devices"]] == [f"cuda:{i}" for i in range(PER_AGENT)]
    assert [d["uuid"] for d in agent["devices"]] == [f"GPU-hollow-gh-0000-{i}" for i in range(PER_AGENT)]
    assert {d["model"] for d in agent["devices"]} == {"hollow"}
    assert {d["status"] for d in agent["devices"]} == {"healthy"}
    assert all(d["memory"] > 0 and d["temperature"] is not None for d in agent["devices"])


async def test_devices_are_never_given_twice_and_a_big_ask_waits_naming_cuda_device(admin: Client) -> None:
    rng = random.Random(7)
    asks = [rng.choice([1, 1, 2, 2, 4, 8]) for _ in range(24)]  # about twice the fleet's 32 devices
    created = [await admin.create(**_gpu_session(n)) for n in asks]
    ids = [s["id"] for s in created]

    async def settled() -> list[dict[str, Any]] | None:
        sessions = [await admin.get(sid) for sid in ids]
        running = [s for s in sessions if s["status"] == "RUNNING"]
        waiting = [s for s in sessions if s["status"] == "PENDING" and s["status_info"].get("pending_reason")]
        return sessions if len(running) + len(waiting) == len(ids) and running else None

    sessions = await _until(settled, "every session RUNNING or waiting with a reason", 60)
    given: list[str] = []
    used: dict[str, int] = {}
    for ask, s in zip(asks, sessions, strict=True):
        if s["status"] != "RUNNING":
            continue
        kernel = s["kernels"][0]
        assert len(kernel["devices"]) == ask, (ask, kernel)
        assert all(d.startswith(f"GPU-hollow-{kernel['agent_id']}-") for d in kernel["devices"]), kernel
        given += kernel["devices"]
        used[kernel["agent_id"]] = used.get(kernel["agent_id"], 0) + ask
    assert len(given) == len(set(given)), "a device was given twice"
    assert all(n <= PER_AGENT for n in used.values()), used
    waiting = [(a, s) for a, s in zip(asks, sessions, strict=True) if s["status"] == "PENDING"]
    assert waiting, "the asks were meant to overfill the fleet"
    for ask, s in waiting:
        assert all(PER_AGENT - n < ask for n in used.values()), (ask, used)  # none of them fits now
        assert "cuda.device" in s["status_info"]["pending_reason"], s["status_info"]
    for sid in ids:
        status, _ = await admin.request("DELETE", f"/v2/sessions/{sid}")
        assert status in (200, 202, 204)
    for sid in ids:
        await admin.wait_status(sid, ENDED, within=60)


async def test_a_faulty_device_takes_no_new_kernel_and_the_agent_stays_ready(
    admin: Client, faults: Path
) -> None:
    await asyncio.to_thread(faults.write_text, "gh-0001 3\n")

    async def marked() -> dict[str, Any] | None:
        agent = await _agent(admin, "gh-0001")
        return agent if agent["devices"][3]["status"] == "unhealthy" else None

    agent = await _until(marked, "device 3 of gh-0001 shown unhealthy")
    assert agent["devices"][3]["reason"] and agent["devices"][3]["ecc_uncorrected"]
    series = 'sokovan_gpu_device_healthy{agent="gh-0001",device="cuda:3",uuid="GPU-hollow-gh-0001-3"} 0.0'

    async def gauged() -> bool:
        # each worker has its own registry and the node lane's holder publishes: a new connection
        # each time, so that the scrapes reach every worker
        async with aiohttp.ClientSession() as http, http.get(f"{admin.api}/metrics") as resp:
            return series in await resp.text()

    await _until(gauged, "the unhealthy device's gauge at 0 on /metrics")
    assert agent["status"] == "READY" and agent["available_slots"]["cuda.device"] == str(PER_AGENT - 1)
    # fill every agent whole: the faulty agent takes a 7-device session, never the 8-device one
    wholes = [await admin.create(**_gpu_session(8)) for _ in range(FLEET - 1)]
    seven = await admin.create(**_gpu_session(7))
    placed = [await admin.wait_status(s["id"], {"RUNNING"}, within=60) for s in [*wholes, seven]]
    on_faulty = [s for s in placed if s["kernels"][0]["agent_id"] == "gh-0001"]
    assert len(on_faulty) == 1 and len(on_faulty[0]["kernels"][0]["devices"]) == 7
    assert "GPU-hollow-gh-0001-3" not in on_faulty[0]["kernels"][0]["devices"]
    await asyncio.to_thread(faults.write_text, "")

    async def mended() -> dict[str, Any] | None:
        agent = await _agent(admin, "gh-0001")
        return agent if agent["available_slots"]["cuda.device"] == str(PER_AGENT) else None

    await _until(mended, "device 3 offered again")
    one = await admin.create(**_gpu_session(1))
    running = await admin.wait_status(one["id"], {"RUNNING"}, within=60)
    assert running["kernels"][0]["devices"] == ["GPU-hollow-gh-0001-3"]
    for s in [*wholes, seven, one]:
        await admin.request("DELETE", f"/v2/sessions/{s['id']}")
    for s in [*wholes, seven, one]:
        await admin.wait_status(s["id"], ENDED, within=60)


async def _logs(admin: Client, sid: str) -> str:
    status, data = await admin.request("GET", f"/v2/sessions/{sid}/logs")
    assert status == 200, data
    return str(data["items"][0]["stdout"])


async def test_a_process_kernel_sees_exactly_its_devices(admin: Client, db_url: str) -> None:
    show = 'echo "cuda=[$CUDA_VISIBLE_DEVICES] nvidia=[$NVIDIA_VISIBLE_DEVICES]"'
    gpu = await admin.create(**_gpu_session(1, show, group="default"))
    cpu = await admin.create(
        image="python:3", type="batch", command=show, resources={"cpu": 1, "mem": "128m"}
    )
    gpu_done = await admin.wait_status(gpu["id"], ENDED)
    cpu_done = await admin.wait_status(cpu["id"], ENDED)
    assert gpu_done["status"] == "TERMINATED" and cpu_done["status"] == "TERMINATED"
    (device,) = gpu_done["kernels"][0]["devices"]
    assert device.startswith("GPU-hollow-gpu-proc-")
    assert f"cuda=[{device}] nvidia=[{device}]" in await _logs(admin, gpu["id"])
    engine = create_async_engine(db_url)
    try:
        async with engine.connect() as conn:
            kernel_id = gpu_done["kernels"][0]["id"]
            written = await conn.execute(
                text(
                    "SELECT message FROM kernel_scheduling_history"
                    " WHERE kernel_id = :k AND source = 'allocator'"
                ),
                {"k": kernel_id},
            )
            assert written.scalars().all() == [f"devices: {device}"]  # its history names them too
    finally:
        await engine.dispose()
    assert cpu_done["kernels"][0]["devices"] == []
    assert "cuda=[] nvidia=[]" in await _logs(admin, cpu["id"])


def _sync_agent(cluster: Cluster, agent_id: str) -> Any:
    request = urllib.request.Request(f"{cluster.api}/v2/agents/{agent_id}")
    request.add_header("Authorization", f"Bearer {cluster.token}")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_console_shows_an_agents_devices_and_the_unhealthy_one(cluster: Cluster, faults: Path) -> None:
    from tests.e2e.browser import Page, start_browser

    faults.write_text("gh-0002 5\n")
    # the page re-reads the fleet on events, and a device's health moves no status: open it once
    # the manager has recorded the fault (the page shows what GET /v2/agents says)
    deadline = time.monotonic() + 30
    while _sync_agent(cluster, "gh-0002")["devices"][5]["status"] != "unhealthy":
        assert time.monotonic() < deadline, "the fault was not recorded within 30 s"
        time.sleep(0.3)
    driver = start_browser()
    try:
        page = Page(driver, cluster.api)
        page.open()
        page.sign_in(cluster.token)
        card = '[data-agent-id="gh-0002"]'
        page.wait_for(lambda: len(page.all(f"{card} .device")) == PER_AGENT, "the agent card's devices")
        bad = page.wait_for(
            lambda: page.visible(f'{card} .device[data-state="unhealthy"]'), "the unhealthy chip"
        )
        assert bad.text.startswith("cuda:5 unhealthy")
        assert page.one(f'{card} .device[data-state="healthy"]').text == "cuda:0 hollow"
        page.screenshot("gpu-devices")
    finally:
        driver.quit()
        faults.write_text("")
