"""Where a session's time goes: each hop of create → RUNNING, and what each lane's cycle costs.

`hop_table(engine, ids)` reads the sessions' history: per hop (PENDING → SCHEDULED → PREPARING →
PREPARED → CREATING → RUNNING, PENDING counted from the create), the p50 of the time from the first
entry into one status to the first entry into the next, over the sessions that passed both (a hop
taken in the same write as the one before it is 0).

`LaneCycles(api)` scrapes `GET /metrics` (`sokovan_cycle_seconds` by lane) before and after a run;
a fresh connection per scrape lands on any worker of the manager, so it scrapes until it has seen
every worker (told apart by `process_start_time_seconds`) and adds their deltas up: cycles per
second, the mean cycle per lane, and the share of its cycles that were hinted and moved nothing
(`sokovan_lane_cycles_total`).
"""

from __future__ import annotations

import asyncio
import itertools
import re
import statistics
import uuid

import aiohttp
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

HOPS = ("PENDING", "SCHEDULED", "PREPARING", "PREPARED", "CREATING", "RUNNING")
_FIRSTS = text(
    """
    SELECT s.id, extract(epoch FROM s.created_at) AS pending,
           {columns}
    FROM sessions s JOIN session_scheduling_history h ON h.session_id = s.id
    WHERE s.id = ANY(:ids) GROUP BY s.id, s.created_at
    """.format(
        columns=",\n           ".join(
            f"extract(epoch FROM min(h.created_at) FILTER (WHERE h.to_status = '{s}')) AS {s.lower()}"
            for s in HOPS[1:]
        )
    )
)


async def hop_table(engine: AsyncEngine, ids: list[str]) -> dict[str, float]:
    """`hop_<from>_<to>_p50_ms` for each hop, over the sessions that took it."""
    async with engine.connect() as conn:
        rows = (await conn.execute(_FIRSTS, {"ids": [uuid.UUID(i) for i in ids]})).mappings().all()
    out: dict[str, float] = {}
    for before, after in itertools.pairwise(HOPS):
        gaps = [
            float(r[after.lower()]) - float(r[before.lower()])
            for r in rows
            if r[before.lower()] is not None and r[after.lower()] is not None
        ]
        if gaps:
            out[f"hop_{before.lower()}_{after.lower()}_p50_ms"] = round(statistics.median(gaps) * 1000, 1)
    return out


_SAMPLE = re.compile(r'^sokovan_cycle_seconds_(sum|count)\{lane="([^"]+)"\} ([0-9.e+-]+)$')
# A lane's counters with more labels than its name: (lane, "<kind>.<outcome>") and (lane, "hints.<kind>").
_COUNTER = re.compile(r"^sokovan_lane_(cycles|hints)_total\{([^}]*)\} ([0-9.e+-]+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_START = re.compile(r"^process_start_time_seconds ([0-9.e+-]+)$")


async def _scrape(api: str) -> tuple[str, dict[tuple[str, str], float]]:
    connector = aiohttp.TCPConnector(force_close=True)  # a new connection: any worker may answer
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.get(f"{api}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as resp,
    ):
        body = await resp.text()
    worker, samples = "", {}
    for line in body.splitlines():
        if m := _SAMPLE.match(line):
            samples[(m.group(2), m.group(1))] = float(m.group(3))
        elif m := _COUNTER.match(line):
            labels = dict(_LABEL.findall(m.group(2)))
            cycles = m.group(1) == "cycles"
            key = f"{labels['kind']}.{labels['outcome']}" if cycles else f"hints.{labels['kind']}"
            samples[(labels["lane"], key)] = float(m.group(3))
        elif m := _START.match(line):
            worker = m.group(1)
    return worker, samples


class LaneCycles:
    def __init__(self, api: str, workers: int) -> None:
        self.api = api
        self.workers = workers
        self._before: dict[str, dict[tuple[str, str], float]] = {}
        self._began = 0.0

    async def _every_worker(self) -> dict[str, dict[tuple[str, str], float]]:
        seen: dict[str, dict[tuple[str, str], float]] = {}
        for _ in range(20 * self.workers):
            worker, samples = await _scrape(self.api)
            seen.setdefault(worker, samples)
            if len(seen) >= self.workers:
                break
        return seen

    async def start(self) -> None:
        self._before = await self._every_worker()
        self._began = asyncio.get_running_loop().time()

    async def stop(self) -> dict[str, float]:
        """`lane_<lane>_cycles_per_s` and `lane_<lane>_cycle_ms` (the mean) over the run."""
        after = await self._every_worker()
        seconds = asyncio.get_running_loop().time() - self._began
        sums: dict[tuple[str, str], float] = {}
        for worker, samples in after.items():
            before = self._before.get(worker, {})
            for key, value in samples.items():
                sums[key] = sums.get(key, 0.0) + value - before.get(key, 0.0)
        out: dict[str, float] = {}
        for lane in sorted({lane for lane, _ in sums}):
            count, total = sums.get((lane, "count"), 0.0), sums.get((lane, "sum"), 0.0)
            out[f"lane_{lane}_cycles_per_s"] = round(count / max(seconds, 1e-9), 1)
            out[f"lane_{lane}_cycle_ms"] = round(total / count * 1000, 1) if count else 0.0
            # hinted cycles that found nothing to move: a hint that led nowhere, a share of all cycles
            fruitless = sums.get((lane, "short.fruitless"), 0.0)
            out[f"lane_{lane}_hinted_fruitless_share"] = round(fruitless / count, 3) if count else 0.0
            for kind in ("news", "demand"):
                hints = sums.get((lane, f"hints.{kind}"), 0.0)
                out[f"lane_{lane}_hints_{kind}_per_s"] = round(hints / max(seconds, 1e-9), 1)
        return out
