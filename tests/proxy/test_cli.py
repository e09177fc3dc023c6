"""`sokovan proxy` as a real process: start-up checks, traffic through it, registration, SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from sokovan.bus.routing import proxy_urls, read_reports
from sokovan.common.settings import Settings
from sokovan.harness import free_port
from tests.proxy.conftest import Backends, eventually, publish, target

SOKOVAN = str(Path(sys.executable).parent / "sokovan")


@pytest.fixture
def proxy_env(proxy_settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SOKOVAN_REDIS_URL=proxy_settings.redis_url,
        SOKOVAN_CLUSTER_SECRET=proxy_settings.cluster_secret or "",
        SOKOVAN_ETCD_PREFIX=proxy_settings.etcd_prefix,
    )
    return env


def run_cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SOKOVAN, "proxy", *args], env=env, capture_output=True, text=True, timeout=60)


def test_refuses_to_start_without_cluster_secret(proxy_env: dict[str, str]) -> None:
    env = {k: v for k, v in proxy_env.items() if k != "SOKOVAN_CLUSTER_SECRET"}
    result = run_cli(["--bind", f"127.0.0.1:{free_port()}"], env)
    assert result.returncode != 0
    assert "SOKOVAN_CLUSTER_SECRET" in result.stderr
    assert "Traceback" not in result.stderr


def test_refuses_a_bad_bind_and_a_taken_port(proxy_env: dict[str, str]) -> None:
    result = run_cli(["--bind", "nowhere"], proxy_env)
    assert result.returncode != 0 and "HOST:PORT" in result.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_cli(["--bind", f"127.0.0.1:{taken.getsockname()[1]}"], proxy_env)
    assert result.returncode != 0
    assert "cannot listen" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_guard_options(proxy_env: dict[str, str]) -> None:
    result = run_cli(["--help"], proxy_env)
    assert result.returncode == 0
    for option in ("--max-per-client", "--header-timeout", "--body-timeout", "--connect-timeout"):
        assert option in result.stdout
    result = run_cli(["--bind", f"127.0.0.1:{free_port()}", "--header-timeout", "0"], proxy_env)
    assert result.returncode != 0 and "--header-timeout" in result.stderr


@pytest.fixture
def proxy_process(
    proxy_env: dict[str, str], tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    port = free_port()
    log = tmp_path / "proxy.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [SOKOVAN, "proxy", "--bind", f"127.0.0.1:{port}"], env=proxy_env, stdout=sink, stderr=sink
        )
    try:
        yield proc, f"http://127.0.0.1:{port}", log
    finally:
        if proc.poll() is None:
            proc.kill()  # only the process this fixture started
        proc.wait(10)


async def test_traffic_through_a_proxy_process(
    proxy_process: tuple[subprocess.Popen[bytes], str, Path],
    redis: aioredis.Redis,
    proxy_settings: Settings,
    backends: Backends,
    client: aiohttp.ClientSession,
) -> None:
    proc, url, log = proxy_process
    secret, prefix = proxy_settings.cluster_secret or "", proxy_settings.etcd_prefix

    async def up() -> bool:
        assert proc.poll() is None, f"the proxy exited:\n{log.read_text()}"
        try:
            # Each try bounded: whatever holds a connection open without answering must not
            # outlast the wait (it says nothing of the proxy, whose log the failure shows).
            async with client.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=2)) as resp:
                return resp.status == 200
        except (aiohttp.ClientConnectionError, TimeoutError):
            return False

    try:
        await eventually(up, within=30)
    except TimeoutError:
        pytest.fail(f"the proxy did not answer /healthz in 30 s; its log:\n{log.read_text()}")
    replicas = await backends("r1", "r2", "r3")
    probes = [target(b.url, interval=0.2) for b in replicas]
    await publish(redis, proxy_settings, {"svc": [b.url for b in replicas]}, probes)

    async def routed() -> bool:
        async with client.get(f"{url}/healthz") as resp:
            return bool((await resp.json())["routes"] == 3)

    await eventually(routed)
    answers = []
    for _ in range(6):
        async with client.post(f"{url}/svc/echo/hello?q=1", data=b"body") as resp:
            assert resp.status == 200
            seen = await resp.json()
            assert (seen["path"], seen["query"], seen["body_head"]) == ("/echo/hello", "q=1", "body")
            answers.append(seen["name"])
    assert sorted(answers) == ["r1", "r1", "r2", "r2", "r3", "r3"]
    async with client.get(f"{url}/missing/x") as resp:
        assert resp.status == 404

    async def probed_and_registered() -> bool:
        reports = await read_reports(redis, prefix, secret, [p.route_id for p in probes])
        return len(reports) == 3 and url in await proxy_urls(redis, prefix, secret)

    await eventually(probed_and_registered)

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 20) == 0
    assert url not in await proxy_urls(redis, prefix, secret)
    output = log.read_text()
    assert "proxy.stopped" in output and "Traceback" not in output
