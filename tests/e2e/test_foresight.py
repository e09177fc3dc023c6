"""Black-box: reservations, start-time estimates and `max_duration` on a real manager with a hollow
fleet of two 8-GPU agents, over REST v2 only (CONTRACT section 16; the issue's "done when").

- `reserve`: with both agents full of 1-GPU sessions of declared run time and a steady stream of
  more arriving, a session asking a whole agent gets a reservation and starts no later than it
  said; the stream keeps the other agent busy meanwhile.
- Estimates: every session that waited had an `estimated_start_at` soon after it was created, and
  nine in ten started within 10% (or 5 s) of it.
- `max_duration`: a session running past it ends with cause LIFETIME_EXCEEDED naming it; a bad
  value is a 4xx.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from sokovan.harness import truncate_tables
from tests.e2e.cluster import Client, Cluster

GROUP = "ahead"
PER_AGENT = 8
RUN, DECLARED = 6, 7  # seconds each 1-GPU session runs, and the run time it declares


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    asyncio.run(truncate_tables(db_url))
    c = Cluster(service_env, tmp_path_factory.mktemp("foresight"))
    try:
        c.bootstrap()
        c.start_manager()
        asyncio.run(_create_group(c))
        c.start_agent(
            "fa", "cpu=64,mem=256g", simulate=2, extra=("--scaling-group", GROUP, "--gpus", str(PER_AGENT))
        )
        asyncio.run(c.wait_ready(2))
        yield c
    finally:
        c.stop()


async def _create_group(c: Cluster) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"name": GROUP, "queue_policy": "reserve"}
        status, data = await Client(http, c.api, c.token).request("POST", "/v2/scaling-groups", body)
        assert status == 201, data


@pytest.fixture
async def admin(cluster: Cluster) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as http:
        yield Client(http, cluster.api, cluster.token)


def _gpus(n: int, run: float, declared: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "image": "python:3",
        "type": "batch",
        "command": f"sleep {run}",
        "scaling_group": GROUP,
        "resources": {"cpu": 1, "mem": "1g", "cuda.device": n},
    }
    if declared is not None:
        body["max_duration"] = declared
    return body


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _started_at(admin: Client, sid: str) -> dt.datetime | None:
    status, data = await admin.request("GET", f"/v2/sessions/{sid}/history")
    assert status == 200, data
    rows = data["items"] if isinstance(data, dict) else data
    running = [r for r in rows if r["to_status"] == "RUNNING"]
    return _time(running[0]["created_at"]) if running else None


class Watch:
    """The first estimate (and reservation) each waiting session showed, read every 0.25 s."""

    def __init__(self, admin: Client) -> None:
        self.admin = admin
        self.first: dict[str, dt.datetime | None] = {}
        self.reservation: dict[str, dict[str, Any]] = {}
        self.ids: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        while True:
            for sid in list(self.ids):
                if sid in self.first and sid in self.reservation:
                    continue
                session = await self.admin.get(sid)
                info = session["status_info"]
                if session["status"] == "PENDING" and "estimated_start_at" in info and sid not in self.first:
                    at = info["estimated_start_at"]
                    self.first[sid] = _time(at) if at else None
                if session["status"] == "PENDING" and "reservation" in info and sid not in self.reservation:
                    self.reservation[sid] = info["reservation"]
            await asyncio.sleep(0.25)


async def test_a_reserved_whole_agent_session_starts_when_its_reservation_said(admin: Client) -> None:
    watch = Watch(admin)
    task = asyncio.create_task(watch.run())
    try:
        fill = [await admin.create(**_gpus(1, RUN, DECLARED)) for _ in range(2 * PER_AGENT)]
        for s in fill:
            await admin.wait_status(s["id"], {"RUNNING"})
        big = await admin.create(**_gpus(PER_AGENT, 3, 5))
        watch.ids.append(big["id"])
        stream: list[str] = []
        for _ in range(10):  # a steady stream of small sessions behind the big one
            s = await admin.create(**_gpus(1, RUN, DECLARED))
            stream.append(s["id"])
            watch.ids.append(s["id"])
            await asyncio.sleep(1.0)
        running = await admin.wait_status(big["id"], {"RUNNING", "TERMINATED"}, within=40)
        assert running["status"] in {"RUNNING", "TERMINATED"}
        for sid in stream:
            await admin.wait_status(sid, {"RUNNING", "TERMINATED"}, within=60)
    finally:
        task.cancel()
    reservation = watch.reservation.get(big["id"])
    assert reservation is not None and reservation["at"] is not None, watch.reservation
    assert len(reservation["agents"]) == 1
    started = await _started_at(admin, big["id"])
    assert started is not None
    # the placement cycle that sees the room runs within a couple of seconds of its release
    assert started <= _time(reservation["at"]) + dt.timedelta(seconds=3), (started, reservation)
    # (it may start on another agent that had room first: the reservation bounds when, not where)

    # estimates: each waiting session's first one against when it really started
    checked, close = 0, 0
    for sid in [big["id"], *stream]:
        guess = watch.first.get(sid)
        start = await _started_at(admin, sid)
        created = _time((await admin.get(sid))["created_at"])
        assert start is not None
        wait = (start - created).total_seconds()
        if sid not in watch.first:  # placed at its first cycle: it never waited to be estimated
            assert wait < 3, f"{sid} waited {wait:.1f} s without an estimate"
            continue
        if guess is None:
            continue
        checked += 1
        if abs((start - guess).total_seconds()) <= max(5.0, 0.1 * wait):
            close += 1
    assert checked >= 5, watch.first
    assert close >= 0.9 * checked, (close, checked, watch.first)


async def test_max_duration_ends_a_session_that_runs_past_it(admin: Client) -> None:
    session = await admin.create(**_gpus(1, 3600, 2))
    ended = await admin.wait_status(session["id"], {"TERMINATED", "ERROR"}, within=30)
    assert ended["status_info"]["cause"] == "LIFETIME_EXCEEDED", ended
    assert "max_duration (2 s)" in ended["status_info"]["message"]
    assert ended["max_duration"] == 2


@pytest.mark.parametrize("bad", [0, -5, "soon", 1.5, 10**9])
async def test_a_bad_max_duration_is_a_client_error(admin: Client, bad: Any) -> None:
    status, data = await admin.request("POST", "/v2/sessions", {**_gpus(1, 1, None), "max_duration": bad})
    assert 400 <= status < 500 and "max_duration" in str(data), (status, data)
