"""Black-box: a real manager and a real process agent started with `--log-format json`; after an
agent registered and sessions ran, every line either wrote is one JSON object naming its daemon,
ids are fields, and no secret, token or session environ value appears anywhere."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sokovan.harness import LocalCluster, truncate_tables
from tests.e2e.cluster import Client

PLANTED = "planted-environ-value-7f1d2c"
JSON = ("--log-format", "json")


@pytest.fixture(scope="module")
def json_cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[LocalCluster]:
    asyncio.run(truncate_tables(db_url))
    c = LocalCluster(
        service_env,
        tmp_path_factory.mktemp("json-logs"),
        manager_args=JSON,
        agent_args=("--kill-grace", "2", *JSON),
    )
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("json-agent-1", "cpu=2,mem=2g")
        asyncio.run(c.wait_ready(1))
        yield c
    finally:
        c.stop()


def _records(text: str) -> list[dict[str, Any]]:
    """Every line of a daemon's log file but the harness's start banners, parsed as JSON."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("===== start #")]
    records = []
    for line in lines:
        record = json.loads(line)  # a line that is not JSON fails the test here
        assert isinstance(record, dict), line
        records.append(record)
    return records


async def test_daemons_log_json_lines_with_ids_and_no_secrets(json_cluster: LocalCluster) -> None:
    async with aiohttp.ClientSession() as http:
        client = Client(http, json_cluster.api, json_cluster.token)
        resources = {"cpu": 1, "mem": "128m"}
        environ = {"PLANTED": PLANTED, "API_TOKEN": PLANTED}
        ok = await client.create(
            image="shell", type="batch", command="echo hi", environ=environ, resources=resources
        )
        bad = await client.create(image="shell", type="batch", command="exit 3", resources=resources)
        for sid in (ok["id"], bad["id"]):
            await client.wait_status(sid, {"TERMINATED", "ERROR", "CANCELLED"})
        status, _ = await client.request("GET", "/v2/sessions/not-a-uuid")  # a 4xx on the way
        assert status in (404, 422)
    json_cluster.stop()  # the agent's and the manager's shutdown lines are part of what is checked

    manager = _records(json_cluster.manager.log_text())
    agent = _records(json_cluster.agents["json-agent-1"].log_text())
    assert manager and agent
    assert {r["daemon"] for r in manager} == {"manager"}
    assert {r["daemon"] for r in agent} == {"agent"}
    for r in manager + agent:
        assert {"timestamp", "level", "event"} <= r.keys(), r
    assert all(r.get("agent_id") == "json-agent-1" for r in agent)
    assert any(r.get("agent_id") == "json-agent-1" for r in manager)  # agent.ready
    started = {r["session_id"] for r in agent if r["event"] == "kernel.started"}
    assert {ok["id"], bad["id"]} <= started
    ended = {r["session_id"]: r for r in agent if r["event"] == "kernel.terminated"}
    assert ended[bad["id"]]["exit_code"] == 3

    text = json_cluster.manager.log_text() + json_cluster.agents["json-agent-1"].log_text()
    secret = json_cluster.env["SOKOVAN_CLUSTER_SECRET"]
    for value in (secret, json_cluster.token, PLANTED):
        assert value and value not in text


def test_log_format_comes_from_the_environment_too(service_env: dict[str, str], tmp_path: Path) -> None:
    """SOKOVAN_LOG_FORMAT=console with no flag: the manager's lines are text, not JSON."""
    env = {**service_env, "SOKOVAN_LOG_FORMAT": "console"}
    with LocalCluster(env, tmp_path) as c:
        c.start_manager()
        c.stop_manager()
        lines = [ln for ln in c.manager.log_text().splitlines() if "manager.started" in ln]
    assert lines and "[info" in lines[0]
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[0])
