"""`sokovan deployment ...` as a subprocess against a served API; `create --wait` following the
deployment and its routes as a coordinator would move them."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import func, select, update

from sokovan.bus.user_events import UserEvent, UserEventPublisher
from sokovan.cli import deployment_follow
from sokovan.db.models import Deployment, Route
from sokovan.manager.context import ManagerContext
from tests.api.conftest import Api, user_id
from tests.api.deployment_helpers import add_model_agent, add_route, add_route_history, counts, created
from tests.cli.conftest import run_cli, start_cli
from tests.cli.test_wait_events import LINE_TIMEOUT, _line, _OldServerClient, _subscribed


async def test_create_info_list_scale_routes_history_destroy(api: Api, cli_env: dict[str, str]) -> None:
    res = await run_cli(
        "deployment", "create", "--name", "web", "--image", "python:3",
        "--command", "python3 -m http.server $PORT", "--replicas", "2", "--resources", "cpu=1,mem=512m",
        "--env", "A=1", "--health-path", "/", "--json", env=cli_env,
    )  # fmt: skip
    assert res.code == 0, res.err
    made = res.json()
    assert (made["status"], made["replicas"], made["definition"]["environ"]) == ("PENDING", 2, {"A": "1"})
    assert made["health_check"]["path"] == "/" and made["definition"]["resources"]["mem"] == str(512 * 2**20)
    did = made["id"]

    for ref in (did, "web"):
        info = await run_cli("deployment", "info", ref, env=cli_env)
        assert info.code == 0, info.err
        assert did in info.out and "PENDING" in info.out and "0/2 ready" in info.out
    assert (await run_cli("deployment", "info", "web", "--json", env=cli_env)).json()["id"] == did

    listed = await run_cli("deployment", "list", env=cli_env)
    assert listed.code == 0 and did in listed.out and "0/2" in listed.out
    page = (await run_cli("deployment", "list", "--status", "PENDING", "--json", env=cli_env)).json()
    assert [d["id"] for d in page["items"]] == [did]

    scaled = await run_cli("deployment", "scale", "web", "3", env=cli_env)
    assert scaled.code == 0, scaled.err
    assert "target 3 replica(s)" in scaled.out

    route = await add_route(api, did, "HEALTHY", endpoint="http://127.0.0.1:40001")
    await add_route_history(api, route, "HealthCheckRoute", "SUCCESS", "DEGRADED", "HEALTHY")
    routes = await run_cli("deployment", "routes", did, env=cli_env)
    assert routes.code == 0 and str(route) in routes.out and "http://127.0.0.1:40001" in routes.out
    assert (await run_cli("deployment", "routes", did, "--json", env=cli_env)).json()["items"][0][
        "id"
    ] == str(route)

    hist = await run_cli("deployment", "history", "web", env=cli_env)
    assert hist.code == 0, hist.err
    assert "api.create" in hist.out and "api.scale" in hist.out and "replicas 2 -> 3" in hist.out
    rhist = await run_cli("deployment", "history", "--route", str(route), "--json", env=cli_env)
    assert [h["to_status"] for h in rhist.json()["items"]] == ["HEALTHY"]

    gone = await run_cli("deployment", "destroy", "web", env=cli_env)
    assert gone.code == 0 and "DESTROYING" in gone.out
    again = await run_cli("deployment", "destroy", did, env=cli_env)
    assert again.code == 0 and "DESTROYING" in again.out
    refused = await run_cli("deployment", "scale", did, "1", env=cli_env)
    assert refused.code == 1 and refused.err.startswith("Error: Conflict:")


async def test_dry_run_and_refusals(api: Api, cli_env: dict[str, str]) -> None:
    await add_model_agent(api)
    before = await counts(api)
    dry = await run_cli(
        "deployment", "create", "--name", "llm", "--type", "vllm", "--model", "facebook/opt-125m",
        "--dry-run", env=cli_env,
    )  # fmt: skip
    assert dry.code == 0, dry.err
    assert (
        "vllm serve facebook/opt-125m --host 0.0.0.0 --port $PORT" in dry.out
        and "nothing was created" in dry.out
    )
    as_json = await run_cli(
        "deployment", "create", "--name", "llm", "--type", "sglang", "--model", "m", "--dry-run", "--json",
        env=cli_env,
    )  # fmt: skip
    assert as_json.json()["definition"]["image"] == "sglang"
    no_model = await run_cli("deployment", "create", "--name", "llm", "--type", "tgi", env=cli_env)
    assert no_model.code == 1 and "model" in no_model.err
    bad_name = await run_cli(
        "deployment", "create", "--name", "Bad", "--image", "shell", "--command", "x", env=cli_env
    )
    assert bad_name.code == 1 and "Validation failed" in bad_name.err
    assert await counts(api) == before
    missing = await run_cli("deployment", "info", "nosuch", env=cli_env)
    assert missing.code == 1 and "no live deployment named 'nosuch'" in missing.err
    bobs = await created(api, api.bob, name="bobs")
    foreign = await run_cli("deployment", "info", bobs["id"], env=cli_env)
    assert foreign.code == 1 and foreign.err.startswith("Error: Not found:")
    assert (await run_cli("deployment", "destroy", "bobs", env=cli_env)).code == 1


def _event(name: str, did: str, owner: str, src: str, dst: str, route: str | None = None) -> UserEvent:
    return UserEvent(name=name, deployment_id=did, route_id=route, owner=owner, **{"from": src, "to": dst})


async def _deployment_id(api: Api, name: str) -> str:
    for _ in range(100):
        async with api.engine.connect() as conn:
            found = (await conn.execute(select(Deployment.id).where(Deployment.name == name))).scalar()
        if found is not None:
            return str(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"deployment {name} never appeared")


async def _set(api: Api, did: str, status: str) -> None:
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Deployment)
            .where(Deployment.id == uuid.UUID(did))
            .values(status=status, status_changed_at=func.now())
        )


async def test_create_wait_follows_to_ready(
    api: Api, ctx: ManagerContext, publisher: UserEventPublisher, cli_env: dict[str, str]
) -> None:
    alice = await user_id(api, "alice")
    proc = await start_cli(
        "deployment", "create", "--name", "w1", "--image", "python:3", "--command", "serve $PORT",
        "--replicas", "1", "--public", "--wait", "--timeout", "60", env=cli_env,
    )  # fmt: skip
    try:
        assert "created" in await _line(proc)
        assert "PENDING  0/1 replicas ready" in await _line(proc)
        did = await _deployment_id(api, "w1")
        await _subscribed(ctx)
        # as the coordinators do it: commit, then publish
        await _set(api, did, "SCALING")
        await publisher.publish_many([_event("deployment.status", did, alice, "PENDING", "SCALING")])
        assert (await _line(proc)).endswith("deployment  PENDING -> SCALING")
        assert "SCALING  0/1 replicas ready" in await _line(proc)
        route = await add_route(api, did, "PROVISIONING")
        rid = str(route)
        await publisher.publish_many([_event("route.status", did, alice, "new", "PROVISIONING", rid)])
        assert (await _line(proc)).endswith(f"route {rid[:8]}  new -> PROVISIONING")
        async with api.engine.begin() as conn:
            await conn.execute(
                update(Route).where(Route.id == route).values(status="HEALTHY", status_changed_at=func.now())
            )
        await publisher.publish_many([_event("route.status", did, alice, "PROVISIONING", "HEALTHY", rid)])
        assert (await _line(proc)).endswith(f"route {rid[:8]}  PROVISIONING -> HEALTHY")
        assert "SCALING  1/1 replicas ready" in await _line(proc)
        await _set(api, did, "READY")
        await publisher.publish_many([_event("deployment.status", did, alice, "SCALING", "READY")])
        assert (await _line(proc)).endswith("deployment  SCALING -> READY")
        assert "READY  1/1 replicas ready" in await _line(proc)
        assert await asyncio.wait_for(proc.wait(), LINE_TIMEOUT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_create_wait_times_out_or_ends_destroyed(api: Api, cli_env: dict[str, str]) -> None:
    res = await run_cli(
        "deployment", "create", "--name", "slow", "--image", "shell", "--command", "x", "--wait",
        "--timeout", "1", env=cli_env,
    )  # fmt: skip
    assert res.code == 1
    assert "timed out after 1s: PENDING  0/1 replicas ready" in res.err
    proc = await start_cli(
        "deployment", "create", "--name", "doomed", "--image", "shell", "--command", "x", "--wait", "--json",
        env=cli_env,
    )  # fmt: skip
    did = await _deployment_id(api, "doomed")
    await asyncio.sleep(0.5)
    await _set(api, did, "DESTROYED")
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1, err.decode()
    assert '"status": "DESTROYED"' in out.decode()
    assert "PENDING -> DESTROYED" in err.decode()


async def test_without_a_stream_it_polls(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deployment_follow, "RESYNC_INTERVAL", 30.0)  # would time the test out if used
    made = await created(api, api.alice, name="polled", replicas=0)
    client = _OldServerClient(str(api.client.make_url("")).rstrip("/"), api.alice["Authorization"][7:])
    follow = asyncio.create_task(
        asyncio.to_thread(deployment_follow.follow_deployment, client, made["id"], err=False, timeout=20)
    )
    await asyncio.sleep(0.5)
    await _set(api, made["id"], "SCALING")
    await asyncio.sleep(0.5)
    await _set(api, made["id"], "READY")
    final = await asyncio.wait_for(follow, 10)
    assert (final["status"], final["ready_replicas"], final["replicas"]) == ("READY", 0, 0)
    lines = capsys.readouterr().out.splitlines()
    assert [" ".join(line.split()[1:]) for line in lines] == [
        "PENDING 0/0 replicas ready",
        "deployment PENDING -> SCALING",
        "SCALING 0/0 replicas ready",
        "deployment SCALING -> READY",
        "READY 0/0 replicas ready",
    ]
