"""Black-box: native retry through a real manager and real process agents, over REST only."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from sokovan.harness.process import reachable
from tests.e2e.cluster import Client, Cluster

FAST = {"retry_delay": 0.2, "jitter": "none"}


async def metric(cluster: Cluster, name: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{cluster.api}/metrics") as resp:
        text = await resp.text()
    return sum(float(m) for m in re.findall(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, flags=re.M))


async def chain_of(admin: Client, sid: str, length: int, within: float = 45) -> list[dict[str, Any]]:
    """The sessions of `sid`'s chain once it has `length` members and all have ended."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        session = await admin.get(sid)
        members = [await admin.get(m) for m in session["retry_chain"]]
        if len(members) >= length and all(
            m["status"] in ("TERMINATED", "ERROR", "CANCELLED") for m in members
        ):
            return members
        assert asyncio.get_running_loop().time() < deadline, f"chain stuck: {[m['status'] for m in members]}"
        await asyncio.sleep(0.2)


async def test_a_failing_batch_session_is_retried_until_exhausted(cluster: Cluster, admin: Client) -> None:
    exhausted = await metric(cluster, "sokovan_session_retry_exhausted_total")
    s = await admin.create(
        image="shell",
        type="batch",
        command="exit 1",
        resources={"cpu": 1, "mem": "64m"},
        retry_policy={"max_retries": 2, **FAST},
    )
    members = await chain_of(admin, s["id"], 3)
    await asyncio.sleep(1.0)  # time for a fourth attempt, were there one
    members = await chain_of(admin, s["id"], 3)
    assert len(members) == 3
    assert [(m["status"], m["status_info"]["cause"], m["retry_count"]) for m in members] == [
        ("ERROR", "KERNEL_NONZERO_EXIT", 0),
        ("ERROR", "KERNEL_NONZERO_EXIT", 1),
        ("ERROR", "KERNEL_NONZERO_EXIT", 2),
    ]
    assert (
        members[1]["parent_session_id"] == members[0]["id"]
        and members[2]["retry_cause"] == "KERNEL_NONZERO_EXIT"
    )
    assert members[2]["retry_state"].startswith("attempt 3 of 3")
    assert await metric(cluster, "sokovan_session_retry_exhausted_total") == exhausted + 1
    status, attempts = await admin.request("GET", f"/v2/sessions/{members[2]['id']}/attempts")
    assert status == 200
    assert [a["id"] for a in attempts["items"]] == [m["id"] for m in members]


async def test_a_session_that_fails_once_then_succeeds(
    cluster: Cluster, admin: Client, tmp_path: Path
) -> None:
    succeeded = await metric(cluster, "sokovan_session_retry_succeeded_total")
    shared = reachable(tmp_path / "shared")  # kernels run under their own uids: a directory they may write
    shared.chmod(0o1777)
    marker = shared / f"ran-{uuid.uuid4().hex}"
    command = f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 1; fi"
    s = await admin.create(
        image="shell",
        type="batch",
        command=command,
        resources={"cpu": 1, "mem": "64m"},
        retry_policy={"max_retries": 3, **FAST},
    )
    members = await chain_of(admin, s["id"], 2)
    assert [(m["status"], m["result"]) for m in members] == [("ERROR", "FAILURE"), ("TERMINATED", "SUCCESS")]
    for _ in range(50):
        if await metric(cluster, "sokovan_session_retry_succeeded_total") == succeeded + 1:
            break
        await asyncio.sleep(0.2)
    assert await metric(cluster, "sokovan_session_retry_succeeded_total") == succeeded + 1


async def test_user_terminations_dependency_failures_and_interactive_sessions_are_never_retried(
    admin: Client,
) -> None:
    policy = {"max_retries": 2, **FAST}
    stopped = await admin.create(
        image="shell",
        type="batch",
        command="sleep 30",
        retry_policy=policy,
        resources={"cpu": 1, "mem": "64m"},
    )
    await admin.wait_status(stopped["id"], {"RUNNING"})
    await admin.request("DELETE", f"/v2/sessions/{stopped['id']}")
    failing = await admin.create(
        image="shell", type="batch", command="exit 2", resources={"cpu": 1, "mem": "64m"}
    )
    dependent = await admin.create(
        image="shell",
        type="batch",
        command="true",
        retry_policy=policy,
        depends_on=[failing["id"]],
        resources={"cpu": 1, "mem": "64m"},
    )
    interactive = await admin.create(
        image="shell",
        type="interactive",
        command="exit 1",
        retry_policy=policy,
        resources={"cpu": 1, "mem": "64m"},
    )
    ends = {"TERMINATED", "ERROR", "CANCELLED"}
    for s in (stopped, dependent, interactive):
        await admin.wait_status(s["id"], ends)
    await asyncio.sleep(2.5)  # more than a long cycle: a retry would have been created by now
    got = {
        name: await admin.get(s["id"])
        for name, s in (("stopped", stopped), ("dependent", dependent), ("interactive", interactive))
    }
    assert got["stopped"]["status_info"]["cause"] == "USER_CANCELLED"
    assert got["dependent"]["status_info"]["cause"] == "DEPENDENCY_FAILED"
    assert got["interactive"]["status"] == "ERROR"
    for session in got.values():
        assert session["retry_chain"] == [session["id"]], session
