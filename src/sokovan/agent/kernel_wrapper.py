"""The process a kernel runs under: it records the kernel's exit code in a file, so that an agent
that was restarted while the kernel ran (and so is not its parent) still learns how it ended.

Run as `python -I -S kernel_wrapper.py <exit-file> -- <program> [args...]` (stdlib only: it must
not import sokovan; `-I` keeps the kernel's PYTHON* variables away from it, `-S` skips `site` to
start sooner). It starts the program
as its child, in its own process group (the agent starts the wrapper as a session leader), and waits
for it. SIGTERM, SIGINT and SIGHUP get Python handlers that do nothing — not SIG_IGN, which the
program would inherit — so a `killpg` that stops the kernel stops the program but not the wrapper,
which reaps it and writes the code. The code is the program's exit status, or 128 + the signal
that killed it; it is written atomically (a temporary file renamed over `<exit-file>`), and the
wrapper exits with the same code. A program that cannot be started is 127; a signal that comes
before the program was started means it is not started at all (128 + that signal).

A SIGKILL of the whole group kills the wrapper too; then no file is written and whoever watches
the wrapper sees that SIGKILL instead. So does a signal in the few milliseconds before the wrapper
has its handlers (the interpreter starting).
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

NOT_STARTED = 127
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_received: list[int] = []


def _note(signum: int, frame: FrameType | None) -> None:
    """Survive the signal that stops the kernel (the program gets it from the same killpg), and
    remember it, in case the program has not been started yet."""
    _received.append(signum)


def exit_code(returncode: int) -> int:
    """A child's `returncode` as a shell reports it: the status, or 128 + the killing signal."""
    return 128 - returncode if returncode < 0 else returncode


def write_atomically(path: str, code: int) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as f:
        f.write(f"{code}\n")
    os.replace(temporary, path)


def run(exit_file: str, argv: list[str]) -> int:
    for signum in HANDLED:
        signal.signal(signum, _note)
    import subprocess  # after the handlers: the sooner they are in place, the better

    if _received:
        code = 128 + _received[0]
    else:
        try:
            child = subprocess.Popen(argv)
        except OSError as exc:
            print(f"cannot start {argv[0]!r}: {exc}", file=sys.stderr, flush=True)
            code = NOT_STARTED
        else:
            code = exit_code(child.wait())
    write_atomically(exit_file, code)
    return code


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        print("usage: kernel_wrapper.py EXIT_FILE -- PROGRAM [ARGS...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(run(args[0], args[2:]))


if __name__ == "__main__":
    main()
