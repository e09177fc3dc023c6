"""The exit-code wrapper and the process checks a restarted agent relies on (no agent here)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sokovan.agent import kernel_proc
from sokovan.agent.state_file import KernelRecord, StateFile
from tests.agent.agent_procs import children


def start(command: str | None, directory: Path) -> subprocess.Popen[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    return kernel_proc.spawn(command, directory, {"PATH": os.environ["PATH"]})


def wait_for_child(wrapper: int) -> int:
    """The pid of the wrapper's child (the kernel's shell) once it runs."""
    for _ in range(500):
        found = children(wrapper)
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError("the wrapper started no child")


def wait_for_program(pid: int, name: str) -> None:
    """Until `pid` runs `name`: a shell that is still starting it catches SIGINT while it waits
    for a child, and may fork the child after the signal, which then runs on (seen in CI)."""
    for _ in range(500):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == name.encode():
                return
        time.sleep(0.02)
    raise AssertionError(f"{pid} never ran {name}")


@pytest.mark.parametrize(
    ("command", "code"),
    [("exit 3", 3), ("true", 0), ("kill -TERM $$", 143), ("kill -KILL $$", 137), ("exec /nonexistent", 127)],
)
def test_the_wrapper_records_and_exits_with_the_kernels_code(tmp_path: Path, command: str, code: int) -> None:
    proc = start(command, tmp_path)
    assert proc.wait(timeout=10) == code
    assert kernel_proc.read_exit_code(tmp_path) == code
    assert (tmp_path / kernel_proc.EXIT_FILE).read_text() == f"{code}\n"
    assert not (tmp_path / f"{kernel_proc.EXIT_FILE}.tmp").exists()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_the_wrapper_survives_a_killpg_and_records_the_signal(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    proc = start("exec sleep 30", tmp_path)
    wait_for_program(wait_for_child(proc.pid), "sleep")
    kernel_proc.killpg(proc.pid, sig)  # the kernel's group: the wrapper gets it too
    assert proc.wait(timeout=10) == code
    assert kernel_proc.read_exit_code(tmp_path) == code


# The program's process is held a second in its chdir, before its pre-exec step and its exec (strace
# delays that call), so a signal sent meanwhile surely comes between the fork and the exec. With
# limits to apply the process runs a pre-exec step, so Python forks it; without (no limits, no
# uid) Python vforks it, and then resets its handlers and holds its signals itself.
LIMITED = kernel_proc.Launch(rlimits={"RLIMIT_NOFILE": 1024})
SLOW_CHDIR = [
    "strace",
    "-f",
    "-qq",
    "-o",
    os.devnull,
    "-e",
    "trace=chdir",
    "-e",
    "inject=chdir:delay_enter=1000000",
]


def test_a_killpg_between_the_fork_and_the_exec_still_stops_the_program(tmp_path: Path) -> None:
    """A stop that comes while the wrapper starts the program must reach the program. Before,
    the new process had the wrapper's handlers in that window, whose Python code never runs there:
    the signal was lost and the kernel ran on until the agent's SIGKILL. `setsid`: the wrapper
    leads its own group, as the agent starts it, and strace stays out of the killpg."""
    document = kernel_proc.launch_document("exec sleep 30", tmp_path, {"PATH": os.environ["PATH"]}, LIMITED)
    tracer = subprocess.Popen(
        [*SLOW_CHDIR, "setsid", *kernel_proc.wrapper_argv()],
        stdin=subprocess.PIPE,
        env=kernel_proc.WRAPPER_ENV,
    )
    try:
        assert tracer.stdin is not None
        with tracer.stdin:
            tracer.stdin.write(document)
        wrapper = wait_for_child(tracer.pid)
        wait_for_child(wrapper)  # forked, and held in its chdir for a second
        kernel_proc.killpg(wrapper, signal.SIGINT)
        assert tracer.wait(timeout=10) == 130  # strace ends with its command's code
        assert kernel_proc.read_exit_code(tmp_path) == 130
    finally:
        if tracer.poll() is None:
            tracer.kill()
            tracer.wait()


def test_a_sigkilled_kernel_is_137(tmp_path: Path) -> None:
    proc = start(None, tmp_path)  # the idle command
    os.kill(wait_for_child(proc.pid), signal.SIGKILL)
    assert proc.wait(timeout=10) == 137
    assert kernel_proc.read_exit_code(tmp_path) == 137


def test_a_killpg_sigkill_ends_the_wrapper_without_a_record(tmp_path: Path) -> None:
    proc = start(None, tmp_path)
    wait_for_child(proc.pid)
    kernel_proc.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert kernel_proc.read_exit_code(tmp_path) is None


def test_a_stale_exit_code_is_removed_at_start(tmp_path: Path) -> None:
    (tmp_path / kernel_proc.EXIT_FILE).write_text("9\n")
    proc = start(None, tmp_path)
    assert kernel_proc.read_exit_code(tmp_path) is None
    wait_for_child(proc.pid)
    kernel_proc.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=10) == 143


def test_alive_tells_a_reused_pid_and_a_zombie_from_the_kernel(tmp_path: Path) -> None:
    proc = start(None, tmp_path)
    started = kernel_proc.start_time(proc.pid)
    assert started is not None
    assert kernel_proc.alive(proc.pid, started)
    assert not kernel_proc.alive(proc.pid, started + 1)  # another process with the same number
    wait_for_child(proc.pid)
    kernel_proc.killpg(proc.pid, signal.SIGTERM)
    while kernel_proc.read_exit_code(tmp_path) is None:
        time.sleep(0.02)
    time.sleep(0.2)  # exited, not reaped yet: a zombie
    assert not kernel_proc.alive(proc.pid, started)
    proc.wait(timeout=10)
    assert kernel_proc.start_time(proc.pid) is None
    assert not kernel_proc.alive(proc.pid, started)


async def test_wait_ended_watches_a_process_it_is_not_the_parent_of(tmp_path: Path) -> None:
    """What a restarted agent does: the pidfd watch (the wrapper here is the test's child, so it is
    reaped by the test, as init would reap an orphan)."""
    proc = start("sleep 0.3; exit 4", tmp_path)
    started = kernel_proc.start_time(proc.pid)
    reaper = asyncio.get_running_loop().run_in_executor(None, proc.wait)
    assert await asyncio.wait_for(kernel_proc.wait_ended(proc.pid, started, None), 10) is None
    assert await reaper == 4
    assert kernel_proc.read_exit_code(tmp_path) == 4


def test_state_file_round_trip_and_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "state" / "agent-state.json"
    record = KernelRecord(
        kernel_id="k1", session_id="s1", pid=123, pid_start=456, directory=str(tmp_path / "k1"), port=8000
    )
    state = StateFile(path, "agent-a")
    assert state.load() == []  # no file: a first start
    state.save([record])
    assert state.load() == [record]
    assert StateFile(path, "agent-b").load() == []  # another agent's file is not taken over
    path.write_text("{not json")
    assert state.load() == []
