"""The daemons' event loop runs with the collector tuned for a long-lived process: what was loaded
before the loop starts is frozen out of every collection, and the youngest generation collects
every `GC_THRESHOLD[0]` allocations. Checked in a child interpreter: tuning the test process's own
collector would change every test after this one."""

from __future__ import annotations

import json
import subprocess
import sys

from sokovan.common.eventloop import GC_THRESHOLD

CHILD = """
import gc, json
from sokovan.common.eventloop import run

async def main():
    tracked = len(gc.get_objects())
    return {"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count(), "tracked": tracked}

print(json.dumps(run(main())))
"""


def test_a_daemon_loop_runs_with_the_loaded_objects_frozen_and_a_larger_first_generation() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(out.stdout)
    assert tuple(seen["threshold"]) == GC_THRESHOLD
    assert seen["frozen"] > 10_000, "the modules, classes and models loaded at start are frozen"
    assert seen["tracked"] < seen["frozen"], "so a full collection walks only what came after"
