"""`sokovan manager` runs one worker per core by default (`--workers auto`), a number overrides it,
and a worker never outlives its parent, even one killed with SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

import click
import pytest

from sokovan.harness import ManagerProc
from sokovan.manager.workers import WorkersType, auto_workers


def test_auto_is_one_per_core_and_a_number_overrides_it() -> None:
    kind = WorkersType()
    assert kind.convert("auto", None, None) == auto_workers() >= 1
    assert kind.convert("AUTO", None, None) == auto_workers()
    assert kind.convert("3", None, None) == 3
    for bad in ("0", "65", "two", ""):
        with pytest.raises(click.BadParameter):
            kind.convert(bad, None, None)


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(p) for p in text.split()}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_plain_manager_runs_a_worker_per_core_and_none_outlives_its_parent(
    service_env: dict[str, str], tmp_path: Path
) -> None:
    manager = ManagerProc({k: v for k, v in service_env.items() if k != "SOKOVAN_MANAGER_WORKERS"}, tmp_path,
                          args=["--workers", "auto"])  # fmt: skip
    manager.start()
    try:
        manager.wait_up(60)
        assert manager.proc is not None
        deadline = time.monotonic() + 30
        while manager.log_text().count('"manager.started"') < auto_workers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert manager.log_text().count('"manager.started"') == auto_workers(), manager.log_tail()
        workers = _children(manager.proc.pid)
        assert len(workers) == auto_workers() - 1, workers
        manager.kill()  # SIGKILL: no clean stop reaches the workers
        deadline = time.monotonic() + 15
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(w) for w in workers), "a worker outlived its parent"
    finally:
        if manager.running:
            manager.stop()
