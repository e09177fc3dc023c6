"""The lock that keeps connection-heavy modules apart across pytest-xdist workers
(tests/connection_budget.py): another process cannot take it while a marked module runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests import connection_budget

pytestmark = pytest.mark.many_connections  # so that this module holds the lock while it runs

TRY_LOCK = """
import sys
from pathlib import Path
from tests.connection_budget import held
try:
    with held(Path(sys.argv[1]), wait=False):
        print("taken")
except BlockingIOError:
    print("refused")
"""


def other_process_tries(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", TRY_LOCK, str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def test_another_process_is_refused_while_the_lock_is_held(tmp_path: Path) -> None:
    path = tmp_path / "budget.lock"
    with connection_budget.held(path):
        assert other_process_tries(path) == "refused"
    assert other_process_tries(path) == "taken"


def test_a_marked_module_holds_the_runs_lock_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    path = connection_budget.lock_path()
    if path is None:  # one process: there is no other worker to keep apart from, and no lock
        monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "x")
        assert connection_budget.lock_path() is not None
        return
    assert other_process_tries(path) == "refused"
