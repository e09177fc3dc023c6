"""`sokovan node ...` as a subprocess against a served API: listing and inspecting nodes, the four
operator actions, and refusals as one-line errors."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from sokovan.db.models import AuditLog
from tests.api.conftest import Api, add_agent
from tests.api.test_node_actions import _running_session, _session
from tests.cli.conftest import run_cli


@pytest.fixture
def admin_env(api: Api, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "SOKOVAN_TOKEN": api.admin["Authorization"].removeprefix("Bearer ")}


async def test_list_and_status(api: Api, cli_env: dict[str, str], admin_env: dict[str, str]) -> None:
    await add_agent(
        api.engine,
        "gpu-7",
        status="DEGRADED",
        agent_class="sensitive",
        health={"gpus": 8, "ecc_errors": 0},
        status_info={"reason": "no heartbeat for 31s", "handler": "MarkDegraded"},
    )
    await _running_session(api, "agent-1")
    listed = await run_cli("node", "list", env=cli_env)
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:3] == ["ID", "STATUS", "CLASS"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["agent-1", "READY", "standard"],
        ["agent-2", "READY", "standard"],
        ["gpu-7", "DEGRADED", "sensitive"],
    ]
    assert lines[1].split()[4] == "1"  # one kernel on agent-1
    degraded = await run_cli("node", "list", "--status", "degraded,down", "--json", env=cli_env)
    assert [a["id"] for a in degraded.json()["items"]] == ["gpu-7"]
    none = await run_cli("node", "list", "--scaling-group", "gpu", "--json", env=cli_env)
    assert none.json() == {"items": [], "next_cursor": None}

    assert (await run_cli("node", "drain", "gpu-7", "--reason", "fan swap", env=admin_env)).code == 0
    shown = await run_cli("node", "status", "gpu-7", env=admin_env)
    assert shown.code == 0, shown.err
    for expected in (
        "state:          DRAINING",
        "class:          sensitive",
        "kernels:        0",
        "last heartbeat: never",
        "health:         gpus=8, ecc_errors=0",
        "reason:         fan swap (api.drain by ",
        "DEGRADED -> DRAINING",
    ):
        assert expected in shown.out, shown.out
    assert "since:" in shown.out and "ago)" in shown.out
    as_json = (await run_cli("node", "status", "gpu-7", "--json", env=admin_env)).json()
    assert as_json["status"] == "DRAINING" and as_json["history"][0]["reason"] == "fan swap"
    as_user = await run_cli("node", "status", "agent-1", env=cli_env)
    assert as_user.code == 0 and "kernels:        1" in as_user.out and "(admins only)" in as_user.out


async def test_the_actions_and_their_refusals(
    api: Api, cli_env: dict[str, str], admin_env: dict[str, str]
) -> None:
    sid = await _running_session(api, "agent-1")
    steps = [
        (("drain", "agent-1", "--reason", "kernel upgrade"), "agent agent-1: DRAINING"),
        (
            ("drain", "agent-1", "--urgent", "--yes", "--reason", "PSU"),
            "agent agent-1: DRAINING; its sessions are being terminated (NODE_DRAINED)",
        ),
        (("undrain", "agent-1"), "agent agent-1: READY"),
        (("disable", "agent-1", "--yes", "--reason", "bad DIMM"), "agent agent-1: DOWN (disabled)"),
        (("enable", "agent-1", "--reason", "DIMM replaced"), "agent agent-1: BOOTING"),
    ]
    for args, expected in steps:
        res = await run_cli("node", *args, env=admin_env)
        assert (res.code, res.out.strip()) == (0, expected), res.err
    status, info = await _session(api, sid)
    assert status == "TERMINATING" and info["cause"] == "NODE_DRAINED"
    async with api.engine.connect() as conn:
        rows = (
            await conn.execute(select(AuditLog.action, AuditLog.detail).where(AuditLog.target == "agent-1"))
        ).all()
    assert [(r.action, r.detail.get("reason")) for r in rows] == [
        ("agent.drain", "kernel upgrade"),
        ("agent.drain", "PSU"),
        ("agent.undrain", None),
        ("agent.disable", "bad DIMM"),
        ("agent.enable", "DIMM replaced"),
    ]

    await add_agent(api.engine, "n-9", status="DRAINED")
    refused = await run_cli("node", "drain", "n-9", env=admin_env)
    assert refused.code == 1
    assert refused.err.strip() == "Error: Conflict: agent n-9 is DRAINED; drain needs READY or DEGRADED"
    as_json = await run_cli("node", "enable", "n-9", "--json", env=admin_env)
    assert (
        as_json.code == 1 and as_json.out == "" and "is DRAINED; enable needs DOWN or FAILED" in as_json.err
    )
    forbidden = await run_cli("node", "undrain", "n-9", env=cli_env)
    assert forbidden.code == 1 and forbidden.err.startswith("Error: Forbidden:")
    missing = await run_cli("node", "disable", "nope", "--yes", env=admin_env)
    assert missing.code == 1 and missing.err.strip() == "Error: Not found: agent nope not found"
    drained = (await run_cli("node", "undrain", "n-9", "--json", env=admin_env)).json()
    assert drained["status"] == "READY"
    for res in (refused, as_json, forbidden, missing):
        assert "Traceback" not in res.err
