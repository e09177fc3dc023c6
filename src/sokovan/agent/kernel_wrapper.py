"""The process a kernel runs under: it starts the kernel's program (as the session's uid, with its
limits), writes the program's output to capped log files, and records its exit code in a file, so
that an agent that was restarted while the kernel ran (and so is not its parent) still learns how
it ended.

Run as `python -I -S kernel_wrapper.py` with the launch document as JSON on stdin (stdlib only: it
must not import sokovan; `-I` keeps PYTHON* variables away from it, `-S` skips `site` to start
sooner). The agent starts it with a minimal environment of its own: the kernel's environment
(`env`, the session's variables) is in the launch document and reaches only the program, so that
nothing a session sets (LD_PRELOAD, say) can act on the wrapper, which may run as root. The
document's keys: `argv`, `env`, `cwd`, `exit_file`, `stdout`, `stderr`, `max_log_bytes`, and
optionally `uid` (the program runs as that uid and gid, with no supplementary groups), `umask`,
`rlimits` ({"RLIMIT_AS": bytes, ...}, applied to the program only) and `cgroup` (a cgroup v2
directory the wrapper joins before starting the program, so the program is in it from its first
instruction).

The program is started as the wrapper's child, in the wrapper's process group (the agent starts
the wrapper as a session leader), with its output on pipes the wrapper drains into the log files
(`CappedLog`: at most `max_log_bytes` per stream over two generations, the newest output kept).
SIGTERM, SIGINT, SIGHUP and SIGXFSZ get Python handlers that do nothing — not SIG_IGN, which the
program would inherit — so a `killpg` that stops the kernel stops the program but not the
wrapper, which reaps it and writes the code. The code is the program's exit status, or 128 + the
signal that killed it; it is written atomically (a new file, never opened through a link someone
else put there, renamed over `exit_file`), and the wrapper exits with the same code. A program
that cannot be started is 127; a signal that comes before the program was started means it is
not started at all (128 + that signal). One that comes while the program is being started is held
(blocked from before the fork) and acts on the program once its pre-exec step has given it the
default actions back: before, in that window, it was lost and the kernel ran on.

A SIGKILL of the whole group kills the wrapper too; then no file is written and whoever watches
the wrapper sees that SIGKILL instead. So does a signal in the few milliseconds before the wrapper
has its handlers (the interpreter starting).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from types import FrameType
from typing import Any

NOT_STARTED = 127
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXFSZ)
CHUNK = 65536
_received: list[int] = []


def _note(signum: int, frame: FrameType | None) -> None:
    """Survive the signal that stops the kernel (the program gets it from the same killpg), and
    remember it, in case the program has not been started yet."""
    _received.append(signum)


def exit_code(returncode: int) -> int:
    """A child's `returncode` as a shell reports it: the status, or 128 + the killing signal."""
    return 128 - returncode if returncode < 0 else returncode


def _create(path: str, mode: int) -> int | None:
    """A new regular file at `path` (whatever was there is unlinked, not followed); None when
    another process keeps putting something there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(3):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            return None
        try:
            return os.open(path, flags, mode)
        except FileExistsError:
            continue
        except OSError:
            return None
    return None


def write_atomically(path: str, code: int) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = _create(temporary, 0o644)
    if fd is None:
        return
    try:
        os.write(fd, f"{code}\n".encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)


class CappedLog:
    """One output stream's log file, at most `cap` bytes over two generations: when the file would
    pass cap/2 it becomes `<path>.1` (replacing the older one) and a new file starts, so the newest
    output is always kept. Files are created new (mode 0600), never opened through a link."""

    def __init__(self, path: str, cap: int) -> None:
        self.path = path
        self.half = max(cap // 2, 1)
        self.size = 0
        self.fd: int | None = None
        self._rotate()

    def _rotate(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        try:
            if stat.S_ISREG(os.lstat(self.path).st_mode):
                os.replace(self.path, f"{self.path}.1")
        except OSError:
            pass
        self.fd = _create(self.path, 0o600)
        self.size = 0

    def write(self, data: bytes) -> None:
        if len(data) > self.half:
            data = data[-self.half :]
        if self.size + len(data) > self.half:
            self._rotate()
        view = memoryview(data)
        while view and self.fd is not None:
            try:
                written = os.write(self.fd, view)
            except InterruptedError:
                continue
            except OSError:
                return
            self.size += written
            view = view[written:]


def _before_exec(rlimits: dict[str, int]) -> Any:
    """The program's pre-exec step: the handled signals back to their default action and
    unblocked (one sent while the program was being started was held until now, and now acts on
    it as on any program), then its resource limits lowered (after it took the session's uid)."""
    import resource

    pairs = [(getattr(resource, name), value) for name, value in rlimits.items()]

    def apply() -> None:
        for signum in HANDLED:
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)
        for which, value in pairs:
            resource.setrlimit(which, (value, value))

    return apply


def _start(launch: dict[str, Any], err: CappedLog) -> Any:
    import subprocess

    uid = launch.get("uid")
    rlimits = launch.get("rlimits") or {}
    # The handled signals are blocked from before the fork until the program's pre-exec step: in
    # between, the new process has the wrapper's handlers, whose Python code never runs there, so
    # a killpg in that window was lost and the kernel ran on (`_before_exec`).
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        return subprocess.Popen(
            launch["argv"],
            cwd=launch["cwd"],
            env=launch["env"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            user=uid,
            group=uid,
            extra_groups=[] if uid is not None else None,
            umask=launch.get("umask", -1),
            preexec_fn=_before_exec(rlimits),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        err.write(f"cannot start {launch['argv'][0]!r}: {exc}\n".encode())
        return None
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)  # one held meanwhile is noted now


def _pump(child: Any, logs: dict[int, CappedLog]) -> None:
    """Copy the program's output into its logs until it has ended; then whatever is left to read
    (a background process still holding the pipes does not keep the wrapper waiting)."""
    import selectors

    selector = selectors.DefaultSelector()
    for fd, log in logs.items():
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ, log)
    pidfd = None
    try:
        pidfd = os.pidfd_open(child.pid)
        selector.register(pidfd, selectors.EVENT_READ, None)
    except (AttributeError, OSError):
        pass
    ended = False
    while not ended and selector.get_map():
        for key, _ in selector.select(None if pidfd is not None else 0.5):
            if key.data is None:
                ended = True
            elif not _copy(key.fd, key.data):
                selector.unregister(key.fd)
        ended = ended or (pidfd is None and child.poll() is not None)
    for fd, log in logs.items():
        while _copy(fd, log):
            pass
    if pidfd is not None:
        os.close(pidfd)


def _copy(fd: int, log: CappedLog) -> bool:
    """One read from `fd` into `log`; False at the end of the pipe or when nothing is there now."""
    try:
        data = os.read(fd, CHUNK)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return False
    if data:
        log.write(data)
    return bool(data)


def _join_cgroup(directory: str, err: CappedLog) -> bool:
    try:
        with open(os.path.join(directory, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as exc:
        err.write(f"cannot join the kernel's cgroup {directory}: {exc}\n".encode())
        return False
    return True


def run(launch: dict[str, Any]) -> int:
    cap = int(launch["max_log_bytes"])
    out, err = CappedLog(launch["stdout"], cap), CappedLog(launch["stderr"], cap)
    joined = not launch.get("cgroup") or _join_cgroup(launch["cgroup"], err)
    child = _start(launch, err) if joined and not _received else None
    if child is not None:  # a signal noted while it was started reached it too (`_start`)
        with child.stdout, child.stderr:
            _pump(child, {child.stdout.fileno(): out, child.stderr.fileno(): err})
        code = exit_code(child.wait())
    elif _received:
        code = 128 + _received[0]
    else:
        code = NOT_STARTED
    write_atomically(launch["exit_file"], code)
    return code


def main() -> None:
    for signum in HANDLED:
        signal.signal(signum, _note)
    try:
        launch = json.load(sys.stdin)
    except ValueError as exc:
        print(f"kernel_wrapper.py: bad launch document on stdin: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(launch))


if __name__ == "__main__":
    main()
