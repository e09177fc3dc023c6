"""A session's kernels as a cluster: their hostnames and the variables every kernel gets.

The first kernel of a session is `main1`, the others `sub1`, `sub2`, … in index order (Backend.AI's
names). Each kernel learns the whole list, its own place in it, and what torch.distributed's and
MPI launchers read (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`, `NODE_RANK`), so a
distributed job starts with no set-up of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_MASTER_PORT = "29500"


def hostname(idx: int) -> str:
    """The cluster hostname of the kernel at index `idx` (0 is the main kernel)."""
    return "main1" if idx == 0 else f"sub{idx}"


def hostnames(size: int) -> list[str]:
    return [hostname(i) for i in range(max(size, 1))]


def cluster_environ(size: int, idx: int, environ: Mapping[str, str]) -> dict[str, str]:
    """The cluster variables of kernel `idx` of `size`; `MASTER_PORT` may come from `environ`."""
    hosts = hostnames(size)
    return {
        "SOKOVAN_CLUSTER_SIZE": str(len(hosts)),
        "SOKOVAN_CLUSTER_HOSTS": ",".join(hosts),
        "SOKOVAN_CLUSTER_HOST": hostname(idx),
        "SOKOVAN_CLUSTER_ROLE": "main" if idx == 0 else "sub",
        "SOKOVAN_CLUSTER_IDX": str(idx),
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": environ.get("MASTER_PORT", DEFAULT_MASTER_PORT),
        "WORLD_SIZE": str(len(hosts)),
        "RANK": str(idx),
        "NODE_RANK": str(idx),
    }
