"""`sokovan agent`: an agent daemon with the process backend, or (`--simulate N`) a hollow fleet.

Every option is also a config-file key (`id`, `scaling_group`, `slots`, `rpc_host`, `rpc_port`,
`images`, `work_dir`, `kill_grace`, `heartbeat_interval`, `class`, `min_free_disk`, `state_file`,
`simulate`, `pull_delay`, `pull_failure_rate`, `seed`, `max_kernels`, `pause_file`, `drop_events`,
`kernel_uids`, `max_log_bytes`, `max_work_dir_bytes`, `keep_ended_kernels`, `max_outbox`,
`secret_file`, `gpus`, `device_faults`); a flag wins over the file.

The cluster secret comes from `--secret-file` (env SOKOVAN_CLUSTER_SECRET_FILE; a file others
cannot read, see `agent.secret_file`) or from SOKOVAN_CLUSTER_SECRET; either way it is then
removed from the agent's environment, and the agent makes itself non-dumpable. Kernels' bounds:
`--kernel-uids` (a uid per session when the agent is root; default 20000-29999),
`--max-log-bytes` (per stream, default 16m, the newest output kept), `--max-work-dir-bytes`
(default 1g: no file larger, and a kernel whose directory grows past it is ended),
`--keep-ended-kernels` (seconds an ended kernel's directory and logs are kept, default 3600);
`--max-outbox` (events kept while Redis is unreachable, default 10000).

Logs go to stderr, one line per event: JSON objects (`--log-format json`, env
SOKOVAN_LOG_FORMAT; the default when stderr is not a terminal) or key=value text (`console`).

Without `--heartbeat-interval` the agent beats at the cluster's `heartbeat_interval` (etcd section
`manager/node_lifecycle`, followed live; 10 s when it is absent or etcd is unreachable). `--class`
(standard, sensitive, borrowed) picks the grace period the manager gives the agent when it falls
silent. `--min-free-disk` (default 64m) is the free space the work directory needs for the agent to
report itself healthy. SIGINT stops the agent and destroys its kernels; SIGTERM stops it and leaves
them running, recorded in `--state-file` (default `<work_dir>/agent-state.json`), for the next start
to take over.

`--drop-events NAME[,NAME...]` (hidden; config key `drop_events`, a list or a comma string) is
fault injection for tests: the first event of each named kind (`kernel.running`,
`kernel.terminated`, ...) that the agent (the whole hollow fleet) would publish is dropped, with a
warning `event.dropped_for_test`; everything else is unchanged.

With `--simulate N`, `--id` is the prefix of the virtual agents' ids (default `hollow`),
`--slots` the capacity of each of them (default cpu=4,mem=8g), `--class` the class of all of them,
`--pause-file FILE` names agents that stop heartbeating while they are listed there,
`--state-file FILE` (no default) keeps the fleet's timer kernels so that SIGTERM leaves them to the
next start (without it both signals end them), and `--work-dir`/`--kill-grace`/`--min-free-disk`
do not apply.
"""

from __future__ import annotations

from typing import Any

import click

from sokovan.agent.daemon import AgentConfig, AgentDaemon
from sokovan.agent.hollow import HollowConfig, HollowFleet
from sokovan.agent.runtime import AgentStartError
from sokovan.agent.secret_file import (
    SECRET_FILE_ENV,
    make_undumpable,
    scrub,
)
from sokovan.agent.signals import stop_on_agent_signals
from sokovan.cli.agent_config import CLASSES, AgentFlags, build_config, build_hollow_config, pick, secret_of
from sokovan.cli.common import config_option, load_or_exit
from sokovan.cli.log_format import log_format_option, start_logging
from sokovan.common import eventloop
from sokovan.common.settings import ConfigFileError, Settings, read_config_file


async def _serve(settings: Settings, config: AgentConfig | HollowConfig) -> None:
    daemon = (
        AgentDaemon(settings, config) if isinstance(config, AgentConfig) else HollowFleet(settings, config)
    )
    await daemon.run(stop_on_agent_signals())
    if daemon.failure is not None:
        raise AgentStartError(f"the agent stopped: {daemon.failure}")


@click.command()
@config_option
@click.option(
    "--id",
    "agent_id",
    default=None,
    help="Agent id (default: the host name); with --simulate, the id prefix ('hollow').",
)
@click.option("--scaling-group", default=None, help="Scaling group (default: 'default').")
@click.option(
    "--slots",
    default=None,
    help="Capacity, e.g. cpu=4,mem=8g (default: what the host has; per hollow agent: cpu=4,mem=8g).",
)
@click.option("--rpc-host", default=None, help="RPC bind address (default: 127.0.0.1).")
@click.option("--rpc-port", type=int, default=None, help="RPC port (default: 6011; 0 picks a free one).")
@click.option("--images", default=None, help="Image catalog file (TOML or JSON).")
@click.option(
    "--work-dir",
    default=None,
    help="Kernel directories, the agent's own and private (default: /var/lib/sokovan/agent-<id> as root, "
    "else ~/.local/state/sokovan/agent-<id>).",
)
@click.option("--kill-grace", type=float, default=None, help="Seconds between SIGTERM and SIGKILL (5).")
@click.option(
    "--heartbeat-interval",
    type=float,
    default=None,
    help="Seconds between heartbeats (default: the cluster's, from etcd; 10 without it).",
)
@click.option(
    "--class",
    "agent_class",
    type=click.Choice(CLASSES),
    default=None,
    help="Agent class: the grace period it gets when silent (standard).",
)
@click.option(
    "--min-free-disk",
    default=None,
    metavar="SIZE",
    help="Free space the work dir needs, e.g. 64m (64m); less reports the agent unhealthy.",
)
@click.option(
    "--state-file",
    default=None,
    help="Where the agent records its kernels (default: <work-dir>/agent-state.json; simulated: none).",
)
@click.option(
    "--simulate", type=int, default=None, metavar="N", help="Run N hollow agents (kernels are timers)."
)
@click.option("--pull-delay", type=float, default=None, help="Simulated image pull time in seconds (0).")
@click.option(
    "--pull-failure-rate", type=float, default=None, help="Share of simulated pulls that fail (0..1)."
)
@click.option("--seed", type=int, default=None, help="Seed of the simulated pull failures (0).")
@click.option(
    "--pause-file",
    default=None,
    help="With --simulate: agents listed in this file (one id a line) send no heartbeats.",
)
@click.option(
    "--gpus",
    type=int,
    default=None,
    metavar="G",
    help="Declare G hollow GPUs (each hollow agent's, with --simulate) instead of finding devices "
    "through NVML: UUIDs GPU-hollow-<agent id>-<index>, cuda.device=G in the slots.",
)
@click.option(
    "--device-faults",
    default=None,
    metavar="FILE",
    help="With --gpus: while FILE has a line '<agent id> <index>', that device is reported unhealthy.",
)
@click.option(
    "--max-kernels",
    type=int,
    default=None,
    help="Most kernels this agent (each hollow agent) takes (no limit).",
)
@click.option(
    "--kernel-uids",
    default=None,
    metavar="FIRST-LAST",
    help="As root: the uids sessions' kernels run under, one per session (20000-29999).",
)
@click.option("--max-log-bytes", default=None, metavar="SIZE", help="Cap of each kernel log stream (16m).")
@click.option(
    "--max-work-dir-bytes",
    default=None,
    metavar="SIZE",
    help="Cap of a kernel's directory and of any file in it (1g).",
)
@click.option(
    "--keep-ended-kernels",
    type=float,
    default=None,
    metavar="SECONDS",
    help="How long an ended kernel's directory and logs are kept (3600).",
)
@click.option("--max-outbox", type=int, default=None, help="Events kept while Redis is unreachable (10000).")
@click.option(
    "--secret-file",
    default=None,
    envvar=SECRET_FILE_ENV,
    help="File holding the cluster secret (not readable by others); else SOKOVAN_CLUSTER_SECRET.",
)
@click.option(
    "--drop-events",
    default=None,
    hidden=True,
    metavar="NAME[,NAME...]",
    help="For tests: drop the first event of each named kind (e.g. kernel.running).",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "container", "process"]),
    default=None,
    help="Where kernels run: containers of an engine, host processes, or containers when the engine "
    "answers (auto, the default).",
)
@click.option(
    "--engine",
    default=None,
    metavar="URL",
    help="Docker-API engine, unix:///path or tcp://host:port (default: DOCKER_HOST, else Podman's "
    "or Docker's socket).",
)
@click.option(
    "--registry",
    multiple=True,
    envvar="SOKOVAN_REGISTRY",
    metavar="HOST[:PORT]",
    help="A registry kernels' images may be pulled from (repeatable; the first is the default, "
    "against which short names like python:3 resolve).",
)
@click.option(
    "--service-host",
    default=None,
    help="Host address inference kernels' ports are published on (default: the RPC host, 127.0.0.1).",
)
@click.option(
    "--allow-outbound/--no-outbound",
    default=None,
    help="Let session networks' kernels reach the world outside the host (off by default).",
)
@log_format_option
def agent(config: str | None, log_format: str | None, **options: Any) -> None:
    """Run an agent daemon whose kernels are OS processes (or, with --simulate N, N hollow agents)."""
    options["registry"] = tuple(options.get("registry") or ()) or None
    flags = AgentFlags(**options)
    settings = load_or_exit(config)
    try:
        file_values = read_config_file(config)
    except ConfigFileError as exc:
        raise click.ClickException(str(exc)) from exc
    settings.cluster_secret = secret_of(flags, file_values, settings.cluster_secret)
    scrub()
    make_undumpable()
    count = pick(flags.simulate, file_values, "simulate", int)
    agent_config = build_config(file_values, flags)
    run_config: AgentConfig | HollowConfig = agent_config
    if count is not None:
        run_config = build_hollow_config(file_values, agent_config, flags, count)
    # a process agent's every line names it; a hollow fleet's lines name the agent they concern
    ids = {"agent_id": agent_config.agent_id} if count is None else {}
    start_logging("agent", log_format, context=ids, secrets=[settings.cluster_secret])
    try:
        # the hollow fleet on uvloop; a real agent on asyncio's loop (it runs processes)
        eventloop.run(_serve(settings, run_config), fast=isinstance(run_config, HollowConfig))
    except AgentStartError as exc:
        raise click.ClickException(str(exc)) from exc
