"""Hand-written SQL never spells a status: statuses enter it as bound parameters from the enums.

Every string given to `text(...)` / `literal_column(...)` in src/sokovan, and every module-level
string that reads like SQL, is checked for a quoted value of a status enum (`'READY'`,
`'TERMINATED'`, ...). A status renamed in `common/types.py` then cannot leave a query behind.
"""

from __future__ import annotations

import ast
import enum
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sokovan.common.types import AgentStatus, KernelStatus, SessionResult, SessionStatus

SRC = Path(__file__).resolve().parents[1] / "src" / "sokovan"
STATUS_ENUMS: tuple[type[enum.StrEnum], ...] = (SessionStatus, KernelStatus, AgentStatus, SessionResult)
QUOTED = {f"'{member.value}'" for e in STATUS_ENUMS for member in e}
SQL_CALLS = {"text", "literal_column"}
LOOKS_LIKE_SQL = re.compile(r"\b(SELECT|UPDATE|INSERT|DELETE|WHERE)\b")


def _strings(node: ast.AST) -> Iterator[str]:
    """The literal text inside an expression: constants, f-string parts, concatenations."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value


def _called(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def sql_strings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every SQL string in `source`: arguments of `text()` / `literal_column()`
    anywhere, and module-level assignments of a string that reads like SQL."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in SQL_CALLS:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                for s in _strings(arg):
                    yield node.lineno, s
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            joined = "".join(_strings(stmt.value))
            if LOOKS_LIKE_SQL.search(joined) and not isinstance(stmt.value, ast.Call):
                yield stmt.lineno, joined


def quoted_statuses(text: str) -> list[str]:
    return sorted(q for q in QUOTED if q in text)


def all_sql() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for line, text in sql_strings(path.read_text()):
            out.append((f"{path.relative_to(SRC.parent)}:{line}", line, text))
    return out


def test_no_sql_string_in_src_quotes_a_status() -> None:
    offenders = {where: quoted_statuses(text) for where, _, text in all_sql() if quoted_statuses(text)}
    assert offenders == {}, f"statuses must be bound parameters from the enums, not literals: {offenders}"


def test_the_scan_sees_the_hand_written_statements() -> None:
    """Guard against a scan that passes because it finds nothing."""
    found = {where.split(":")[0] for where, _, _ in all_sql()}
    for module in (
        "sokovan/orchestrator/retry/engine.py",
        "sokovan/orchestrator/maintenance/reconciler.py",
        "sokovan/orchestrator/maintenance/leak_repair.py",
        "sokovan/orchestrator/provisioner/allocator.py",
        "sokovan/manager/repositories/sessions_read.py",
        "sokovan/orchestrator/locks.py",
    ):
        assert module in found


@pytest.mark.parametrize(
    "source",
    [
        "q = text(\"SELECT 1 FROM agents WHERE status = 'READY'\")",
        "q = sa.text(\"UPDATE kernels SET x = 1\" \" WHERE status IN ('PREPARING', 'PULLING')\")",
        "def f(n):\n    return text(f\"SELECT {n} FROM sessions WHERE result = 'SUCCESS'\")",
        '_Q = ("SELECT id FROM sessions"\n      " WHERE status = \'TERMINATED\'")',
        "j = literal_column(\"'RUNNING'\")",
    ],
)
def test_the_scan_catches_a_quoted_status(source: str) -> None:
    assert any(quoted_statuses(text) for _, text in sql_strings(source))


@pytest.mark.parametrize(
    "source",
    [
        "q = text('SELECT 1 FROM agents WHERE status = :ready')",
        "q = text(\"SELECT 1 FROM sessions WHERE status_info ->> 'decision' = 'scheduled'\")",
        "MESSAGE = 'not READY'",  # a message, not SQL
    ],
)
def test_the_scan_lets_parameters_and_other_literals_pass(source: str) -> None:
    assert not any(quoted_statuses(text) for _, text in sql_strings(source))
