"""The agent's container options: `--backend`, `--engine`, `--registry`, `--service-host`,
`--allow-outbound` (config keys `backend`, `engine`, `registries` or `registry`, `service_host`,
`allow_outbound`); a flag wins over the file. `--registry` may be repeated (or given as
SOKOVAN_REGISTRY, several separated by spaces); the first is the default registry."""

from __future__ import annotations

from typing import Any, cast

import click

from sokovan.agent.backends import BACKENDS, BackendName, ContainerConfig
from sokovan.agent.container.config import ContainerOptions
from sokovan.agent.isolation import IsolationOptions
from sokovan.common.image_refs import ImageRefError, parse


def _registries(flag: tuple[str, ...] | None, file_values: dict[str, Any]) -> tuple[str, ...]:
    if flag:
        values: list[str] = list(flag)
    else:
        raw = file_values.get("registries", file_values.get("registry"))
        if raw is None:
            return ()
        values = [raw] if isinstance(raw, str) else list(raw) if isinstance(raw, list) else []
        if not values or not all(isinstance(v, str) for v in values):
            raise click.ClickException("config key 'registries' must be a list of host[:port]")
    for value in values:
        try:
            ref = parse(f"{value}/probe:1")
        except ImageRefError:
            ref = None
        if ref is None or ref.registry != value:
            raise click.ClickException(f"bad --registry {value!r}: expected host[:port], e.g. 127.0.0.1:5000")
    return tuple(dict.fromkeys(values))


def build_containers(
    file_values: dict[str, Any],
    *,
    backend: str | None,
    engine: str | None,
    registries: tuple[str, ...] | None,
    allow_outbound: bool | None,
    isolation: IsolationOptions,
) -> ContainerConfig:
    chosen = backend if backend is not None else file_values.get("backend", "auto")
    if chosen not in BACKENDS:
        raise click.ClickException(f"bad --backend {chosen!r}: expected one of {', '.join(BACKENDS)}")
    engine_value = engine if engine is not None else file_values.get("engine")
    if engine_value is not None and not isinstance(engine_value, str):
        raise click.ClickException("config key 'engine' must be a URL")
    if engine_value and not engine_value.startswith(("unix://", "tcp://")):
        raise click.ClickException(f"bad --engine {engine_value!r}: expected unix:///path or tcp://host:port")
    outbound = (
        allow_outbound if allow_outbound is not None else bool(file_values.get("allow_outbound", False))
    )
    options = ContainerOptions(
        pids=isolation.pids,
        work_bytes=isolation.max_work_dir_bytes,
        tmp_bytes=isolation.max_work_dir_bytes,
        max_log_bytes=isolation.max_log_bytes,
    )
    return ContainerConfig(
        backend=cast(BackendName, chosen),
        engine=engine_value or None,
        registries=_registries(registries, file_values),
        allow_outbound=outbound,
        options=options,
    )
