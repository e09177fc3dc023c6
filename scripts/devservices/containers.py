"""The container engine and its registry: from SOKOVAN_ENGINE / SOKOVAN_REGISTRY, or a throwaway
Podman API service and docker-registry under .dev/services/ (installed as root with apt-get), or a
Docker engine; then the default images built into the registry."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.devservices.addresses import parse_host_port
from scripts.devservices.checks import engine_check, registry_check
from scripts.devservices.common import DEV_DIR, HOST, ROOT, ServiceError, log
from scripts.devservices.owned import owned_alive, stop
from scripts.devservices.processes import free_port, spawn_ready
from scripts.devservices.state import atomic_write, save_state

ENGINE_DIR = DEV_DIR / "engine"
REGISTRY_DIR = DEV_DIR / "registry"
CONTAINER_VARS = {"registry": "SOKOVAN_REGISTRY", "engine": "SOKOVAN_ENGINE"}
CONTAINER_LABELS = {"registry": "registry", "engine": "container engine"}
DOCKER_SOCKET = "unix:///var/run/docker.sock"
# Containers' default ulimits must stay within this host's hard limits (else the runtime gets EPERM).
ULIMIT_CAPS = {"nofile": 65536, "nproc": 4096}
BUILD_TIMEOUT = 900  # seconds for `sokovan images build` (a first build takes some ten seconds)


def apt_install(packages: list[str], why: str) -> bool:
    """Install Debian packages when running as root with apt-get; whether it worked."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    log(f"installing {' '.join(packages)} with apt-get ({why})")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> bool:
        out = subprocess.DEVNULL
        return subprocess.run(["apt-get", *args], env=env, stdin=out, stdout=out).returncode == 0

    if apt("install", "-y", *packages):
        return True
    apt("update")
    return apt("install", "-y", *packages)


def find_tool(names: tuple[str, ...], package: str, why: str) -> str | None:
    """The first of `names` on PATH; installs `package` (root + apt-get) when none is."""
    for attempt in range(2):
        for name in names:
            found = shutil.which(name)
            if found:
                return found
        if attempt == 0 and not apt_install([package], why):
            return None
    return None


def start_registry(timeout: float) -> dict[str, Any]:
    binary = find_tool(("docker-registry", "registry"), "docker-registry", "a local image registry")
    if binary is None:
        raise ServiceError("docker-registry is not installed (Debian: apt-get install docker-registry)")
    port = free_port()
    REGISTRY_DIR.mkdir(parents=True, exist_ok=True)
    config, log_file = REGISTRY_DIR / "registry.yml", REGISTRY_DIR / "registry.log"
    atomic_write(
        config,
        "version: 0.1\n"
        "log: {level: warn, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {json.dumps(str(REGISTRY_DIR / 'data'))}}}, "
        "delete: {enabled: true}}\n"
        f"http: {{addr: {json.dumps(f'{HOST}:{port}')}}}\n",
    )
    log(f"starting a throwaway registry ({binary}) on {HOST}:{port}, data in {REGISTRY_DIR / 'data'}")
    proc = spawn_ready(
        f"registry on {HOST}:{port}",
        [binary, "serve", str(config)],
        REGISTRY_DIR,
        log_file,
        lambda: registry_check(HOST, port),
        timeout,
    )
    return {
        "kind": "local",
        "port": port,
        "host": HOST,
        "base_dir": str(REGISTRY_DIR),
        "pid": proc.pid,
        "needle": str(config),
        "log": str(log_file),
    }


def engine_configs(registry: str) -> tuple[str, str]:
    """containers.conf and registries.conf for a Podman service that pushes to `registry` over HTTP."""
    limits = []
    for name, kind in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(kind)[1]
        value = ULIMIT_CAPS[name] if hard == resource.RLIM_INFINITY else min(hard, ULIMIT_CAPS[name])
        limits.append(f'"{name}={value}:{value}"')
    runtime = 'runtime = "runc"\n' if shutil.which("runc") else ""  # crun refuses cgroup v1 hybrid hosts
    containers = (
        "[containers]\n"
        f"default_ulimits = [{', '.join(limits)}]\n"
        "[engine]\n"
        f'{runtime}cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    registries = (
        f'unqualified-search-registries = []\n[[registry]]\nlocation = "{registry}"\ninsecure = true\n'
    )
    return containers, registries


def start_engine(registry: str, timeout: float) -> dict[str, Any]:
    podman = find_tool(("podman",), "podman", "the container engine")
    if podman is None:
        raise ServiceError("podman is not installed (Debian: apt-get install podman runc)")
    if not shutil.which("runc"):
        apt_install(["runc"], "the runtime podman uses here")
    ENGINE_DIR.mkdir(parents=True, exist_ok=True)
    containers, registries = engine_configs(registry)
    atomic_write(ENGINE_DIR / "containers.conf", containers)
    atomic_write(ENGINE_DIR / "registries.conf", registries)
    sock, extra = ENGINE_DIR / "podman.sock", []
    if len(str(sock)) > 100:  # unix socket paths are limited to ~107 bytes
        sock_dir = Path(tempfile.mkdtemp(prefix="sokovan-engine-"))
        sock, extra = sock_dir / "podman.sock", [str(sock_dir)]
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()
    url, log_file = f"unix://{sock}", ENGINE_DIR / "podman.log"
    env = {
        **os.environ,
        "CONTAINERS_CONF": str(ENGINE_DIR / "containers.conf"),
        "CONTAINERS_REGISTRIES_CONF": str(ENGINE_DIR / "registries.conf"),
    }
    log(f"starting a Podman API service ({podman}) on {url}")
    proc = spawn_ready(
        f"Podman on {url}",
        [podman, "system", "service", "--time=0", url],
        ENGINE_DIR,
        log_file,
        lambda: engine_check(url),
        timeout,
        env=env,
    )
    return {
        "kind": "local",
        "url": url,
        "registry": registry,
        "base_dir": str(ENGINE_DIR),
        "extra_dirs": extra,
        "pid": proc.pid,
        "needle": url,
        "log": str(log_file),
    }


def _from_env(name: str, fresh: bool) -> str | None:
    """The address in SOKOVAN_REGISTRY / SOKOVAN_ENGINE when it is set and answers."""
    var = CONTAINER_VARS[name]
    value = os.environ.get(var, "").strip()
    if fresh or not value:
        return None
    if name == "registry":
        reason = registry_check(*parse_host_port(value, 5000))
    else:
        reason = engine_check(value)
    if reason is None:
        log(f"{CONTAINER_LABELS[name]}: using {var} from the environment ({value})")
        return value
    log(f"{CONTAINER_LABELS[name]}: {var}={value} does not answer ({reason}); looking further")
    return None


def _owned(name: str, state: dict[str, Any], unusable: Callable[[dict[str, Any]], str | None]) -> bool:
    """Whether the server of `name` this script started earlier runs and is usable; else forget it."""
    entry = state.get(name)
    if not entry:
        return False
    reason = unusable(entry) if owned_alive(name, entry) else "it is not running"
    if reason is None:
        return True
    log(f"{CONTAINER_LABELS[name]}: replacing the one started earlier ({reason})")
    stop(name, entry)
    state.pop(name, None)
    save_state(state)
    return False


def resolve_registry(state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float) -> str:
    found = _from_env("registry", fresh)
    if found:
        return found
    if _owned("registry", state, lambda e: registry_check(e["host"], e["port"])):
        entry = state["registry"]
        log(f"registry: reusing the throwaway registry started earlier on {entry['host']}:{entry['port']}")
        return f"{entry['host']}:{entry['port']}"
    if no_start:
        raise ServiceError("no registry answers (set SOKOVAN_REGISTRY, or run `make services`)")
    state["registry"] = start_registry(timeout)
    save_state(state)
    return f"{HOST}:{state['registry']['port']}"


def resolve_engine(
    state: dict[str, Any], registry: str, *, fresh: bool, no_start: bool, timeout: float
) -> str:
    found = _from_env("engine", fresh)
    if found:
        return found

    # A Podman service started earlier, if it still answers and trusts the registry chosen now.
    def unusable(entry: dict[str, Any]) -> str | None:
        if entry.get("registry") != registry:
            return f"it trusts {entry.get('registry')}, not {registry}"
        return engine_check(entry["url"])

    if _owned("engine", state, unusable):
        log(f"container engine: reusing the Podman service started earlier on {state['engine']['url']}")
        return str(state["engine"]["url"])
    reason = "starting one was not allowed (--no-start)"
    if not no_start:
        try:
            state["engine"] = start_engine(registry, timeout)
            save_state(state)
            return str(state["engine"]["url"])
        except ServiceError as exc:
            reason = str(exc).splitlines()[0]
    # Docker itself trusts registries on 127.0.0.0/8 over plain HTTP.
    for url in dict.fromkeys(u for u in (os.environ.get("DOCKER_HOST", "").strip(), DOCKER_SOCKET) if u):
        if engine_check(url) is None:
            log(f"container engine: using the engine that answers on {url} (no Podman: {reason})")
            return url
    raise ServiceError(f"no Podman service ({reason}) and no Docker engine answers on {DOCKER_SOCKET}")


def resolve_containers(
    state: dict[str, Any], *, fresh: bool, no_start: bool, timeout: float
) -> dict[str, str]:
    """SOKOVAN_ENGINE and SOKOVAN_REGISTRY, or nothing (with one line saying why) when there is none."""
    if os.environ.get("SOKOVAN_ENGINE", "").strip().lower() in ("none", "off"):
        log("container engine: SOKOVAN_ENGINE=none; kernels will run with the process backend")
        return {}
    try:
        registry = resolve_registry(state, fresh=fresh, no_start=no_start, timeout=timeout)
        engine = resolve_engine(state, registry, fresh=fresh, no_start=no_start, timeout=timeout)
    except ServiceError as exc:
        log(f"container engine: none ({str(exc).splitlines()[0]}); kernels will run with the process backend")
        return {}
    return {"SOKOVAN_ENGINE": engine, "SOKOVAN_REGISTRY": registry}


def build_images(engine: str, registry: str) -> None:
    """`sokovan images build` into the registry: pushes only what changed. A failure is reported only."""
    sokovan = ROOT / ".venv" / "bin" / "sokovan"
    if sokovan.is_file():
        cmd = [str(sokovan)]
    elif importlib.util.find_spec("sokovan") is not None:
        cmd = [sys.executable, "-m", "sokovan"]
    else:
        log("images: sokovan is not installed (make venv); the default images were not built")
        return
    busybox = shutil.which("busybox") or any(Path(p).is_file() for p in ("/usr/bin/busybox", "/bin/busybox"))
    if not busybox:
        apt_install(["busybox-static"], "the default images' shell")
    if not Path("/usr/bin/python3").exists():
        apt_install(["python3"], "the python image")
    log(f"images: building the default images into {registry} (only what changed)")
    try:
        res = subprocess.run(
            [*cmd, "images", "build", "--registry", registry, "--engine", engine],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=sys.stderr,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        log(f"images: `sokovan images build` did not finish within {BUILD_TIMEOUT}s; no default images")
        return
    for line in res.stdout.splitlines():
        log(f"images: {line}")
    if res.returncode != 0:
        log(
            f"images: `sokovan images build` failed (exit {res.returncode}); "
            "the container backend has no default images"
        )
