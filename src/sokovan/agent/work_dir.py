"""The agent's work dir: where it is by default, and what the agent checks before it trusts it.

By default a root agent works in `/var/lib/sokovan/agent-<id>`, any other user in its own state
directory (`$XDG_STATE_HOME`, else `~/.local/state`)`/sokovan/agent-<id>`: never a predictable
path in a directory others may write to, such as `/tmp`. Whatever the dir (default or
`--work-dir`), the agent refuses to start when it is a symlink or not a directory, is not owned by
the agent's uid, or its group or others may write to it; a missing one is made with mode 0700.
The state file is held to the same rule (`own_problem`) before the agent acts on what it says.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sokovan.agent.runtime import AgentStartError

ROOT_BASE = Path("/var/lib/sokovan")


def default_work_dir(agent_id: str) -> Path:
    if os.geteuid() == 0:
        return ROOT_BASE / f"agent-{agent_id}"
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "sokovan" / f"agent-{agent_id}"


def own_problem(info: os.stat_result) -> str | None:
    """Why a file or directory with this `lstat` is not the agent's own; None when it is."""
    uid = os.geteuid()
    if info.st_uid != uid:
        return f"owned by uid {info.st_uid}, not by the agent's uid {uid}"
    if info.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def ensure_work_dir(path: Path) -> None:
    """Make `path` (mode 0700) if missing; `AgentStartError` when it is not the agent's own."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise AgentStartError(f"cannot make the work dir {path}: {exc}") from exc
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise AgentStartError(f"cannot use the work dir {path}: {exc}") from exc
    if stat.S_ISLNK(info.st_mode):
        raise AgentStartError(f"the work dir {path} is a symlink: give the agent the real path")
    if not stat.S_ISDIR(info.st_mode):
        raise AgentStartError(f"the work dir {path} is not a directory")
    problem = own_problem(info)
    if problem is not None:
        raise AgentStartError(f"the work dir {path} is {problem}: the agent refuses to use it")
