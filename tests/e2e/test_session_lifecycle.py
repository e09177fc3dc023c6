"""Black-box: sessions through a real manager and real process agents, over REST v2 only."""

from __future__ import annotations

import asyncio

from tests.e2e.cluster import Client, process_alive_with_env


async def test_batch_echo_ends_terminated_success_with_its_output(admin: Client) -> None:
    s = await admin.create(
        image="python:3", type="batch", command="echo hello", resources={"cpu": 1, "mem": "128m"}
    )
    assert s["status"] == "PENDING"
    done = await admin.wait_status(s["id"], {"TERMINATED", "ERROR", "CANCELLED"})
    assert (done["status"], done["result"], done["status_info"].get("cause")) == (
        "TERMINATED",
        "SUCCESS",
        None,
    )
    assert done["kernels"][0]["exit_code"] == 0
    status, logs = await admin.request("GET", f"/v2/sessions/{s['id']}/logs")
    assert status == 200
    assert "hello" in logs["items"][0]["stdout"]


async def test_nonzero_exit_ends_error_failure_with_the_exit_code(admin: Client) -> None:
    s = await admin.create(
        image="python:3", type="batch", command="exit 3", resources={"cpu": 1, "mem": "128m"}
    )
    done = await admin.wait_status(s["id"], {"TERMINATED", "ERROR", "CANCELLED"})
    assert (done["status"], done["result"]) == ("ERROR", "FAILURE")
    assert done["status_info"]["cause"] == "KERNEL_NONZERO_EXIT"
    assert done["status_info"]["message"]
    assert done["kernels"][0]["exit_code"] == 3
    assert done["terminated_at"] is not None


async def test_interactive_runs_until_terminated_and_its_process_is_gone(admin: Client) -> None:
    s = await admin.create(image="shell", type="interactive", resources={"cpu": 1, "mem": "128m"})
    running = await admin.wait_status(s["id"], {"RUNNING"})
    kernel_id = running["kernels"][0]["id"]
    # RUNNING is reported once the agent has spawned the kernel's launch wrapper; the wrapper then
    # execs the kernel with its own environment, so the marker shows up a moment later at most.
    for _ in range(50):
        if process_alive_with_env(f"SOKOVAN_KERNEL_ID={kernel_id}"):
            break
        await asyncio.sleep(0.1)
    assert process_alive_with_env(f"SOKOVAN_KERNEL_ID={kernel_id}")
    status, _ = await admin.request("DELETE", f"/v2/sessions/{s['id']}")
    assert status == 202
    done = await admin.wait_status(s["id"], {"TERMINATED", "ERROR", "CANCELLED"})
    assert (done["status"], done["result"], done["status_info"]["cause"]) == (
        "TERMINATED",
        None,
        "USER_CANCELLED",
    )
    for _ in range(50):
        if not process_alive_with_env(f"SOKOVAN_KERNEL_ID={kernel_id}"):
            break
        await asyncio.sleep(0.1)
    assert not process_alive_with_env(f"SOKOVAN_KERNEL_ID={kernel_id}")
    # Terminating again is idempotent.
    status, _ = await admin.request("DELETE", f"/v2/sessions/{s['id']}")
    assert status == 202


async def test_session_that_fits_an_agent_but_not_now_waits_with_a_reason(admin: Client) -> None:
    # Each agent has cpu=2: fill both, then ask for 2 more cpu.
    holders = [
        await admin.create(image="shell", type="interactive", resources={"cpu": 2, "mem": "128m"})
        for _ in range(2)
    ]
    for h in holders:
        await admin.wait_status(h["id"], {"RUNNING"})
    waiting = await admin.create(image="shell", type="interactive", resources={"cpu": 2, "mem": "128m"})
    for _ in range(100):
        current = await admin.get(waiting["id"])
        if current["status_info"].get("pending_reason"):
            break
        await asyncio.sleep(0.1)
    assert current["status"] == "PENDING"
    assert current["status_info"]["pending_reason"] == "0/2 agents fit: 2 insufficient cpu"
    await admin.request("DELETE", f"/v2/sessions/{waiting['id']}")
    cancelled = await admin.wait_status(waiting["id"], {"CANCELLED", "TERMINATED", "ERROR"})
    assert cancelled["status"] == "CANCELLED"
    assert cancelled["status_info"]["cause"] == "USER_CANCELLED"
    assert cancelled["kernels"][0]["status"] == "CANCELLED"
    for h in holders:
        await admin.request("DELETE", f"/v2/sessions/{h['id']}?forced=true")
    for h in holders:
        await admin.wait_status(h["id"], {"TERMINATED"})
