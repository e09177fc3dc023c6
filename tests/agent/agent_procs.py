"""Agent processes in tests: stopping them so that no kernel outlives the test.

An agent stopped with SIGTERM (or killed) leaves its kernels running by design; tests stop agents
with SIGINT, which destroys them, and a test that detaches or kills an agent on purpose ends by
killing the kernels its agent recorded in its state file — only those, and only while their pid
still has the recorded start time (never another process that reused the number).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from sokovan.agent import kernel_proc
from sokovan.agent.state_file import AgentState

STOP_TIMEOUT = 30.0


async def stop_agent(proc: asyncio.subprocess.Process, sig: signal.Signals = signal.SIGINT) -> None:
    """`sig` (SIGINT: the kernels are destroyed) and wait; SIGKILL after STOP_TIMEOUT seconds."""
    if proc.returncode is None:
        proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), STOP_TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def program_started(wrapper: int, within: float = 10.0) -> int:
    """Waits until the kernel wrapper `wrapper` has started the kernel's program; the program's pid.

    (A kernel signalled before that ends without starting its program.)"""
    async with asyncio.timeout(within):
        while True:
            found = children(wrapper)
            if found:
                return found[0]
            await asyncio.sleep(0.02)


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children (its main thread's)."""
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def kill_recorded_kernels(state_file: Path) -> list[int]:
    """SIGKILL the process group of every kernel `state_file` names that still runs; their pids."""
    try:
        state = AgentState.model_validate_json(state_file.read_bytes())
    except (OSError, ValueError):
        return []
    killed = []
    for kernel in state.kernels:
        if kernel_proc.alive(kernel.pid, kernel.pid_start):
            kernel_proc.killpg(kernel.pid, signal.SIGKILL)
            killed.append(kernel.pid)
    return killed
