"""The agent's work dir and state file are used only when they are the agent's own: a default path
nobody else can pre-create, a refusal to start in a dir of someone else's or that others may write
to, and a state file of someone else's ignored (its pids and uids never killed or chowned)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.runtime import AgentStartError
from sokovan.agent.state_file import KernelRecord, StateFile
from sokovan.agent.work_dir import default_work_dir, ensure_work_dir
from sokovan.common.settings import Settings

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")


async def _start(settings: Settings, work_dir: Path) -> None:
    """Start an agent on `work_dir` (stopped again if it does start)."""
    daemon = AgentDaemon(
        settings, AgentConfig(agent_id=f"wd-{uuid.uuid4().hex[:8]}", rpc_port=0, work_dir=work_dir)
    )
    try:
        await daemon.start()
    finally:
        await daemon.stop()


@as_root
async def test_a_work_dir_owned_by_another_uid_is_refused(settings: Settings, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    os.chown(work, NOBODY, NOBODY)
    with pytest.raises(AgentStartError, match="owned by uid 65534"):
        await _start(settings, work)
    assert list(work.iterdir()) == []


async def test_a_group_writable_work_dir_is_refused(settings: Settings, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    work.chmod(0o770)
    with pytest.raises(AgentStartError, match="writable by group or others"):
        await _start(settings, work)


async def test_a_symlinked_work_dir_is_refused(settings: Settings, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "work").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AgentStartError, match="symlink"):
        await _start(settings, tmp_path / "work")


def test_a_missing_work_dir_is_made_private(tmp_path: Path) -> None:
    work = tmp_path / "a" / "work"
    ensure_work_dir(work)
    info = work.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o700)
    ensure_work_dir(work)  # the agent's own dir: fine the second time


def test_the_default_work_dir_is_not_in_a_shared_temporary_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_work_dir("a1") == Path("/var/lib/sokovan/agent-a1")
    assert AgentConfig(agent_id="a1").resolved_work_dir() == Path("/var/lib/sokovan/agent-a1")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_work_dir("a1") == tmp_path / "state" / "sokovan" / "agent-a1"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_work_dir("a1") == tmp_path / "home" / ".local" / "state" / "sokovan" / "agent-a1"


def _state_with_a_kernel(path: Path, agent_id: str) -> StateFile:
    state = StateFile(path, agent_id)
    record = KernelRecord(kernel_id="k-1", session_id="s-1", pid=1, pid_start=None, directory="/", uid=0)
    state.save([record])
    assert [r.kernel_id for r in state.load()] == ["k-1"]
    return state


@as_root
def test_a_state_file_owned_by_another_uid_is_ignored(tmp_path: Path) -> None:
    state = _state_with_a_kernel(tmp_path / "agent-state.json", "a1")
    os.chown(state.path, NOBODY, NOBODY)
    assert state.load() == []  # no pid to kill, no uid to chown a directory to


def test_a_group_writable_state_file_is_ignored(tmp_path: Path) -> None:
    state = _state_with_a_kernel(tmp_path / "agent-state.json", "a1")
    state.path.chmod(0o666)
    assert state.load() == []


def test_a_symlinked_state_file_is_ignored(tmp_path: Path) -> None:
    real = _state_with_a_kernel(tmp_path / "real.json", "a1")
    (tmp_path / "agent-state.json").symlink_to(real.path)
    assert StateFile(tmp_path / "agent-state.json", "a1").load() == []
