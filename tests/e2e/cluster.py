"""A real cluster for black-box tests: `sokovan manager` and `sokovan agent` as processes
(a sokovan.harness.LocalCluster), and a client that speaks only the REST v2 contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from sokovan.harness import LocalCluster


class Cluster(LocalCluster):
    """The e2e cluster: every agent stops its kernels with a 2 s kill grace."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        super().__init__(env, workdir, agent_args=("--kill-grace", "2"))


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
