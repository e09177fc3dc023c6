"""Backend.AI's own client, unmodified (backend.ai-client 26.9.6 under Python 3.13, installed in
.dev/bai-client by scripts/bai-client.sh), against a real cluster: the `backend.ai` CLI and the
`ai.backend.client` SDK, with keypairs made through `/v2/keypairs` and every request signed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Client, Cluster

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / ".dev" / "bai-client"
BAI = CLIENT / "bin" / "backend.ai"
RESOURCES = ["-r", "cpu=1", "-r", "mem=256m"]


@pytest.fixture(scope="module")
def installed() -> Path:
    if not BAI.exists():  # not a skip: `make test` installs it (scripts/bai-client.sh)
        pytest.fail(f"Backend.AI's client is not installed at {CLIENT}: run scripts/bai-client.sh")
    return BAI


async def _keypair(admin: Client, user: str) -> dict[str, Any]:
    status, made = await admin.request("POST", "/v2/keypairs", {"user": user, "project": "default"})
    assert status == 201, made
    assert made["secret_key"]
    return made  # type: ignore[no-any-return]


def _env(cluster: Cluster, keypair: dict[str, Any], home: Path, secret: str | None = None) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM")}
    return {
        **keep,
        "HOME": str(home),
        "BACKEND_ENDPOINT": cluster.api,
        "BACKEND_ENDPOINT_TYPE": "api",
        "BACKEND_ACCESS_KEY": keypair["access_key"],
        "BACKEND_SECRET_KEY": secret or keypair["secret_key"],
        "NO_PROXY": "*",
    }


def _session_id(printed: str) -> str:
    """The session id `session create` printed ("Session ID <id> is ...")."""
    found = re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", printed)
    assert found is not None, printed
    return found.group(0)


async def _run(args: list[str], env: dict[str, str], seconds: float) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, args, env=env, capture_output=True, text=True, timeout=seconds, check=False
    )


async def _cli(env: dict[str, str], *args: str, seconds: float = 90) -> subprocess.CompletedProcess[str]:
    return await _run([str(BAI), *args], env, seconds)


async def test_the_cli_creates_reads_lists_watches_and_ends_sessions(
    installed: Path, cluster: Cluster, admin: Client, tmp_path: Path
) -> None:
    carol = await _keypair(admin, "carol-bai")
    env = _env(cluster, carol, tmp_path / "carol")

    made = await _cli(
        env, "session", "create", "--type", "batch", "-c", "echo hi", *RESOURCES, "--name", "job-one", "shell"
    )
    assert made.returncode == 0, made.stdout + made.stderr
    session_id = _session_id(made.stdout + made.stderr)
    await admin.wait_status(session_id, {"TERMINATED"}, within=60)

    logs = await _cli(env, "session", "logs", "job-one")
    assert logs.returncode == 0 and "hi" in logs.stdout, logs.stdout + logs.stderr

    listed = await _cli(env, "--output", "json", "ps", "--all")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    items = json.loads(listed.stdout)["items"]
    mine = [i for i in items if i.get("name") == "job-one" or i.get("session_name") == "job-one"]
    assert mine and mine[0]["status"] == "TERMINATED", items

    info = await _cli(env, "session", "info", session_id)
    assert info.returncode == 0 and "job-one" in info.stdout, info.stdout + info.stderr

    # watch: a batch session that is still running when the watch starts ends with its exit code
    slow = await _cli(
        env,
        "session",
        "create",
        "--type",
        "batch",
        "-c",
        "sleep 3; exit 3",
        *RESOURCES,
        "--name",
        "job-two",
        "shell",
    )
    assert slow.returncode == 0, slow.stdout + slow.stderr
    watched = await _cli(env, "session", "watch", "job-two", seconds=60)
    assert watched.returncode == 3, watched.stdout + watched.stderr

    interactive = await _cli(
        env, "session", "create", "--type", "interactive", *RESOURCES, "--name", "job-three", "shell"
    )
    assert interactive.returncode == 0, interactive.stdout + interactive.stderr
    removed = await _cli(env, "session", "rm", "job-three")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    three = _session_id(interactive.stdout + interactive.stderr)
    await admin.wait_status(three, {"TERMINATED", "CANCELLED"}, within=60)

    # another user sees none of it, and a wrong secret is refused with the client's error
    dave = await _keypair(admin, "dave-bai")
    dave_env = _env(cluster, dave, tmp_path / "dave")
    theirs = await _cli(dave_env, "--output", "json", "ps", "--all")
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr
    assert json.loads(theirs.stdout)["items"] == []
    stranger = await _cli(dave_env, "session", "logs", "job-one")
    assert stranger.returncode != 0 and "404" in stranger.stdout + stranger.stderr
    forged = await _cli(_env(cluster, carol, tmp_path / "forged", secret="x" * 40), "ps", "--all")
    assert forged.returncode != 0 and "401" in forged.stdout + forged.stderr


SDK_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from ai.backend.client.session import AsyncSession, Session

    with Session() as api:
        s = api.ComputeSession.get_or_create("shell", name="sdk-one", type_="interactive",
                                             resources={"cpu": "1", "mem": "256m"})
        info = s.get_info()
        logs = s.get_logs()
        s.destroy()
    print(json.dumps({"id": str(s.id), "status": info["status"], "logs": logs}))

    async def events():
        seen = []
        async with AsyncSession() as api:
            s = await api.ComputeSession.get_or_create(
                "shell", name="sdk-two", type_="batch", startup_command="sleep 1",
                resources={"cpu": "1", "mem": "256m"}, enqueue_only=True)
            async with s.listen_events() as stream:
                async for ev in stream:
                    seen.append(ev.event)
                    if ev.event == "session_terminated":
                        break
        return seen

    print(json.dumps(asyncio.run(events())))
    """
)


async def test_the_sdk_creates_reads_ends_and_listens(
    installed: Path, cluster: Cluster, admin: Client, tmp_path: Path
) -> None:
    erin = await _keypair(admin, "erin-bai")
    env = _env(cluster, erin, tmp_path / "erin")
    run = await _run([str(CLIENT / "bin" / "python"), "-c", SDK_SCRIPT], env, 120)
    assert run.returncode == 0, run.stdout + run.stderr
    first, second = (json.loads(line) for line in run.stdout.strip().splitlines()[-2:])
    assert first["status"] == "RUNNING"
    await admin.wait_status(first["id"], {"TERMINATED"}, within=60)
    assert "session_started" in second and second[-1] == "session_terminated"
    assert "session_success" in second
