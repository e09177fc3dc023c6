"""What watches a cluster as it is used: one `/v2/events` reader of every event and a `GET /v2/agents`
poll every second (with `If-None-Match`, as a dashboard would), out of the load generator's
process so that their cost lands on the manager and not on the load generator's event loop.

The reader and the poller are two processes (two clients: an event consumer and a dashboard), both
on uvloop. In one process, the reader's work (some 4,000 events a second under the steady load)
delayed the poller's own reads: its measured p99 was 26-31 ms above a poller of its own beside it.
`BENCH_OBSERVER_SPLIT=0` runs both in one process, as before.

`Observer(api, token).start()` runs `python -m scripts.bench.observer` for the phase; `stop()`
ends it and returns what it saw: events and bytes read, the page reads' latency (p50, p99, max, ms),
how many of them were 304s and how many failed (an answer other than 200 or 304 counts as failed),
and every read's start (wall clock) and latency as `samples`, from which `during()` gives the
latency within one phase.
The poller keeps each page's tag and next cursor, as a dashboard keeps what it shows.
BENCH_OBSERVER=0 runs the phases unwatched.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from sokovan.common import eventloop

ROOT = Path(__file__).resolve().parents[2]
POLL_EVERY = 1.0
PAGE = 500  # the most a page of GET /v2/agents holds
PARTS = ("events", "pages")  # what an observer process does: read every event, poll the agents
_EVENT_LINE = b"\nevent:"  # an SSE event's name line


class Observer:
    def __init__(self, api: str, token: str, split: bool = True) -> None:
        self.api = api
        self.token = token
        # the event reader and the poller each in a process of its own (a dashboard and an event
        # consumer are two clients), or both in one
        self.parts = [PARTS[:1], PARTS[1:]] if split else [PARTS]
        self._procs: list[tuple[asyncio.subprocess.Process, Path]] = []

    async def start(self) -> None:
        for parts in self.parts:
            out = Path(tempfile.mkstemp(prefix="sokovan-observer-", suffix=".json")[1])
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "scripts.bench.observer", self.api, str(out), ",".join(parts),
                cwd=ROOT, env={**os.environ, "SOKOVAN_OBSERVER_TOKEN": self.token},
            )  # fmt: skip
            self._procs.append((proc, out))

    async def stop(self) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for proc, out in self._procs:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
            try:
                seen.update(json.loads(await asyncio.to_thread(out.read_text)))
            except (OSError, ValueError):
                pass
            out.unlink(missing_ok=True)
        self._procs = []
        return seen


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def during(seen: dict[str, Any], start: float, end: float) -> dict[str, float]:
    """The page reads' latency (p50, p99, ms) and count among those begun between `start` and
    `end` (wall clock)."""
    latencies = [took for at, took in seen.get("samples", []) if start <= at <= end]
    return {"p50_ms": _pct(latencies, 0.5), "p99_ms": _pct(latencies, 0.99), "reads": len(latencies)}


async def _watch(api: str, token: str, stop: asyncio.Event, parts: Sequence[str] = PARTS) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    seen: dict[str, Any] = {}
    if "events" in parts:
        seen.update(events=0, event_bytes=0)
    if "pages" in parts:
        seen.update(polls=0, not_modified=0, poll_errors=0)
    latencies: list[float] = []
    samples: list[tuple[float, float]] = []  # (wall-clock start, seconds) of every page read

    async def read_events(http: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            try:
                async with http.get(f"{api}/v2/events", headers=headers) as resp:
                    # Read in chunks, counting each event's `event:` line at a line's start,
                    # rather than a loop step per line (three lines an event) for a count.
                    tail = b"\n"  # the stream starts at a line's start
                    async for chunk in resp.content.iter_any():
                        seen["event_bytes"] += len(chunk)
                        joined = tail + chunk
                        seen["events"] += joined.count(_EVENT_LINE)
                        tail = joined[-(len(_EVENT_LINE) - 1) :]
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.5)

    async def read_page(
        http: aiohttp.ClientSession, query: str, held: dict[str, tuple[str, str | None]]
    ) -> str | None:
        """One page, sent with the tag it had last time; the next page's cursor (the one the page
        held last time when it is unchanged)."""
        began, at = time.perf_counter(), time.time()
        tag, last_cursor = held.get(query, ("", None))
        wanted = {**headers, "If-None-Match": tag} if tag else headers
        async with http.get(f"{api}/v2/agents?{query}", headers=wanted) as resp:
            body = await resp.read()
            latencies.append(time.perf_counter() - began)
            samples.append((at, latencies[-1]))
            seen["polls"] += 1
            if resp.status == 304:
                seen["not_modified"] += 1
                return last_cursor
            if resp.status != 200:
                seen["poll_errors"] += 1
                return None
            cursor: str | None = json.loads(body).get("next_cursor")
            held[query] = (resp.headers.get("ETag", ""), cursor)
            return cursor

    async def poll_agents(http: aiohttp.ClientSession) -> None:
        """Every agent, page by page (500 each, the most a page holds), once a second."""
        held: dict[str, tuple[str, str | None]] = {}  # per page: its tag and next cursor
        while not stop.is_set():
            began = time.perf_counter()
            query: str | None = f"limit={PAGE}"
            try:
                while query is not None:
                    cursor = await read_page(http, query, held)
                    query = f"limit={PAGE}&cursor={cursor}" if cursor else None
            except (TimeoutError, aiohttp.ClientError):
                seen["poll_errors"] += 1
            await asyncio.sleep(max(0.0, POLL_EVERY - (time.perf_counter() - began)))

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as http:
        jobs = {"events": read_events, "pages": poll_agents}
        tasks = [asyncio.create_task(jobs[part](http)) for part in parts]
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if "pages" in parts:
        seen["agents_get_p50_ms"] = _pct(latencies, 0.5)
        seen["agents_get_p99_ms"] = _pct(latencies, 0.99)
        seen["agents_get_max_ms"] = round(max(latencies, default=float("nan")) * 1000, 1)
        seen["samples"] = samples
    return seen


async def _main(api: str, out: Path, parts: Sequence[str]) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    seen = await _watch(api, os.environ["SOKOVAN_OBSERVER_TOKEN"], stop, parts)
    await asyncio.to_thread(out.write_text, json.dumps(seen))


if __name__ == "__main__":
    parts = sys.argv[3].split(",") if len(sys.argv) > 3 else PARTS
    eventloop.run(
        _main(sys.argv[1], Path(sys.argv[2]), parts), fast=os.environ.get("BENCH_UVLOOP", "1") == "1"
    )
