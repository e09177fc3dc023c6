"""`sokovan dev` without services: the agents' share of the host, the database it uses, the banner's
commands, and the supervising loop (an agent that stops is reported, the rest keep running; the
manager or proxy stopping stops everything)."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest

from sokovan import devenv
from sokovan.cli.session_cmd import create
from sokovan.common.slots import ResourceSlots
from sokovan.devenv import DevError, Supervisor, agent_slots, describe_exit, dev_database_url
from sokovan.harness import Daemon, stop_all
from sokovan.harness import process as harness_process

GIB = 2**30


@pytest.mark.parametrize(
    ("cpus", "mem", "agents", "expected"),
    [
        (16, 64 * GIB, 2, "cpu=8,mem=32768m"),
        (3, 8 * GIB, 2, "cpu=1.5,mem=4096m"),
        (5, 7 * GIB + 12345, 3, "cpu=1.66,mem=2389m"),  # both rounded down
        (20, 10 * GIB, 2, "cpu=10,mem=5120m"),
        (1, 2 * GIB, 2, "cpu=1,mem=1024m"),  # at least one CPU: the default request fits
        (Decimal(8), Decimal(16 * GIB), 1, "cpu=8,mem=16384m"),
    ],
)
def test_agents_split_the_host(cpus: int, mem: int, agents: int, expected: str) -> None:
    slots = agent_slots(cpus, mem, agents)
    assert slots == expected
    parsed = ResourceSlots.parse_cli(slots)  # what `sokovan agent --slots` accepts
    if cpus >= agents:
        assert parsed["cpu"] * agents <= cpus
    assert parsed["mem"] * agents <= mem
    assert mem - parsed["mem"] * agents < (2**20) * agents


def test_agent_slots_needs_an_agent() -> None:
    with pytest.raises(ValueError):
        agent_slots(4, GIB, 0)


def test_the_dev_database_is_sokovan_on_the_server_env_services_names() -> None:
    assert (
        dev_database_url("postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
        == "postgresql+asyncpg://postgres@127.0.0.1:5432/sokovan"
    )
    assert dev_database_url("postgresql+asyncpg://u:p@db:5433") == "postgresql+asyncpg://u:p@db:5433/sokovan"
    # A socket URL keeps its query; a database named on purpose is kept.
    assert (
        dev_database_url("postgresql+asyncpg://postgres@/postgres?host=/run/postgresql")
        == "postgresql+asyncpg://postgres@/sokovan?host=/run/postgresql"
    )
    assert dev_database_url("postgresql+asyncpg://u@h/mine") == "postgresql+asyncpg://u@h/mine"


def test_dev_reads_the_one_services_file() -> None:
    assert devenv.ENV_FILE.name == ".env.services" and devenv.ENV_FILE.parent == devenv.PROJECT_ROOT


def test_the_banners_commands_work_as_printed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    monkeypatch.setattr(sys, "prefix", str(venv))
    text = devenv.banner("process", "http://127.0.0.1:8090", "http://127.0.0.1:8091", "tok", "x://h/sokovan")
    lines = [line.strip() for line in text.splitlines()]
    source = lines.index(f"source {venv}/bin/activate")  # absolute: `sokovan` is on the PATH after it
    export = next(i for i, line in enumerate(lines) if line.startswith("export "))
    assert source < export
    assert lines[export] == "export SOKOVAN_API=http://127.0.0.1:8090 SOKOVAN_TOKEN=tok"
    example = shlex.split(next(line for line in lines if line.startswith("sokovan session create")))
    assert example[:3] == ["sokovan", "session", "create"]
    # It parses as the CLI has it (nothing is sent: only the arguments are read).
    params = create.make_context("create", example[3:]).params
    assert (params["session_type"], params["command"], params["wait"]) == ("batch", "echo hello", True)
    assert "database: sokovan on h" in text


def test_no_source_line_outside_a_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", sys.base_prefix)
    text = devenv.banner("process", "http://a", "http://b", "tok", "x://h/sokovan")
    assert "source " not in text and "export SOKOVAN_API=http://a SOKOVAN_TOKEN=tok" in text


def test_describe_exit() -> None:
    assert describe_exit(3) == "exit code 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"


# --------------------------------------------------------------------------- supervising

FAKE = (
    "import sys, time; print(sys.argv[3], flush=True); "
    "print('stderr ' + sys.argv[3], file=sys.stderr, flush=True); "
    "time.sleep(float(sys.argv[1])); sys.exit(int(sys.argv[2]))"
)


def fake(name: str, seconds: float, code: int, log_dir: Path) -> Daemon:
    """A daemon that prints a line, lives `seconds` and exits with `code` (echoed and logged as
    `sokovan dev` has its daemons)."""
    daemon = Daemon(name, [str(seconds), str(code), f"hello from {name}"], {}, log_dir)
    daemon.echo = True
    return daemon


@pytest.fixture
def fake_sokovan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_process, "SOKOVAN", [sys.executable, "-c", FAKE])


def wait_for(cond: Callable[[], bool], within: float = 10) -> None:
    deadline = time.monotonic() + within
    while not cond():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


@pytest.mark.usefixtures("fake_sokovan")
def test_one_agent_stopping_is_reported_and_the_rest_keep_running(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    manager, proxy = fake("manager", 30, 0, tmp_path), fake("proxy", 30, 0, tmp_path)
    short, other = fake("dev-agent-1", 0, 3, tmp_path), fake("dev-agent-2", 30, 0, tmp_path)
    (tmp_path / "dev-agent-1.log").write_text("\n===== start #1 at 0.000 =====\nan earlier run\n")
    said: list[str] = []
    supervisor = Supervisor([manager, proxy], [short, other], say=said.append)
    daemons = [manager, proxy, short, other]
    try:
        for d in daemons:
            d.start()
        began = time.monotonic()
        supervisor.run(poll=0.02, until=lambda: bool(said) or time.monotonic() - began > 10)
        assert len(said) == 1, said
        report = said[0]
        assert "dev-agent-1 stopped (exit code 3)" in report
        assert "| hello from dev-agent-1" in report and "| stderr hello from dev-agent-1" in report
        assert report.count("===== start #") == 1 and "an earlier run" not in report
        assert "the rest keep running (1 of 2 agents;" in report
        assert manager.running and proxy.running and other.running
        supervisor.check()  # reported once only
        assert len(said) == 1 and supervisor.stopped == {"dev-agent-1": 3}
        # The second agent stopped on purpose is not a failure either.
        other.terminate()
        other.wait(10)
        supervisor.check()
        assert len(said) == 1
        # The echo went to this process's output too.
        both = {"hello from manager", "stderr hello from manager"}
        wait_for(lambda: both <= set(manager.log_text().split("\n")))
        out, err = capfd.readouterr()
        assert "hello from manager" in out and "stderr hello from dev-agent-1" in err
        # The manager dying stops everything.
        assert manager.proc is not None
        manager.proc.send_signal(signal.SIGKILL)
        manager.proc.wait(10)
        with pytest.raises(DevError, match=r"manager stopped \(killed by SIGKILL\); stopping everything"):
            supervisor.check()
    finally:
        stop_all(daemons, timeout=10)


@pytest.mark.usefixtures("fake_sokovan")
def test_the_proxy_stopping_stops_everything(tmp_path: Path) -> None:
    manager, proxy = fake("manager", 30, 0, tmp_path), fake("proxy", 0, 1, tmp_path)
    agent = fake("dev-agent-1", 30, 0, tmp_path)
    supervisor = Supervisor([manager, proxy], [agent], say=lambda text: None)
    try:
        for d in (manager, proxy, agent):
            d.start()
        with pytest.raises(DevError) as caught:
            supervisor.run(poll=0.02)
        assert "proxy stopped (exit code 1)" in str(caught.value)
        assert "| hello from proxy" in str(caught.value)
    finally:
        stop_all([manager, proxy, agent], timeout=10)
