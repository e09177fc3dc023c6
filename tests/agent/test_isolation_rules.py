"""The pure rules of kernel isolation, as tables: a kernel's environment, uid ranges and the
session → uid map, the limits from slots, rlimits and cgroup files, the cgroup v2 lookup."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from sokovan.agent.images import SYSTEM_PATH
from sokovan.agent.kernel_env import kernel_environ
from sokovan.agent.kernel_limits import (
    AS_HEADROOM,
    KernelLimits,
    cgroup2_dir,
    cgroup_files,
    limits_for,
    rlimits,
)
from sokovan.agent.kernel_uids import KernelUids, UidRange

GiB = 2**30


@pytest.mark.parametrize(
    ("image", "environ", "port", "want"),
    [
        ({}, {}, None, {"PATH": SYSTEM_PATH, "HOME": "/w/k", "TMPDIR": "/w/k", "LANG": "C.UTF-8"}),
        ({"PATH": "/opt/bin:/bin", "X": "1"}, {}, None, {"PATH": "/opt/bin:/bin", "X": "1"}),
        ({"X": "1"}, {"X": "2", "LANG": "de_DE.UTF-8"}, None, {"X": "2", "LANG": "de_DE.UTF-8"}),
        ({}, {"SOKOVAN_KERNEL_ID": "forged", "PORT": "1"}, 8000, {"SOKOVAN_KERNEL_ID": "k", "PORT": "8000"}),
        ({}, {"PORT": "1"}, None, {"PORT": "1"}),
    ],
)
def test_kernel_environ(
    image: dict[str, str], environ: dict[str, str], port: int | None, want: dict[str, str]
) -> None:
    env = kernel_environ(
        directory="/w/k", image=image, environ=environ, kernel_id="k", session_id="s", port=port
    )
    assert {key: env[key] for key in want} == want
    assert env["SOKOVAN_SESSION_ID"] == "s"
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "SOKOVAN_KERNEL_ID", "SOKOVAN_SESSION_ID", "PORT"}
    allowed |= {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}  # empty: a kernel given no GPU
    assert set(env) <= allowed | set(image) | set(environ)  # nothing of the agent's own environment


def test_kernel_environ_never_takes_the_agents_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOKOVAN_CLUSTER_SECRET", "s3cret")
    monkeypatch.setenv("SOKOVAN_DB_URL", "postgresql://u:p@h/db")
    env = kernel_environ(directory="/w/k", image={}, environ={}, kernel_id="k", session_id="s")
    assert "s3cret" not in env.values() and "SOKOVAN_DB_URL" not in env


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("20000-29999", UidRange(20000, 29999)),
        (" 5-5 ", UidRange(5, 5)),
        ("0-10", None),
        ("10-5", None),
        ("20000", None),
        ("a-b", None),
        ("1-4294967295", None),
    ],
)
def test_uid_range_parse(text: str, want: UidRange | None) -> None:
    if want is None:
        with pytest.raises(ValueError, match="uid range"):
            UidRange.parse(text)
    else:
        assert UidRange.parse(text) == want


def test_uids_same_session_same_uid_others_differ_and_released() -> None:
    uids = KernelUids(UidRange(100, 102), taken=lambda uid: False)
    a = uids.acquire("session-a")
    assert a is not None and a in range(100, 103)
    assert uids.acquire("session-a") == a
    b, c = uids.acquire("session-b"), uids.acquire("session-c")
    assert len({a, b, c}) == 3
    with pytest.raises(ValueError, match="no free kernel uid"):
        uids.acquire("session-d")
    assert uids.release("session-b") == b
    assert uids.acquire("session-d") == b  # the only free one
    assert uids.release("session-x") is None


def test_uids_skip_taken_ones_and_restore_after_a_restart() -> None:
    taken = {200, 201}
    uids = KernelUids(UidRange(200, 203), taken=lambda uid: uid in taken)
    assert uids.acquire("s") in (202, 203)
    restarted = KernelUids(UidRange(200, 203), taken=lambda uid: True)  # a host where all look taken
    restarted.restore("s", 203)
    restarted.restore("t", 9999)  # not of the range: ignored
    assert (restarted.acquire("s"), restarted.of("t")) == (203, None)


def test_uids_are_disabled_without_a_range() -> None:
    uids = KernelUids(None)
    assert not uids.enabled and uids.acquire("s") is None


@pytest.mark.parametrize(
    ("slots", "want"),
    [
        ({}, KernelLimits(pids=64, file_size=1000)),
        ({"cpu": "1.5", "mem": "1g"}, KernelLimits(mem=GiB, cpu=Decimal("1.5"), pids=64, file_size=1000)),
        ({"cpu": "0", "mem": "0"}, KernelLimits(pids=64, file_size=1000)),
        ({"cpu": "x", "mem": "-1"}, KernelLimits(pids=64, file_size=1000)),
    ],
)
def test_limits_for(slots: dict[str, str], want: KernelLimits) -> None:
    assert limits_for(slots, 64, 1000) == want


@pytest.mark.parametrize(
    ("limits", "own_uid", "cgroup", "want"),
    [
        (KernelLimits(), False, False, {"RLIMIT_CORE": 0}),
        (
            KernelLimits(mem=GiB, pids=100, file_size=5),
            True,
            False,
            {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 5, "RLIMIT_AS": 2 * GiB + AS_HEADROOM, "RLIMIT_NPROC": 100},
        ),
        (  # not as root: RLIMIT_NPROC would count the agent's own processes
            KernelLimits(mem=GiB, pids=100),
            False,
            False,
            {"RLIMIT_CORE": 0, "RLIMIT_AS": 2 * GiB + AS_HEADROOM},
        ),
        (KernelLimits(mem=GiB, pids=100, file_size=5), True, True, {"RLIMIT_CORE": 0, "RLIMIT_FSIZE": 5}),
    ],
)
def test_rlimits(limits: KernelLimits, own_uid: bool, cgroup: bool, want: dict[str, int]) -> None:
    assert rlimits(limits, own_uid=own_uid, cgroup=cgroup) == want


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        (KernelLimits(pids=10), {"pids.max": "10"}),
        (
            KernelLimits(mem=GiB, cpu=Decimal("0.5"), pids=10),
            {"pids.max": "10", "memory.max": str(GiB), "memory.swap.max": "0", "cpu.max": "50000 100000"},
        ),
        (KernelLimits(cpu=Decimal("0.001"), pids=1), {"pids.max": "1", "cpu.max": "1000 100000"}),
        (KernelLimits(cpu=Decimal(4), pids=1), {"pids.max": "1", "cpu.max": "400000 100000"}),
    ],
)
def test_cgroup_files(limits: KernelLimits, want: dict[str, str]) -> None:
    assert cgroup_files(limits) == want


V1_MOUNTS = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
V2_MOUNTS = V1_MOUNTS + "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"


@pytest.mark.parametrize(
    ("mounts", "own", "want"),
    [
        (V2_MOUNTS, "4:memory:/x\n0::/agents/a1\n", Path("/sys/fs/cgroup/unified/agents/a1")),
        (V2_MOUNTS, "0::/\n", Path("/sys/fs/cgroup/unified")),
        (V1_MOUNTS, "0::/\n", None),
        (V2_MOUNTS, "4:memory:/x\n", None),
    ],
)
def test_cgroup2_dir(mounts: str, own: str, want: Path | None) -> None:
    assert cgroup2_dir(mounts, own) == want
