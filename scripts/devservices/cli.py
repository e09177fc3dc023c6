"""The commands of scripts/services.py: up, down and status, and main() that parses the command line."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from scripts.devservices.addresses import url_for
from scripts.devservices.common import DEFAULT_ENV_FILE, ENV_VARS, SERVICES, ServiceError, log
from scripts.devservices.containers import CONTAINER_LABELS, build_images, resolve_containers
from scripts.devservices.owned import owned_alive, stop
from scripts.devservices.resolve import LABELS, resolve
from scripts.devservices.state import atomic_write, load_state, locked, save_state


def write_env_file(path: Path, values: dict[str, str]) -> None:
    lines = [
        "# Written by scripts/services.py up; read by tests/services.py and `sokovan dev`.",
        *(f"{k}={v}" for k, v in values.items()),
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def cmd_up(args: argparse.Namespace) -> int:
    fresh = args.fresh or os.environ.get("SOKOVAN_SERVICES_FORCE_LOCAL", "") not in ("", "0", "false", "no")
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    values: dict[str, str] = {}
    with locked():
        state = load_state()
        for name in SERVICES:
            values[ENV_VARS[name]] = resolve(
                name, state, fresh=fresh, no_start=args.no_start, timeout=args.timeout
            )
        values.update(resolve_containers(state, fresh=fresh, no_start=args.no_start, timeout=args.timeout))
    write_env_file(env_file, values)
    log(f"wrote {env_file}")
    for k, v in values.items():
        print(f"{k}={v}", flush=True)
    if "SOKOVAN_ENGINE" in values and not args.no_images:
        build_images(values["SOKOVAN_ENGINE"], values["SOKOVAN_REGISTRY"])
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    stopped: list[str] = []
    with locked():
        state = load_state()
        for name in SERVICES:
            entry = state.get(name)
            if not entry:
                continue
            log(f"{LABELS[name]}: stopping the throwaway server on port {entry['port']}")
            stop(name, entry)
            stopped.append(url_for(name, entry["host"], entry["port"]))
            state.pop(name)
            save_state(state)
        for name in ("engine", "registry"):
            entry = state.get(name)
            if not entry:
                continue
            address = entry["url"] if name == "engine" else f"{entry['host']}:{entry['port']}"
            log(f"{CONTAINER_LABELS[name]}: stopping the throwaway one on {address}")
            stop(name, entry)
            stopped.append(address)
            state.pop(name)
            save_state(state)
    if not stopped:
        log("nothing to stop: no throwaway server started by this script is recorded")
    # Forget addresses of servers that are gone, so nothing keeps pointing at them.
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    if stopped and env_file.exists():
        kept = [
            ln
            for ln in env_file.read_text().splitlines()
            if not any(ln.partition("=")[2].strip() == s for s in stopped)
        ]
        if any(ln and not ln.startswith("#") for ln in kept):
            atomic_write(env_file, "\n".join(kept) + "\n")
        else:
            env_file.unlink()
            log(f"removed {env_file}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    state = load_state()
    for name in SERVICES:
        entry = state.get(name)
        if entry:
            alive = owned_alive(name, entry)
            print(
                f"{name}: throwaway on {entry['host']}:{entry['port']} "
                f"({'running' if alive else 'NOT running'}; {entry['base_dir']})"
            )
        else:
            print(f"{name}: none started by this script")
    for name in ("registry", "engine"):
        entry = state.get(name)
        if entry:
            address = entry["url"] if name == "engine" else f"{entry['host']}:{entry['port']}"
            alive = owned_alive(name, entry)
            print(
                f"{name}: throwaway on {address} "
                f"({'running' if alive else 'NOT running'}; {entry['base_dir']})"
            )
        else:
            print(f"{name}: none started by this script")
    env_file = Path(args.env_file) if args.env_file else DEFAULT_ENV_FILE
    if env_file.exists():
        print(f"{env_file}:")
        print(env_file.read_text().rstrip())
    return 0


def main(argv: list[str] | None = None, description: str | None = None) -> int:
    """Run one command; `description` is the usage --help shows (scripts/services.py's docstring)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up", help="make sure PostgreSQL, Redis, etcd (and an engine + registry) answer; write .env.services"
    )
    up.add_argument(
        "--fresh",
        action="store_true",
        help="ignore SOKOVAN_* variables and the standard ports: use throwaway servers "
        "(also SOKOVAN_SERVICES_FORCE_LOCAL=1)",
    )
    up.add_argument("--no-start", action="store_true", help="fail instead of starting throwaway servers")
    up.add_argument(
        "--no-images", action="store_true", help="do not build the default images into the registry"
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("SOKOVAN_SERVICES_TIMEOUT", 60)),
        help="seconds to wait for each service (default 60)",
    )
    for p in (
        up,
        sub.add_parser("down", help="stop the throwaway servers this script started"),
        sub.add_parser("status", help="show what this script started"),
    ):
        p.add_argument("--env-file", help=f"where to write/read the addresses (default {DEFAULT_ENV_FILE})")
    args = parser.parse_args(argv)
    try:
        return {"up": cmd_up, "down": cmd_down, "status": cmd_status}[args.command](args)
    except ServiceError as exc:
        log(f"error: {exc}")
        return 1
