"""`sokovan session ...` as a subprocess against a served API."""

from __future__ import annotations

import asyncio
import uuid

from sqlalchemy import update

from sokovan.db.models import Kernel, Session
from sokovan.state.session_writes import apply_session_transitions
from tests.api.conftest import Api
from tests.cli.conftest import run_cli, session_move, start_cli


async def test_create_info_list_terminate(api: Api, cli_env: dict[str, str]) -> None:
    res = await run_cli(
        "session", "create", "--image", "python:3", "--command", "echo hi", "--resources", "cpu=1,mem=512m",
        "--env", "A=1", "--name", "cli-job", "--json", env=cli_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    created = res.json()
    assert (created["status"], created["name"], created["environ"]) == ("PENDING", "cli-job", {"A": "1"})
    assert created["resources"]["mem"] == str(512 * 2**20)
    sid = created["id"]

    info = await run_cli("session", "info", sid, env=cli_env)
    assert info.code == 0, info.err
    assert sid in info.out and "PENDING" in info.out and "attempt 1 of 1" in info.out
    assert (await run_cli("session", "info", sid, "--json", env=cli_env)).json()["id"] == sid

    listed = await run_cli("session", "list", env=cli_env)
    assert listed.code == 0 and sid in listed.out
    as_json = (await run_cli("session", "list", "--status", "PENDING", "--json", env=cli_env)).json()
    assert [s["id"] for s in as_json["items"]] == [sid]

    term = await run_cli("session", "terminate", sid, env=cli_env)
    assert term.code == 0, term.err
    assert "CANCELLED" in term.out
    hist = await run_cli("session", "history", sid, env=cli_env)
    assert "api.terminate" in hist.out and "PENDING -> CANCELLED" in hist.out
    logs = await run_cli("session", "logs", sid, env=cli_env)
    assert logs.code == 0


async def test_problem_responses_print_cleanly(api: Api, cli_env: dict[str, str]) -> None:
    res = await run_cli("session", "create", "--image", "no-such-image", "--command", "true", env=cli_env)
    assert res.code == 1
    assert res.err.startswith("Error: Unknown reference: unknown image 'no-such-image'")
    assert "Traceback" not in res.err
    res = await run_cli("session", "create", "--image", "python:3", "--resources", "cpu=abc", env=cli_env)
    assert res.code == 1 and res.err.startswith("Error: Validation failed:")
    res = await run_cli("session", "info", str(uuid.uuid4()), env=cli_env)
    assert res.code == 1 and res.err.startswith("Error: Not found:")
    res = await run_cli("session", "list", env={**cli_env, "SOKOVAN_TOKEN": "wrong"})
    assert res.code == 1 and res.err.startswith("Error: Unauthorized:")


async def test_unreachable_api_and_missing_token(cli_env: dict[str, str]) -> None:
    res = await run_cli("session", "list", "--api", "http://127.0.0.1:1", env=cli_env)
    assert res.code == 1 and "cannot reach the API at http://127.0.0.1:1" in res.err
    assert "Traceback" not in res.err
    env = {k: v for k, v in cli_env.items() if k != "SOKOVAN_TOKEN"}
    res = await run_cli("session", "list", env=env)
    assert res.code == 1 and "no token" in res.err


async def _session_id(api: Api, name: str) -> uuid.UUID:
    for _ in range(300):
        body = await (await api.client.get("/v2/sessions", headers=api.admin)).json()
        for item in body["items"]:
            if item["name"] == name:
                return uuid.UUID(item["id"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"session {name} never appeared")


async def test_create_wait_follows_to_running(api: Api, cli_env: dict[str, str]) -> None:
    proc = await start_cli(
        "session",
        "create",
        "--image",
        "shell",
        "--type",
        "interactive",
        "--name",
        "w1",
        "--wait",
        env=cli_env,
    )
    sid = await _session_id(api, "w1")
    for src, dst in (("PENDING", "SCHEDULED"), ("SCHEDULED", "RUNNING")):
        await asyncio.sleep(0.6)
        async with api.engine.begin() as conn:
            await apply_session_transitions(conn, [session_move(sid, src, dst)])
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert "created" in lines[0]
    assert [" ".join(line.split()[1:4]) for line in lines[1:3]] == [
        "PENDING -> SCHEDULED",
        "SCHEDULED -> RUNNING",
    ]
    assert lines[3].split()[1] == "RUNNING"


async def test_create_wait_exits_1_when_cancelled(api: Api, cli_env: dict[str, str]) -> None:
    proc = await start_cli(
        "session",
        "create",
        "--image",
        "python:3",
        "--command",
        "sleep 1",
        "--name",
        "w2",
        "--wait",
        env=cli_env,
    )
    sid = await _session_id(api, "w2")
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == sid).values(status_info={"pending_reason": "0/2 agents fit"})
        )
    # A reason written straight to the table comes with no event: --wait sees it when it re-reads
    # the session (every RESYNC_INTERVAL = 2 s while it follows the event stream).
    await asyncio.sleep(3.0)
    assert (await api.client.delete(f"/v2/sessions/{sid}", headers=api.alice)).status == 202
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, err.decode()
    text = out.decode()
    assert "PENDING  0/2 agents fit" in text
    assert "CANCELLED" in text and "USER_CANCELLED" in text


async def test_wait_success_exit_code(api: Api, cli_env: dict[str, str]) -> None:
    proc = await start_cli(
        "session", "create", "--image", "python:3", "--command", "true", "--name", "w3", "--wait", "--json",
        env=cli_env,
    )  # fmt: skip
    sid = await _session_id(api, "w3")
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == sid).values(status="TERMINATED", result="SUCCESS")
        )
        await conn.execute(
            update(Kernel).where(Kernel.session_id == sid).values(status="TERMINATED", exit_code=0)
        )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    import json

    assert json.loads(out)["status"] == "TERMINATED"
    assert "TERMINATED" in err.decode()
