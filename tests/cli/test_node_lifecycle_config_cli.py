"""`sokovan config node-lifecycle get/set` (and so `GET/PUT /v2/config/node-lifecycle`) as
subprocesses against a live API and real etcd."""

from __future__ import annotations

import json

import aetcd

from sokovan.common.settings import Settings
from sokovan.config.cluster import NodeLifecycleSettings
from tests.api.conftest import Api
from tests.cli.conftest import run_cli
from tests.cli.test_config_cli import as_admin

DEFAULTS = NodeLifecycleSettings().model_dump(mode="json")


async def stored(etcd: aetcd.Client, settings: Settings) -> object:
    got = await etcd.get(f"{settings.etcd_prefix}/config/manager/node_lifecycle".encode())
    return None if got is None else json.loads(got.value)


async def test_get_and_set_node_timings(
    api: Api, cli_env: dict[str, str], etcd: aetcd.Client, settings: Settings
) -> None:
    admin = as_admin(api, cli_env)
    got = await run_cli("config", "node-lifecycle", "get", env=cli_env)
    assert got.code == 0, got.err
    assert got.json() == DEFAULTS
    res = await run_cli(
        "config", "node-lifecycle", "set", "--heartbeat-timeout", "12", "--grace", "borrowed=5", env=admin
    )
    assert res.code == 0, res.err
    assert res.json()["heartbeat_timeout"] == 12
    assert res.json()["grace_period"] == {**DEFAULTS["grace_period"], "borrowed": 5}
    assert await stored(etcd, settings) == res.json()
    assert (await run_cli("config", "node-lifecycle", "get", env=cli_env)).json() == res.json()


async def test_invalid_timings_are_refused_whole(
    api: Api, cli_env: dict[str, str], etcd: aetcd.Client, settings: Settings
) -> None:
    admin = as_admin(api, cli_env)
    res = await run_cli("config", "node-lifecycle", "set", "--heartbeat-timeout", "5", env=cli_env)
    assert res.code == 1 and res.err.startswith("Error: Forbidden:"), res.err
    # The timeout must be longer than the interval: equal is refused, nothing written.
    body = '{"heartbeat_interval": 5, "heartbeat_timeout": 5}'
    res = await run_cli("config", "node-lifecycle", "set", body, env=admin)
    assert res.code == 1 and "Validation failed" in res.err, res.err
    res = await run_cli("config", "node-lifecycle", "set", "--grace", "standard", env=admin)
    assert res.code == 2 and "CLASS=SECONDS" in res.err
    res = await run_cli("config", "node-lifecycle", "set", '{"grace_period": {"gold": 1}}', env=admin)
    assert res.code == 1 and "Validation failed" in res.err
    assert "Traceback" not in res.err
    assert await stored(etcd, settings) is None
