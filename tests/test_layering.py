"""Layers import downward only; an import that breaks the layering fails here.

From the bottom: `common`; then `db`, `config`, `bus`; then the neutral `state` layer; then the
`orchestrator`; the `manager` (its API and repositories never reach into the orchestrator: the API
goes through the controllers and hints); the `agent` and the app `proxy` stand apart (neither
touches the database); `cli`, `harness` and `devenv` sit on top. Every `import` statement counts,
also those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "sokovan"
TOP = ("cli", "harness", "devenv")

# importer (a package or module below sokovan) → what it must never import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "common": ("db", "config", "bus", "state", "orchestrator", "manager", "agent", *TOP),
    "db": ("config", "bus", "state", "orchestrator", "manager", "agent", *TOP),
    "config": ("db", "bus", "state", "orchestrator", "manager", "agent", *TOP),
    "bus": ("db", "config", "state", "orchestrator", "manager", "agent", *TOP),
    "state": ("config", "orchestrator", "manager", "agent", *TOP),
    "orchestrator": ("manager", "agent", *TOP),
    "manager.api": ("orchestrator",),
    "manager.repositories": ("orchestrator",),
    "agent": ("db", "state", "orchestrator", "manager", *TOP),
    "proxy": ("db", "state", "orchestrator", "manager", "agent", *TOP),
}


def module_name(path: Path, root: Path = SRC) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, absolute module below sokovan) for every sokovan import in `source`."""
    out: list[tuple[int, str]] = []
    package = module.split(".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the importing module's package
                base = package[: len(package) - node.level]
                name = ".".join(["sokovan", *base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            out.append((node.lineno, name))
    return [(line, name.removeprefix("sokovan.")) for line, name in out if name.startswith("sokovan.")]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(source: str, module: str) -> list[str]:
    found = []
    for importer, banned in FORBIDDEN.items():
        if not _under(module, importer):
            continue
        for line, name in imported_modules(source, module):
            found += [f"{module}:{line} imports sokovan.{name}" for b in banned if _under(name, b)]
    return found


def test_the_tree_keeps_its_layers() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += violations(path.read_text(), module_name(path))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("orchestrator.schedule.coordinator", "from sokovan.manager.context import ManagerContext\n"),
        ("orchestrator.loop", "def f():\n    import sokovan.manager.daemon\n"),
        ("state.session_writes", "from sokovan.orchestrator.classify import classify\n"),
        ("manager.api.sessions", "from sokovan.orchestrator.provisioner import registry\n"),
        ("manager.repositories.agents", "from ...orchestrator import locks\n"),
        ("common.types", "from sokovan.db.models import Session\n"),
        ("agent.daemon", "from sokovan.state.kernel_writes import KernelTransition\n"),
        ("proxy.daemon", "from sokovan.db.engine import create_engine\n"),
        ("proxy.forward", "from sokovan.manager.api.problems import problem_response\n"),
    ],
)
def test_a_wrong_import_is_caught(module: str, source: str) -> None:
    assert violations(source, module)


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("orchestrator.schedule.coordinator", "from sokovan.state.session_writes import SessionTransition\n"),
        ("manager.controller.stages", "from sokovan.orchestrator.provisioner import registry\n"),
        ("manager.daemon", "from sokovan.orchestrator.orchestrator import SokovanOrchestrator\n"),
        ("state.occupancy", "from sokovan.db.models import Kernel\n"),
        ("proxy.table", "from sokovan.bus.routing import read_table\n"),
    ],
)
def test_a_downward_import_is_allowed(module: str, source: str) -> None:
    assert not violations(source, module)
