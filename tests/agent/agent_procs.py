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
