"""A real process agent that silently drops the first event of one kind: the manager's maintenance
lane must notice the kernel that stopped moving (or left its agent's heartbeat) and ask the agent
to re-tell its state, so every session still reaches its end without anyone stepping in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sokovan.common.settings import Settings
from sokovan.harness import ManagerProc, wait_agents
from tests.fault.harness import TERMINAL, AgentProc, InvariantChecker, outcome

WITHIN = 15.0  # seconds: a few long cycles (0.5 s) past reconcile_after (1 s)
RESOURCES = {"cpu": 1, "mem": "64m"}


@dataclass
class DropCluster:
    manager: ManagerProc
    agent: AgentProc
    token: str
    dropped: str


@pytest.fixture
def drop_cluster(
    request: pytest.FixtureRequest,
    fresh_cluster_state: str,
    service_env: dict[str, str],
    settings: Settings,
    tmp_path: Path,
) -> Iterator[DropCluster]:
    kind: str = request.param
    manager = ManagerProc(service_env, tmp_path)
    agent = AgentProc(
        service_env,
        tmp_path,
        f"drop-{kind.split('.')[-1]}",
        "cpu=4,mem=4g",
        extra=("--drop-events", kind),
    )
    try:
        manager.start()
        asyncio.run(manager.wait_healthy())
        asyncio.run(wait_agents(settings.db_url, 1))
        yield DropCluster(manager, agent, fresh_cluster_state, kind)
    finally:
        agent.stop()
        manager.stop()


async def _wait(
    http: aiohttp.ClientSession, c: DropCluster, sid: str, statuses: set[str], within: float = WITHIN
) -> tuple[dict[str, Any], float, list[str]]:
    """Poll the session until one of `statuses`; returns it, the seconds it took and the path."""
    began = time.monotonic()
    seen: list[str] = []
    headers = {"Authorization": f"Bearer {c.token}"}
    while True:
        async with http.get(f"{c.manager.api}/v2/sessions/{sid}", headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            session: dict[str, Any] = await resp.json()
        if not seen or seen[-1] != session["status"]:
            seen.append(session["status"])
        if session["status"] in statuses:
            return session, time.monotonic() - began, seen
        if session["status"] in TERMINAL:
            raise AssertionError(f"{sid} ended {outcome(session)} (path {seen}): {session['status_info']}")
        if time.monotonic() - began > within:
            raise AssertionError(
                f"{sid} stuck in {session['status']} for {within}s (path {seen}, dropped {c.dropped}); "
                f"kernels {session['kernels']}\nmanager log:\n{c.manager.log_tail()}"
            )
        await asyncio.sleep(0.1)


async def _create(http: aiohttp.ClientSession, c: DropCluster, body: dict[str, Any]) -> str:
    headers = {"Authorization": f"Bearer {c.token}"}
    async with http.post(f"{c.manager.api}/v2/sessions", json=body, headers=headers) as resp:
        data = await resp.json()
        assert resp.status == 201, data
        sid: str = data["id"]
        return sid


async def _terminate(http: aiohttp.ClientSession, c: DropCluster, sid: str) -> None:
    headers = {"Authorization": f"Bearer {c.token}"}
    async with http.delete(f"{c.manager.api}/v2/sessions/{sid}", headers=headers) as resp:
        assert resp.status == 202, await resp.text()


def _report(c: DropCluster, what: str, session: dict[str, Any], took: float, path: list[str]) -> None:
    """Recovery time in the test output (-s): the whole way, including the reconcile wait."""
    print(f"\n[dropped {c.dropped}] {what} -> {session['status']} in {took:.2f}s via {' -> '.join(path)}")


def _assert_dropped(c: DropCluster) -> None:
    """The fault was really injected: the agent logged the one event it swallowed."""
    lines = [ln for ln in c.agent.log_text().splitlines() if "event.dropped_for_test" in ln]
    assert len(lines) == 1, f"expected one dropped {c.dropped}, agent log has {lines}"
    assert c.dropped in lines[0], lines[0]


async def _assert_invariants(settings: Settings) -> None:
    checker = InvariantChecker(settings.db_url)
    try:
        assert await checker.check() == []
    finally:
        await checker.close()


@pytest.mark.parametrize(
    "drop_cluster", ["kernel.pulling", "kernel.prepared", "kernel.running"], indirect=True
)
async def test_interactive_session_runs_despite_a_dropped_start_event(
    drop_cluster: DropCluster, settings: Settings
) -> None:
    c = drop_cluster
    async with aiohttp.ClientSession() as http:
        sid = await _create(http, c, {"image": "shell", "type": "interactive", "resources": RESOURCES})
        running, took, path = await _wait(http, c, sid, {"RUNNING"})
        _report(c, "create", running, took, path)
        assert [k["status"] for k in running["kernels"]] == ["RUNNING"]
        _assert_dropped(c)

        await _terminate(http, c, sid)
        done, took, path = await _wait(http, c, sid, TERMINAL)
        _report(c, "terminate", done, took, path)
        assert outcome(done) == ("TERMINATED", None, "USER_CANCELLED")
        assert [k["status"] for k in done["kernels"]] == ["TERMINATED"]
    await _assert_invariants(settings)


@pytest.mark.parametrize("drop_cluster", ["kernel.terminated"], indirect=True)
async def test_batch_session_ends_despite_a_dropped_terminated_event(
    drop_cluster: DropCluster, settings: Settings
) -> None:
    c = drop_cluster
    async with aiohttp.ClientSession() as http:
        body = {"image": "shell", "type": "batch", "command": "sleep 1", "resources": RESOURCES}
        sid = await _create(http, c, body)
        done, took, path = await _wait(http, c, sid, TERMINAL)
        _report(c, "batch sleep 1", done, took, path)
        assert outcome(done) == ("TERMINATED", "SUCCESS", None), done["status_info"]
        assert [(k["status"], k["exit_code"]) for k in done["kernels"]] == [("TERMINATED", 0)]
        _assert_dropped(c)
    await _assert_invariants(settings)


@pytest.mark.parametrize("drop_cluster", ["kernel.terminated"], indirect=True)
async def test_terminate_completes_despite_a_dropped_terminated_event(
    drop_cluster: DropCluster, settings: Settings
) -> None:
    """(b) The dropped event is the one that answers a terminate request: TERMINATING must not stick."""
    c = drop_cluster
    async with aiohttp.ClientSession() as http:
        sid = await _create(http, c, {"image": "shell", "type": "interactive", "resources": RESOURCES})
        await _wait(http, c, sid, {"RUNNING"})
        await _terminate(http, c, sid)
        done, took, path = await _wait(http, c, sid, TERMINAL)
        _report(c, "terminate", done, took, path)
        assert outcome(done) == ("TERMINATED", None, "USER_CANCELLED"), done["status_info"]
        assert [k["status"] for k in done["kernels"]] == ["TERMINATED"]
        _assert_dropped(c)
    await _assert_invariants(settings)
