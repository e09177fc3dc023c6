"""How `sokovan agent` turns its flags and config file into an `AgentConfig` or a `HollowConfig`:
a flag wins over the file's key, every bad value is a `click.ClickException` (`sokovan.cli.agent_cmd`
documents the options)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sokovan.agent.daemon import AgentConfig
from sokovan.agent.health import DEFAULT_MIN_FREE_DISK, parse_size
from sokovan.agent.hollow import DEFAULT_SLOTS, HollowConfig
from sokovan.agent.images import ImageCatalog, ImageCatalogError
from sokovan.agent.isolation import IsolationOptions
from sokovan.agent.kernel_uids import UidRange
from sokovan.agent.outbox import MAX_PENDING, parse_event_names
from sokovan.agent.secret_file import (
    SecretFileError,
    read_secret_file,
)
from sokovan.cli.agent_containers import build_containers
from sokovan.common.slots import ResourceSlots, SlotError
from sokovan.common.types import AgentClass

CLASSES = [c.value for c in AgentClass]


def host_slots() -> ResourceSlots:
    """What this host has: its CPU count and its memory."""
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if not mem:
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (OSError, ValueError):
            mem = 0
    return ResourceSlots.parse({"cpu": os.cpu_count() or 1, "mem": mem})


def pick(flag: Any, file_values: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if flag is not None:
        return flag
    value = file_values.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise click.ClickException(f"config key {key!r}: unexpected value {value!r}")
    return value


def _slots(flag: str | None, file_value: Any, default: str | None = None) -> ResourceSlots:
    try:
        if flag is not None:
            return ResourceSlots.parse_cli(flag)
        if isinstance(file_value, str):
            return ResourceSlots.parse_cli(file_value)
        if isinstance(file_value, dict):
            return ResourceSlots.parse(file_value)
        if file_value is not None:
            raise SlotError(f"expected 'cpu=4,mem=8g' or a table, got {file_value!r}")
    except SlotError as exc:
        raise click.ClickException(f"bad --slots: {exc}") from exc
    return ResourceSlots.parse_cli(default) if default is not None else host_slots()


@dataclass(frozen=True)
class AgentFlags:
    """The command's options as given on the command line (None: not given)."""

    agent_id: str | None = None
    scaling_group: str | None = None
    slots: str | None = None
    rpc_host: str | None = None
    rpc_port: int | None = None
    images: str | None = None
    work_dir: str | None = None
    kill_grace: float | None = None
    heartbeat_interval: float | None = None
    simulate: int | None = None
    pull_delay: float | None = None
    pull_failure_rate: float | None = None
    seed: int | None = None
    max_kernels: int | None = None
    agent_class: str | None = None
    min_free_disk: str | None = None
    state_file: str | None = None
    pause_file: str | None = None
    gpus: int | None = None
    device_faults: str | None = None
    drop_events: str | None = None
    kernel_uids: str | None = None
    max_log_bytes: str | None = None
    max_work_dir_bytes: str | None = None
    keep_ended_kernels: float | None = None
    max_outbox: int | None = None
    secret_file: str | None = None
    backend: str | None = None
    engine: str | None = None
    registry: tuple[str, ...] | None = None
    service_host: str | None = None
    allow_outbound: bool | None = None


def build_config(file_values: dict[str, Any], flags: AgentFlags) -> AgentConfig:
    """Merge flags over config-file values over defaults; every bad value is a ClickException."""
    port = pick(flags.rpc_port, file_values, "rpc_port", int)
    if port is not None and not 0 <= port <= 65535:
        raise click.ClickException(f"rpc port {port} is out of range")
    grace = pick(flags.kill_grace, file_values, "kill_grace", (int, float))
    interval = pick(flags.heartbeat_interval, file_values, "heartbeat_interval", (int, float))
    if grace is not None and grace < 0:
        raise click.ClickException("kill grace must not be negative")
    if interval is not None and interval <= 0:
        raise click.ClickException("heartbeat interval must be positive")
    catalog_file = pick(flags.images, file_values, "images", str)
    try:
        catalog = ImageCatalog.from_file(catalog_file)
    except ImageCatalogError as exc:
        raise click.ClickException(str(exc)) from exc
    work = pick(flags.work_dir, file_values, "work_dir", str)
    config = AgentConfig(
        agent_id=pick(flags.agent_id, file_values, "id", str) or socket.gethostname(),
        scaling_group=pick(flags.scaling_group, file_values, "scaling_group", str) or "default",
        slots=_slots(flags.slots, file_values.get("slots")),
        rpc_host=pick(flags.rpc_host, file_values, "rpc_host", str) or "127.0.0.1",
        rpc_port=6011 if port is None else port,
        catalog=catalog,
        work_dir=Path(work) if work else None,
    )
    if grace is not None:
        config.kill_grace = float(grace)
    if interval is not None:
        config.heartbeat_interval = float(interval)
    config.max_kernels = _max_kernels(flags.max_kernels, file_values)
    config.drop_events = _drop_events(flags.drop_events, file_values)
    config.agent_class = _agent_class(flags.agent_class, file_values)
    config.min_free_disk = _min_free_disk(flags.min_free_disk, file_values)
    state_file = pick(flags.state_file, file_values, "state_file", str)
    config.state_file = Path(state_file) if state_file else None
    config.isolation = _isolation(flags, file_values)
    outbox = pick(flags.max_outbox, file_values, "max_outbox", int)
    if outbox is not None and outbox < 1:
        raise click.ClickException("max outbox must be at least 1")
    config.max_outbox = MAX_PENDING if outbox is None else int(outbox)
    config.containers = build_containers(
        file_values,
        backend=flags.backend,
        engine=flags.engine,
        registries=flags.registry,
        allow_outbound=flags.allow_outbound,
        isolation=config.isolation,
    )
    config.service_host = pick(flags.service_host, file_values, "service_host", str)
    config.gpus, config.device_faults = _gpus(flags, file_values)
    return config


def _isolation(flags: AgentFlags, file_values: dict[str, Any]) -> IsolationOptions:
    defaults = IsolationOptions()
    uids = pick(flags.kernel_uids, file_values, "kernel_uids", str)
    keep = pick(flags.keep_ended_kernels, file_values, "keep_ended_kernels", (int, float))
    if keep is not None and keep < 0:
        raise click.ClickException("keep ended kernels must not be negative")
    try:
        kernel_uids = UidRange.parse(uids) if uids is not None else defaults.kernel_uids
    except ValueError as exc:
        raise click.ClickException(f"bad --kernel-uids: {exc}") from exc
    return IsolationOptions(
        kernel_uids=kernel_uids,
        max_log_bytes=_size(flags.max_log_bytes, file_values, "max_log_bytes", defaults.max_log_bytes),
        max_work_dir_bytes=_size(
            flags.max_work_dir_bytes, file_values, "max_work_dir_bytes", defaults.max_work_dir_bytes
        ),
        keep_ended_kernels=defaults.keep_ended_kernels if keep is None else float(keep),
    )


def _size(flag: str | None, file_values: dict[str, Any], key: str, default: int) -> int:
    value = pick(flag, file_values, key, (str, int))
    if value is None:
        return default
    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.ClickException(f"bad --{key.replace('_', '-')}: {exc}") from exc
    if size < 1024:
        raise click.ClickException(f"bad --{key.replace('_', '-')}: at least 1k")
    return size


def _agent_class(flag: str | None, file_values: dict[str, Any]) -> AgentClass:
    value = pick(flag, file_values, "class", str)
    if value is None:
        return AgentClass.STANDARD
    if value not in CLASSES:
        raise click.ClickException(f"bad --class {value!r}: expected one of {', '.join(CLASSES)}")
    return AgentClass(value)


def _min_free_disk(flag: str | None, file_values: dict[str, Any]) -> int:
    value = pick(flag, file_values, "min_free_disk", (str, int))
    if value is None:
        return DEFAULT_MIN_FREE_DISK
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.ClickException(f"bad --min-free-disk: {exc}") from exc


def _drop_events(flag: str | None, file_values: dict[str, Any]) -> frozenset[str]:
    value = pick(flag, file_values, "drop_events", (str, list))
    try:
        return parse_event_names(value)
    except ValueError as exc:
        raise click.ClickException(f"bad --drop-events: {exc}") from exc


def _max_kernels(flag: int | None, file_values: dict[str, Any]) -> int | None:
    value = pick(flag, file_values, "max_kernels", int)
    if value is None:
        return None
    if value < 0:
        raise click.ClickException("max kernels must not be negative")
    return int(value)


def secret_of(flags: AgentFlags, file_values: dict[str, Any], from_env: str | None) -> str:
    """The cluster secret: from the secret file when one is named, else the environment's."""
    path = pick(flags.secret_file, file_values, "secret_file", str)
    if path:
        try:
            return read_secret_file(Path(path))
        except SecretFileError as exc:
            raise click.ClickException(f"{exc}: the agent refuses to start") from exc
    if not from_env:
        raise click.ClickException(
            "SOKOVAN_CLUSTER_SECRET is not set (nor --secret-file): the agent refuses to start"
        )
    return from_env


def build_hollow_config(
    file_values: dict[str, Any], base: AgentConfig, flags: AgentFlags, count: int
) -> HollowConfig:
    """The hollow fleet's options: the agent's, with the fleet's own defaults where they differ
    (`--id` is the prefix of the agents' ids)."""
    if count < 1:
        raise click.ClickException("--simulate needs at least 1 agent")
    delay = pick(flags.pull_delay, file_values, "pull_delay", (int, float))
    rate = pick(flags.pull_failure_rate, file_values, "pull_failure_rate", (int, float))
    chosen_seed = pick(flags.seed, file_values, "seed", int)
    interval = pick(flags.heartbeat_interval, file_values, "heartbeat_interval", (int, float))
    if delay is not None and delay < 0:
        raise click.ClickException("pull delay must not be negative")
    if rate is not None and not 0 <= rate <= 1:
        raise click.ClickException("pull failure rate must be between 0 and 1")
    config = HollowConfig(
        count=count,
        prefix=pick(flags.agent_id, file_values, "id", str) or "hollow",
        scaling_group=base.scaling_group,
        slots=_slots(flags.slots, file_values.get("slots"), DEFAULT_SLOTS),
        rpc_host=base.rpc_host,
        rpc_port=base.rpc_port,
        catalog=base.catalog,
        pull_delay=float(delay or 0),
        pull_failure_rate=float(rate or 0),
        seed=chosen_seed or 0,
        max_kernels=base.max_kernels,
        drop_events=base.drop_events,
        agent_class=base.agent_class,
    )
    pause_file = pick(flags.pause_file, file_values, "pause_file", str)
    config.pause_file = Path(pause_file) if pause_file else None
    config.gpus, config.device_faults = base.gpus or 0, base.device_faults
    config.state_file = base.state_file
    if interval is not None:
        config.heartbeat_interval = float(interval)
    return config


def _gpus(flags: AgentFlags, file_values: dict[str, Any]) -> tuple[int | None, Path | None]:
    """`--gpus` (hollow devices; None: NVML's) and `--device-faults`."""
    gpus = pick(flags.gpus, file_values, "gpus", int)
    if gpus is not None and not 0 <= gpus <= 64:
        raise click.ClickException(f"--gpus {gpus}: between 0 and 64 devices")
    faults = pick(flags.device_faults, file_values, "device_faults", str)
    if faults and gpus is None:
        raise click.ClickException("--device-faults needs --gpus (it marks hollow devices)")
    return gpus, Path(faults) if faults else None
