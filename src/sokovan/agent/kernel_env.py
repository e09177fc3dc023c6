"""The environment a kernel starts with: a small base, its image's variables, its session's
`environ`, and the variables the agent sets for every kernel — never the agent's own environment.

The agent may hold the cluster secret, database and Redis URLs in its environment (and did pass
them on once); a kernel gets none of that, only:

- the base: PATH (the system's, usually replaced by the image's), HOME and TMPDIR (both the
  kernel's own directory, private to its session), LANG (C.UTF-8);
- the image's variables (`ImageEnv.environment()`: its PATH and the catalog's `env`);
- the session's `environ`, which may override the base and the image;
- SOKOVAN_KERNEL_ID, SOKOVAN_SESSION_ID and, for an inference kernel, PORT, which nothing overrides;
- CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES: the UUIDs of the GPUs the kernel was given,
  empty for a kernel given none (so a CPU kernel sees no GPU), which nothing overrides either.
"""

from __future__ import annotations

from collections.abc import Mapping

from sokovan.agent.images import SYSTEM_PATH
from sokovan.common.gpu import visible_devices


def kernel_environ(
    *,
    directory: str,
    image: Mapping[str, str],
    environ: Mapping[str, str],
    kernel_id: str,
    session_id: str,
    port: int | None = None,
    devices: list[str] | None = None,
) -> dict[str, str]:
    """The whole environment of one kernel (see the module's docstring for the order)."""
    env = {"PATH": SYSTEM_PATH, "HOME": directory, "TMPDIR": directory, "LANG": "C.UTF-8"}
    env.update(image)
    env.update(environ)
    env.update(SOKOVAN_KERNEL_ID=kernel_id, SOKOVAN_SESSION_ID=session_id)
    env.update(visible_devices(devices or []))
    if port is not None:
        env["PORT"] = str(port)  # the agent's port wins over one in the session's environ
    return env
