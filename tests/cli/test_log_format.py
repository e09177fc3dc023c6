"""The daemons' log set-up (sokovan.common.logging): the redaction processor, both formats, and
the standard library's records rendered like structlog's own."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Callable, Iterator

import pytest
import structlog

from sokovan.common.logging import MASK, Redactor, default_format, setup_logging

DSN = "postgresql+asyncpg://sokovan:hunter2-pw@db.example:5432/sokovan"
MASKED_DSN = f"postgresql+asyncpg://sokovan:{MASK}@db.example:5432/sokovan"
SECRETS = ("secret_key", "cluster_secret", "password")


@pytest.mark.parametrize(
    ("event", "want"),
    [
        ({"token": "abc"}, {"token": MASK}),
        (dict.fromkeys(SECRETS, "abc"), dict.fromkeys(SECRETS, MASK)),
        ({"Authorization": "Bearer xyz"}, {"Authorization": MASK}),
        ({"environ": {"A": "1"}, "env": {"B": "2"}}, {"environ": MASK, "env": MASK}),
        ({"url": DSN}, {"url": MASKED_DSN}),
        ({"url": "redis://127.0.0.1:6379/0"}, {"url": "redis://127.0.0.1:6379/0"}),
        ({"error": f"cannot reach {DSN}: refused"}, {"error": f"cannot reach {MASKED_DSN}: refused"}),
        ({"header": "bearer tok.en-1"}, {"header": f"bearer {MASK}"}),
        ({"spec": {"image": "shell", "environ": {"K": "v"}}}, {"spec": {"image": "shell", "environ": MASK}}),
        ({"items": [{"password": "p"}, "x"]}, {"items": [{"password": MASK}, "x"]}),
        ({"session_id": "s1", "token": None}, {"session_id": "s1", "token": None}),
        ({"event": "x the-named-secret-1 y"}, {"event": f"x {MASK} y"}),
    ],
)  # fmt: skip
def test_redactor(event: dict[str, object], want: dict[str, object]) -> None:
    assert Redactor(["the-named-secret-1", "short"])(None, "info", dict(event)) == want


def test_a_short_named_secret_is_not_searched_for() -> None:
    assert Redactor(["abc"])(None, "info", {"event": "abcdef"}) == {"event": "abcdef"}


@pytest.fixture
def stderr(capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[[], str]]:
    """What the test wrote to stderr (set up logging inside the test: pytest swaps sys.stderr per
    phase); structlog's and logging's set-up restored afterwards."""
    root = logging.getLogger()
    handlers, level, hook = root.handlers[:], root.level, sys.excepthook
    try:
        yield lambda: capsys.readouterr().err
    finally:
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.captureWarnings(False)
        sys.excepthook = hook


def test_json_lines_from_structlog_and_from_logging(stderr: Callable[[], str]) -> None:
    setup_logging("agent", "json", context={"agent_id": "a-1"}, secrets=["cluster-secret-123"])
    log = structlog.get_logger("t")
    log.info("kernel.started", kernel_id="k1", session_id="s1", environ={"PW": "x"})
    log.info("agent.state_of_another_agent", agent_id="other")
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        log.exception("task.failed")
    logging.getLogger("aiohttp.server").warning("foreign %s with cluster-secret-123", "record")
    lines = [json.loads(line) for line in stderr().splitlines()]
    assert len(lines) == 4
    assert all(line["daemon"] == "agent" and line["timestamp"] and line["level"] for line in lines)
    assert lines[0]["agent_id"] == "a-1" and lines[0]["session_id"] == "s1" and lines[0]["environ"] == MASK
    assert lines[1]["agent_id"] == "other"  # an id the call names wins over the process's own
    assert lines[2]["level"] == "error" and "ValueError: bad" in lines[2]["exception"]
    assert lines[3]["event"] == f"foreign record with {MASK}" and lines[3]["logger"] == "aiohttp.server"


def test_console_mode_still_reads_as_text(stderr: Callable[[], str]) -> None:
    assert setup_logging("manager", "console") == "console"
    structlog.get_logger().info("manager.started", api="http://127.0.0.1:8090", token="t0k")
    logging.getLogger("asyncio").warning("foreign line")
    first, second = stderr().splitlines()
    assert "[info" in first and "manager.started" in first and "api=http://127.0.0.1:8090" in first
    assert f"token={MASK}" in first and "t0k" not in first
    assert "foreign line" in second and "daemon=manager" in second
    with pytest.raises(json.JSONDecodeError):
        json.loads(first)


def test_default_format_follows_whether_stderr_is_a_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert default_format(Tty()) == "console"
    assert default_format(io.StringIO()) == "json"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format"):
        setup_logging("manager", "xml")
