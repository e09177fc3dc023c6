"""An opt-in sampling profile of the manager's processes over one bench phase.

`BENCH_PROFILE=<phase>` (idle, steady, low_rate, release) with `BENCH_PYSPY` (the py-spy
program, default `py-spy` on PATH) records each manager process at 100 Hz while that phase runs and
writes py-spy's raw (collapsed) stacks to `.dev/bench/profile-<phase>-<pid>.txt`; `profile_summary`
charges each sample to the project's innermost function on its stack. py-spy is not a dependency:
the bench runs without it, and asks for it only when told to profile.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

OUT = Path(".dev/bench")


class PhaseProfile:
    """py-spy recording every given process while one phase runs (nothing unless asked for)."""

    def __init__(self, phase: str) -> None:
        self.phase = phase
        self.wanted = os.environ.get("BENCH_PROFILE", "") == phase
        self.program = shutil.which(os.environ.get("BENCH_PYSPY", "py-spy")) if self.wanted else None
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, pids: list[int]) -> None:
        if not self.wanted:
            return
        if self.program is None:
            raise SystemExit("BENCH_PROFILE is set but py-spy was not found (BENCH_PYSPY)")
        OUT.mkdir(parents=True, exist_ok=True)
        for pid in pids:
            path = OUT / f"profile-{self.phase}-{pid}.txt"
            # --nonblocking: the manager is sampled without being paused for each sample
            cmd = [self.program, "record", "--pid", str(pid), "--rate", "100", "--format", "raw"]
            cmd += ["--nonblocking"]
            proc = subprocess.Popen([*cmd, "--output", str(path)], stdout=subprocess.DEVNULL)
            self._procs.append((proc, path))

    def stop(self) -> dict[str, float]:
        """Stop recording; the project's functions holding the most samples, as bench figures."""
        paths = []
        for proc, path in self._procs:
            proc.send_signal(signal.SIGINT)  # only the recorder this phase started
            proc.wait(30)
            paths.append(path)
        self._procs = []
        return profile_summary(paths, self.phase) if paths else {}


# Threads py-spy counts as busy that /proc shows idle: grpc's poller (aetcd's channel) and an idle
# executor thread. Their stacks hold no frame of ours.
IDLE_THREAD_LEAVES = ("Thread.run (threading.py", "_worker (concurrent/futures/thread.py")


def profile_summary(paths: list[Path], phase: str, top: int = 25) -> dict[str, float]:
    """Each sample charged to the innermost frame of the project's code on its stack (or its
    innermost frame, when none is: the event loop's own C code shows as `run`), in percent of the
    samples, the idle threads' left out."""
    own: collections.Counter[str] = collections.Counter()
    count = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
            if not n.isdigit() or not frames or frames[-1].startswith(IDLE_THREAD_LEAVES):
                continue
            ours = [f for f in frames if "sokovan/" in f]
            own[ours[-1] if ours else frames[-1]] += int(n)
            count += int(n)
    if not count:
        return {}
    return {f"profile_{phase}_{frame}": round(100 * n / count, 1) for frame, n in own.most_common(top)}
