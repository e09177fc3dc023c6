"""The documents stay true: every class they name exists in the code."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import sokovan

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"`([A-Z][A-Za-z]+)`")


def _defined_names() -> set[str]:
    """Every module-level name of the package, and every handler's name (some handlers are data:
    promotions and agent calls are specs run by one class, listed in the orchestrator)."""
    names: set[str] = set()
    for module in pkgutil.walk_packages(sokovan.__path__, "sokovan."):
        if module.name.endswith("__main__"):
            continue
        names.update(vars(importlib.import_module(module.name)))
    from sokovan.common.rpc import AgentRPCClient
    from sokovan.orchestrator.orchestrator import session_handlers

    names.update(h.name for h in session_handlers(None, AgentRPCClient("unused")))  # type: ignore[arg-type]
    return names


def test_every_class_the_architecture_names_exists() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(NAMED.findall(text)) - {
        "PENDING",
        "SCHEDULED",
        "PREPARING",
        "CREATING",
        "TERMINATING",
        "TERMINATED",
        "SUCCESS",
        "ERROR",
        "FAILURE",
        "CANCELLED",
        "USER_CANCELLED",
        "PREEMPTED",
        "SCHEDULER_TIMEOUT",
        "RUNNING",
        "PREPARED",
        # agent statuses
        "UNKNOWN",
        "BOOTING",
        "READY",
        "DEGRADED",
        "DOWN",
        "DRAINING",
        "DRAINED",
        "FAILED",
    }
    missing = sorted(named - _defined_names())
    assert not missing, f"docs/architecture.md names classes that do not exist: {missing}"


def test_handler_tables_name_real_handlers() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| ([A-Z][A-Za-z]+) \|", text, flags=re.MULTILINE)
    missing = sorted(set(rows) - _defined_names() - {"Handler", "Promotion"})
    assert not missing, missing
