"""A real cluster for black-box tests: `sokovan manager` and `sokovan agent` as processes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

SOKOVAN = [sys.executable, "-m", "sokovan"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cluster:
    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.api_port = free_port()
        self.env = {**env, "SOKOVAN_API_BIND": f"127.0.0.1:{self.api_port}"}
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.workdir = workdir
        self.manager: subprocess.Popen[bytes] | None = None
        self.agents: dict[str, subprocess.Popen[bytes]] = {}
        self.token = ""

    def bootstrap(self) -> str:
        out = subprocess.run(
            [*SOKOVAN, "admin", "bootstrap", "--json"], env=self.env, capture_output=True, check=True
        )
        self.token = json.loads(out.stdout)["token"]
        return self.token

    def start_manager(self) -> None:
        log = open(self.workdir / "manager.log", "ab")
        self.manager = subprocess.Popen([*SOKOVAN, "manager"], env=self.env, stdout=log, stderr=log)
        self._wait(lambda: self._healthy(), "manager /healthz")

    def stop_manager(self) -> None:
        assert self.manager is not None
        self.manager.send_signal(signal.SIGTERM)
        self.manager.wait(timeout=20)
        self.manager = None

    def start_agent(self, agent_id: str, slots: str = "cpu=2,mem=2g", extra: tuple[str, ...] = ()) -> None:
        log = open(self.workdir / f"{agent_id}.log", "ab")
        self.agents[agent_id] = subprocess.Popen(
            [
                *SOKOVAN,
                "agent",
                "--id",
                agent_id,
                "--slots",
                slots,
                "--rpc-port",
                "0",
                "--work-dir",
                str(self.workdir / agent_id),
                "--kill-grace",
                "2",
                *extra,
            ],
            env=self.env,
            stdout=log,
            stderr=log,
        )

    def stop(self) -> None:
        procs = [p for p in [self.manager, *self.agents.values()] if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.api}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def _wait(self, cond: Any, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if self.manager is not None and self.manager.poll() is not None:
                raise AssertionError(f"manager exited: {(self.workdir / 'manager.log').read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.1)


class Client:
    """A minimal REST v2 client speaking only the contract."""

    def __init__(self, http: aiohttp.ClientSession, api: str, token: str | None) -> None:
        self.http = http
        self.api = api
        self.token = token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def request(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"headers": self._headers()}
        if raw is not None:
            kwargs["data"] = raw
            kwargs["headers"] = {**kwargs["headers"], "Content-Type": "application/json"}
        elif body is not None:
            kwargs["json"] = body
        async with self.http.request(method, f"{self.api}{path}", **kwargs) as resp:
            text = await resp.text()
            ctype = resp.headers.get("Content-Type", "")
            if resp.status >= 400:
                assert ctype.startswith("application/problem+json"), (resp.status, ctype, text)
            return resp.status, (json.loads(text) if text else None)

    async def create(self, **body: Any) -> dict[str, Any]:
        status, data = await self.request("POST", "/v2/sessions", body)
        assert status == 201, data
        return data  # type: ignore[no-any-return]

    async def get(self, sid: str) -> dict[str, Any]:
        status, data = await self.request("GET", f"/v2/sessions/{sid}")
        assert status == 200, data
        return data  # type: ignore[no-any-return]

    async def wait_status(self, sid: str, statuses: set[str], within: float = 30) -> dict[str, Any]:
        import asyncio

        deadline = asyncio.get_running_loop().time() + within
        while True:
            session = await self.get(sid)
            if session["status"] in statuses:
                return session
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"session {sid} stuck in {session['status']}: {session}")
            await asyncio.sleep(0.1)


def process_alive_with_env(marker: str) -> bool:
    """Whether any process carries `marker` (e.g. SOKOVAN_KERNEL_ID=<id>) in its environment."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().split()[2]
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0") and state != "Z":
            return True
    return False
