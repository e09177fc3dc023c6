"""The partition phase of `make bench`: the partition and silent-peer scenarios at larger sizes.

`make test` runs them with a few seconds of partition; here the agent partitions last
BENCH_PARTITION_S (30) more seconds and PostgreSQL, Redis and etcd are each silent for
BENCH_SILENCE_S (60, the issue's minute). The scenarios are the tests themselves
(tests/partition, tests/fault/test_outages.py -k silent), run by pytest in a subprocess: the phase
reports how many passed, how long they took, and the history lines they printed (which timing
each partition had, when the old kernels were gone, how fast creates were answered).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["tests/partition", "tests/fault/test_outages.py", "-k", "partition or silent"]


async def partitions_phase() -> dict[str, Any]:
    extra = os.environ.get("BENCH_PARTITION_S", "30")
    silence = os.environ.get("BENCH_SILENCE_S", "60")
    env = {**os.environ, "SOKOVAN_PARTITION_S": extra, "SOKOVAN_SILENCE_S": silence}
    began = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *SCENARIOS,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    lines = text.splitlines()
    summary = next((ln for ln in reversed(lines) if " passed" in ln or " failed" in ln), "")
    story = [ln.strip() for ln in lines if ln.startswith("---") or (ln.startswith(" ") and "s  " in ln)]
    story += [ln.strip() for ln in lines if " silent " in ln and "creates answered" in ln]
    return {
        "partitions": {
            "extra_partition_s": float(extra),
            "silence_s": float(silence),
            "exit_code": proc.returncode,
            "summary": summary.strip("= "),
            "seconds": round(time.monotonic() - began, 1),
            "history": story,
        }
    }
