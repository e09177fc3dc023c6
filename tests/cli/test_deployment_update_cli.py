"""`sokovan deployment update|rollback|token|autoscale` and `create --public` as subprocesses
against a served API; `update --wait` following a rollout to READY or to its rollback."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from typing import Any

from sqlalchemy import select, update

from sokovan.db.models import Deployment
from tests.api.conftest import Api
from tests.api.deployment_helpers import created
from tests.cli.conftest import run_cli, start_cli


async def _row(api: Api, deployment_id: str) -> Any:
    async with api.engine.connect() as conn:
        return (
            await conn.execute(
                select(*Deployment.__table__.c).where(Deployment.id == uuid.UUID(deployment_id))
            )
        ).one()


async def _set(api: Api, deployment_id: str, **values: Any) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Deployment).where(Deployment.id == uuid.UUID(deployment_id)).values(**values)
        )


async def _revision(api: Api, deployment_id: str, revision: int) -> Any:
    """The deployment's row once the CLI's update made `revision`."""
    for _ in range(300):
        row = await _row(api, deployment_id)
        if row.revision == revision:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"revision {revision} never appeared")


async def test_create_prints_the_token_once_unless_public(api: Api, cli_env: dict[str, str]) -> None:
    res = await run_cli(
        "deployment", "create", "--name", "web", "--image", "python:3", "--command", "serve $PORT",
        env=cli_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    line = next(ln for ln in res.out.splitlines() if ln.startswith("token: "))
    token = line.removeprefix("token: ")
    assert "will not be shown again" in res.out
    did = (await run_cli("deployment", "info", "web", "--json", env=cli_env)).json()["id"]
    assert (await _row(api, did)).token_sha256 == hashlib.sha256(token.encode()).hexdigest()
    info = await run_cli("deployment", "info", "web", env=cli_env)
    assert token not in info.out and "revision:" in info.out and "token required" in info.out
    public = await run_cli(
        "deployment", "create", "--name", "pub", "--image", "python:3", "--command", "serve $PORT",
        "--public", "--json", env=cli_env,
    )  # fmt: skip
    assert public.code == 0, public.err
    assert "token" not in public.json() and public.json()["open_to_public"] is True

    new = await run_cli("deployment", "token", "pub", env=cli_env)
    assert new.code == 0, new.err
    fresh = new.out.strip()
    row = await _row(api, public.json()["id"])
    assert row.token_sha256 == hashlib.sha256(fresh.encode()).hexdigest() and row.open_to_public is False


async def test_update_rollback_and_autoscale(api: Api, cli_env: dict[str, str]) -> None:
    made = await created(api, api.alice, name="svc", replicas=2)
    refused = await run_cli("deployment", "update", "svc", env=cli_env)
    assert refused.code == 2 and "give something to change" in refused.err
    bad = await run_cli("deployment", "update", "svc", "--image", "shell", "--max-surge", "x", env=cli_env)
    assert bad.code == 2 and "--max-surge" in bad.err
    zero = await run_cli(
        "deployment", "update", "svc", "--image", "shell", "--max-surge", "0", "--max-unavailable", "0%",
        env=cli_env,
    )  # fmt: skip
    assert zero.code == 1 and "Validation failed" in zero.err

    res = await run_cli(
        "deployment", "update", "svc", "--command", "serve --v2 $PORT", "--env", "A=1", "--max-surge", "50%",
        "--max-unavailable", "1", "--rollback-after", "120", "--json", env=cli_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    d = res.json()
    assert (d["status"], d["revision"], d["definition"]["environ"]) == ("DEPLOYING", 2, {"A": "1"})
    assert d["rollout"]["strategy"] == {"type": "rolling", "max_surge": "50%", "max_unavailable": "1"}
    assert d["rollout"]["rollback_after"] == 120.0
    info = await run_cli("deployment", "info", made["id"], env=cli_env)
    assert "rolling out revision 2 from 1" in info.out

    back = await run_cli("deployment", "rollback", "svc", env=cli_env)
    assert back.code == 0, back.err
    assert "rolling back to revision 1" in back.out
    row = await _row(api, made["id"])
    assert (row.revision, row.rollout["rolled_back"]) == (1, True)
    again = await run_cli("deployment", "rollback", "svc", env=cli_env)
    assert again.code == 1 and "nothing to roll back to" in again.err

    on = await run_cli(
        "deployment", "autoscale", "svc", "--metric", "rps", "--target", "5", "--min", "3", "--max", "6",
        "--zero-after", "300", env=cli_env,
    )  # fmt: skip
    assert on.code == 0, on.err
    assert "autoscaling on rps" in on.out and "target 3 replica(s)" in on.out
    row = await _row(api, made["id"])
    assert row.autoscaling["scale_to_zero_after"] == 300.0 and row.replicas == 3
    refused = await run_cli("deployment", "scale", "svc", "4", env=cli_env)
    assert refused.code == 1 and "Conflict" in refused.err
    assert (await run_cli("deployment", "autoscale", "svc", "--metric", "rps", env=cli_env)).code == 2
    off = await run_cli("deployment", "autoscale", "svc", "--off", env=cli_env)
    assert off.code == 0 and "autoscaling off" in off.out
    assert (await _row(api, made["id"])).autoscaling is None


async def test_update_wait_ends_ready_or_rolled_back(api: Api, cli_env: dict[str, str]) -> None:
    made = await created(api, api.alice, name="w", replicas=0)
    did = made["id"]
    proc = await start_cli(
        "deployment", "update", "w", "--image", "shell", "--wait", "--timeout", "60", env=cli_env
    )  # fmt: skip
    await _revision(api, did, 2)
    await asyncio.sleep(0.5)
    await _set(api, did, status="READY", rollout=None)  # the orchestrator finished the update
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert "READY at revision 2" in out.decode()

    proc = await start_cli("deployment", "update", "w", "--image", "python:3", "--wait", env=cli_env)
    row = await _revision(api, did, 3)
    await asyncio.sleep(0.5)
    await _set(
        api,
        did,
        revision=2,
        rollout={**row.rollout, "from_revision": 3, "to_revision": 2, "rolled_back": True},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert "revision 3 was rolled back" in err.decode()
