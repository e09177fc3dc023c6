"""`sokovan config retry-default get/set` and `sokovan session attempts/info` as subprocesses."""

from __future__ import annotations

import json

import aetcd
from sqlalchemy import update

from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.settings import Settings
from sokovan.db.models import Session
from tests.api.conftest import Api
from tests.cli.conftest import run_cli

SEED_DEFAULT = RetryPolicy().model_dump(mode="json")


def as_admin(api: Api, cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, "SOKOVAN_TOKEN": api.admin["Authorization"].removeprefix("Bearer ")}


async def stored(etcd: aetcd.Client, settings: Settings) -> object:
    got = await etcd.get(f"{settings.etcd_prefix}/config/manager/retry_policy_default".encode())
    return None if got is None else json.loads(got.value)


async def test_get_and_set_with_json_and_options(
    api: Api, cli_env: dict[str, str], etcd: aetcd.Client, settings: Settings
) -> None:
    admin = as_admin(api, cli_env)
    got = await run_cli("config", "retry-default", "get", env=cli_env)  # any user may read
    assert got.code == 0, got.err
    assert got.json() == SEED_DEFAULT

    res = await run_cli(
        "config", "retry-default", "set", '{"max_retries": 2, "backoff": "exponential"}', env=admin
    )
    assert res.code == 0, res.err
    assert (res.json()["max_retries"], res.json()["backoff"]) == (2, "exponential")
    assert await stored(etcd, settings) == res.json()

    # Options alone change the value in force, field by field.
    res = await run_cli(
        "config", "retry-default", "set", "--retry-delay", "15", "--jitter", "random",
        "--jitter-ratio", "0.5",
        "--max-retry-delay", "none", "--eligible-causes", "OOM_KILLED,unknown", "--no-emit-retry-events",
        env=admin,
    )  # fmt: skip
    assert res.code == 0, res.err
    body = res.json()
    assert (body["max_retries"], body["backoff"], body["retry_delay"], body["jitter"]) == (
        2,
        "exponential",
        15.0,
        "random",
    )
    assert (body["jitter_ratio"], body["max_retry_delay"], body["emit_retry_events"]) == (0.5, None, False)
    assert body["eligible_causes"] == ["oom_killed", "unknown"]
    assert (await run_cli("config", "retry-default", "get", env=cli_env)).json() == body

    # JSON replaces it whole; options on top of it.
    res = await run_cli("config", "retry-default", "set", "{}", "--max-retries", "1", env=admin)
    assert res.code == 0, res.err
    assert res.json() == {**SEED_DEFAULT, "max_retries": 1}
    assert await stored(etcd, settings) == res.json()


async def test_set_refusals_print_cleanly(
    api: Api, cli_env: dict[str, str], etcd: aetcd.Client, settings: Settings
) -> None:
    admin = as_admin(api, cli_env)
    res = await run_cli("config", "retry-default", "set", '{"max_retries": 1}', env=cli_env)
    assert res.code == 1 and res.err.startswith("Error: Forbidden:"), res.err
    res = await run_cli("config", "retry-default", "set", "--jitter-ratio", "1.5", env=admin)
    assert res.code == 1 and res.err.startswith("Error: Validation failed:"), res.err
    res = await run_cli("config", "retry-default", "set", '{"max_retries": -1}', env=admin)
    assert res.code == 1 and "Validation failed" in res.err
    res = await run_cli("config", "retry-default", "set", "{oops", env=admin)
    assert res.code == 2 and "not valid JSON" in res.err
    res = await run_cli("config", "retry-default", "set", env=admin)
    assert res.code == 2 and "POLICY_JSON" in res.err
    res = await run_cli("config", "retry-default", "get", env={**cli_env, "SOKOVAN_TOKEN": "wrong"})
    assert res.code == 1 and res.err.startswith("Error: Unauthorized:")
    assert "Traceback" not in res.err
    assert await stored(etcd, settings) is None  # nothing was written


async def test_session_attempts_and_info_show_the_chain(api: Api, cli_env: dict[str, str]) -> None:
    ids = []
    for _ in range(2):
        res = await run_cli(
            "session", "create", "--image", "python:3", "--command", "exit 3", "--max-retries", "2", "--json",
            env=cli_env,
        )  # fmt: skip
        assert res.code == 0, res.err
        ids.append(res.json()["id"])
    first, second = ids
    async with api.engine.begin() as conn:
        await conn.execute(
            update(Session)
            .where(Session.id == first)
            .values(
                status="ERROR",
                result="FAILURE",
                status_info={
                    "cause": "KERNEL_NONZERO_EXIT",
                    "message": "exit 3",
                    "retry": {"decision": "scheduled", "due_at": "2030-01-01T00:00:00Z", "attempt": 2},
                },
            )
        )
        await conn.execute(
            update(Session)
            .where(Session.id == second)
            .values(parent_session_id=first, retry_count=1, retry_cause="KERNEL_NONZERO_EXIT")
        )

    res = await run_cli("session", "attempts", second, env=cli_env)
    assert res.code == 0, res.err
    lines = res.out.splitlines()
    assert lines[0].split()[:4] == ["#", "ID", "STATUS", "RESULT"]
    assert lines[1].split()[:5] == ["1", first, "ERROR", "FAILURE", "KERNEL_NONZERO_EXIT"]
    assert lines[2].split()[:5] == ["2", second, "PENDING", "-", "-"]
    as_json = (await run_cli("session", "attempts", first, "--json", env=cli_env)).json()
    assert [a["id"] for a in as_json["items"]] == [first, second] and as_json["next_cursor"] is None

    info = await run_cli("session", "info", second, env=cli_env)
    assert info.code == 0, info.err
    assert f"attempt 2 of 3, retry of {first}" in info.out
    assert f"{first} -> [{second}]" in info.out
    assert "retry cause:    KERNEL_NONZERO_EXIT" in info.out
    parent = await run_cli("session", "info", first, env=cli_env)
    assert "attempt 1 of 3" in parent.out and f"next attempt:   {second}" in parent.out
    assert "retry decision: scheduled, due at 2030-01-01T00:00:00Z" in parent.out

    res = await run_cli(
        "session", "attempts", first, env={**cli_env, "SOKOVAN_TOKEN": api.bob["Authorization"][7:]}
    )
    assert res.code == 1 and res.err.startswith("Error: Not found:")
