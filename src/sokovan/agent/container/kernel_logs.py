"""A kernel's output from the engine: the tail of a live container's streams, and a copy of them
in the agent's work dir when it ends (so `logs` answers after the container is removed).

The engine keeps each container's log under the cap the agent asked for (`LogConfig` max-size);
what the agent reads is cut to the newest `limit` bytes, on a line boundary where one is near.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiodocker

from sokovan.agent.kernel_proc import STDERR, STDOUT
from sokovan.agent.log_tail import LOG_TAIL_BYTES, tail
from sokovan.common.rpc import LogsResponse

TAIL_LINES = 20_000  # lines asked of the engine before the byte cut
# An ended kernel's output lies where the process backend keeps it: the same names, the same reads.


def _cut(lines: list[str], limit: int) -> str:
    text = "".join(lines)
    data = text.encode(errors="replace")
    if len(data) <= limit:
        return text
    return data[-limit:].decode(errors="replace")


async def _stream(docker: aiodocker.Docker, container_id: str, stream: str, limit: int) -> str:
    container = docker.containers.container(container_id)
    try:
        if stream == "stdout":
            lines = await container.log(stdout=True, tail=TAIL_LINES)
        else:
            lines = await container.log(stderr=True, tail=TAIL_LINES)
    except (TimeoutError, aiodocker.DockerError, OSError):
        return ""
    return _cut([str(line) for line in lines], limit)


async def engine_tail(docker: aiodocker.Docker, container_id: str, limit: int) -> tuple[str, str]:
    """(stdout, stderr) of a container, the newest `limit` bytes of each."""
    out, err = await asyncio.gather(
        _stream(docker, container_id, "stdout", limit), _stream(docker, container_id, "stderr", limit)
    )
    return out, err


def _write(directory: Path, name: str, text: str) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(directory / name, flags, 0o600)
    try:
        os.write(fd, text.encode(errors="replace"))
    finally:
        os.close(fd)


async def save_logs(docker: aiodocker.Docker, container_id: str, directory: Path, limit: int) -> None:
    """Copy a container's output to `directory/stdout.log` and `stderr.log` (mode 0600)."""
    stdout, stderr = await engine_tail(docker, container_id, limit)

    def write() -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _write(directory, STDOUT, stdout)
        _write(directory, STDERR, stderr)

    try:
        await asyncio.to_thread(write)
    except OSError:
        pass


def saved_logs(directory: Path, kernel_id: str) -> LogsResponse | None:
    """The output `save_logs` kept of an ended kernel; None when there is none."""
    if not directory.is_dir():
        return None
    return LogsResponse(
        kernel_id=kernel_id,
        stdout=tail(directory / STDOUT, LOG_TAIL_BYTES),
        stderr=tail(directory / STDERR, LOG_TAIL_BYTES),
    )
