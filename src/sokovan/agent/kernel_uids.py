"""Which uid a session's kernels run under, when the agent runs as root.

Each session gets an unprivileged uid of its own from the range `--kernel-uids` (default
20000-29999; the gid is the same number, with no supplementary groups): every kernel of the session
on this agent shares it, kernels of different sessions never do. So a kernel cannot signal the
agent or another session's kernels, nor read their directories (0700) or logs (0600, the
agent's). The uid is derived from the session id (a hash into the range), moving on past a uid
that is taken: by another session of this agent, by a user of the host (`/etc/passwd`), or by
any running process. It is recorded with each kernel in the state file, so a restarted agent
gives a session the uid its running kernels have (`restore`). When the session's last kernel on
the agent ends the uid is released, and whatever still runs under it is killed (`kill_uid`):
a later session that happens to get the number finds nothing of the earlier one running.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_KERNEL_UIDS = "20000-29999"


@dataclass(frozen=True)
class UidRange:
    first: int
    last: int

    @classmethod
    def parse(cls, text: str) -> UidRange:
        """`"20000-29999"`; ValueError for anything else, for root, or for a reversed range."""
        first, sep, last = text.strip().partition("-")
        try:
            bounds = cls(int(first), int(last)) if sep else None
        except ValueError:
            bounds = None
        if bounds is None or not 0 < bounds.first <= bounds.last < 2**31 - 1:
            raise ValueError(f"{text!r} is not a uid range like '20000-29999' (above 0)")
        return bounds

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    def preferred(self, session_id: str) -> int:
        """Where a session's search starts: a hash of its id into the range."""
        digest = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big")
        return self.first + digest % len(self)

    def candidates(self, session_id: str) -> Iterator[int]:
        start = self.preferred(session_id) - self.first
        for step in range(len(self)):
            yield self.first + (start + step) % len(self)


def host_uid_taken(uid: int) -> bool:
    """Whether `uid` is a user of the host, or runs a process."""
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return bool(processes_of(uid))


def processes_of(uid: int) -> list[int]:
    """The pids whose real or effective uid is `uid` (from /proc/<pid>/status, which shows them
    also for a process that made itself non-dumpable)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:"):
                ids = line.split()[1:3]
                if str(uid) in ids:
                    found.append(int(entry.name))
                break
    return found


def kill_uid(uid: int) -> int:
    """SIGKILL every process of `uid`; how many there were. Never for root or the agent's user."""
    if uid in (0, os.getuid(), os.geteuid()):
        return 0
    pids = processes_of(uid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


class KernelUids:
    """session → uid for this agent's kernels; disabled (every answer None) without a range."""

    def __init__(self, uids: UidRange | None, taken: Callable[[int], bool] = host_uid_taken) -> None:
        self.range = uids
        self._taken = taken
        self._by_session: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.range is not None

    def of(self, session_id: str) -> int | None:
        return self._by_session.get(session_id)

    def acquire(self, session_id: str) -> int | None:
        """The session's uid (the one it has, or a free one); None when not isolating.
        ValueError when every uid of the range is taken."""
        if self.range is None:
            return None
        if session_id in self._by_session:
            return self._by_session[session_id]
        used = set(self._by_session.values())
        for uid in self.range.candidates(session_id):
            if uid not in used and not self._taken(uid):
                self._by_session[session_id] = uid
                return uid
        raise ValueError(f"no free kernel uid in {self.range.first}-{self.range.last}")

    def restore(self, session_id: str, uid: int | None) -> None:
        """A running kernel taken over after a restart keeps its session's uid."""
        if uid is not None and self.range is not None and uid in self.range:
            self._by_session.setdefault(session_id, uid)

    def release(self, session_id: str) -> int | None:
        """Forget the session's uid (its last kernel here ended); the uid, or None."""
        return self._by_session.pop(session_id, None)
