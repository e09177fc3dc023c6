"""docker-compose.yml, the Dockerfile, .dockerignore and .env.example agree with the code, without Docker.

Every command a Sokovan service runs is parsed by the real click tree; every `SOKOVAN_*` variable it
sets is one the daemons read (settings fields with their env prefix, click envvars, `os.environ`
reads); the settings each daemon loads from its environment name services of the file, on ports
they listen on, over a shared network, started before it; what a daemon listens on is what is
published and health-checked. The files are read as compose and docker read them (tests/compose_model.py):
YAML with its anchors, then `${VAR}` interpolated from .env.example.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
from sqlalchemy.engine import make_url

from sokovan.cli.proxy_cmd import parse_bind
from sokovan.common.settings import Settings
from tests.compose_model import (
    COMPOSE,
    DOCKERFILE,
    ROOT,
    daemon,
    daemon_variables,
    dependencies,
    dockerfile,
    dockerignored,
    env_example,
    environment,
    interpolate,
    listening,
    networks,
    parse_command,
    published,
    raw_compose,
    referenced,
    services,
    services_running,
    sokovan_services,
)

PREFIX = str(Settings.model_config.get("env_prefix", "")).upper()

# What each command a service may run needs set (Settings fields; CONTRACT §1, §5). Only these run.
NEEDS: dict[str, set[str]] = {
    "db upgrade": {"db_url"},
    "admin bootstrap": {"db_url"},
    "manager": {"db_url", "redis_url", "etcd", "cluster_secret", "api_bind"},
    "agent": {"redis_url", "etcd", "cluster_secret"},
    "proxy": {"redis_url", "cluster_secret"},
    "images build": set(),  # one-shot: only the engine's socket and the registry
}
# Where a daemon listens, from its parsed options and the settings it loads.
Listen = Callable[[dict[str, Any], Settings], tuple[str, int | None]]
LISTENS: dict[str, Listen] = {
    "manager": lambda params, s: (s.api_host, s.api_port),
    "proxy": lambda params, s: parse_bind(params["bind"]),
    "agent": lambda params, s: (params["rpc_host"], params["rpc_port"]),
}
# Where a setting points: (host, port).
TARGETS: dict[str, Callable[[Settings], tuple[str | None, int]]] = {
    "db_url": lambda s: (make_url(s.db_url).host, make_url(s.db_url).port or 5432),
    "redis_url": lambda s: (urlsplit(s.redis_url).hostname, urlsplit(s.redis_url).port or 6379),
    "etcd": lambda s: (s.etcd_host, s.etcd_port),
}

# -- the checkers catch what they are for ----------------------------------------------------

TYPOS = [
    ["managr"],
    ["admin", "bootstrp"],
    ["db"],
    ["agent", "--rpc-prot", "6011"],
    ["agent", "--rpc-port", "sixty"],
    ["agent", "--class", "huge"],
    ["admin", "bootstrap", "--if-neded"],
]


@pytest.mark.parametrize("args", TYPOS)
def test_a_typo_in_a_command_is_caught(args: list[str]) -> None:
    with pytest.raises(click.UsageError):
        parse_command(args, {})


def test_the_variables_found_are_the_daemons_own() -> None:
    found = daemon_variables()
    assert {"SOKOVAN_DB_URL", "SOKOVAN_PROXY_BIND", "SOKOVAN_CLUSTER_SECRET_FILE"} <= found
    assert "SOKOVAN_MANAGER_WORKER" in found  # an os.environ read through a module constant
    assert not {"SOKOVAN_REDIS_ULR", "SOKOVAN_API_PORT", "SOKOVAN_AGENT_ID"} & found


def test_interpolation_reads_like_compose() -> None:
    env = {"A": "1", "E": ""}
    assert interpolate("${A}-${E:-d}-${E-d}-${U:-u}-$$A-$A", env) == "1-d--u-$A-1"
    with pytest.raises(ValueError, match="U"):
        interpolate("${U:?set it}", env)


# -- the image ---------------------------------------------------------------------------------


def test_the_image_is_python_slim_non_root_and_runs_sokovan() -> None:
    docker = dockerfile()
    assert docker["FROM"] == "python:3.11-slim"
    assert json.loads(docker["ENTRYPOINT"]) == ["sokovan"], "the entrypoint must be sokovan, exec form"
    assert docker["USER"] not in ("root", "0"), "the daemons must not run as root"
    assert "pip install" in DOCKERFILE.read_text()


def test_the_build_context_leaves_out_local_state_and_keeps_what_the_image_copies() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [p for p in lines if p and not p.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "re-includes would make this check unsound"
    local = [".venv/bin/python", ".git/HEAD", ".dev/services/state.json", ".env", ".env.services"]
    caches = ["src/sokovan/__pycache__/x.pyc", ".mypy_cache/x", ".ruff_cache/x", ".pytest_cache/x"]
    for path in [*local, *caches, "src/sokovan.egg-info/PKG-INFO"]:
        assert dockerignored(path, patterns), f"{path} would be sent to the build"
    copied = re.findall(r"^COPY\s+(.+?)\s+\S+$", DOCKERFILE.read_text(), re.M)
    for source in (ROOT / s for line in copied for s in line.split()):
        assert source.exists(), f"the Dockerfile copies {source}, which does not exist"
        files = (
            [source]
            if source.is_file()
            else [p for p in source.rglob("*.py") if "__pycache__" not in p.parts]
        )
        dropped = [
            str(f.relative_to(ROOT)) for f in files if dockerignored(str(f.relative_to(ROOT)), patterns)
        ]
        assert not dropped, f".dockerignore drops what the Dockerfile copies: {dropped}"


# -- the services ------------------------------------------------------------------------------


def test_the_stack_is_all_there() -> None:
    commands = [daemon(n)[0] for n in sokovan_services()]
    assert set(commands) == set(NEEDS) and commands.count("agent") >= 2, f"commands run: {commands}"
    assert {"postgres", "redis", "etcd"} <= set(services())


@pytest.mark.parametrize("name", sokovan_services())
def test_each_service_runs_a_real_sokovan_command(name: str) -> None:
    path, _, _ = daemon(name)  # raises on an unknown command, option or value
    assert path in NEEDS, f"{name} runs `sokovan {path}`, which this file has no business running"


@pytest.mark.parametrize("name", sokovan_services())
def test_each_variable_set_is_one_the_daemons_read(name: str) -> None:
    unknown = {v for v in environment(services()[name]) if v.startswith("SOKOVAN_")} - daemon_variables()
    assert not unknown, f"{name} sets {sorted(unknown)}, which no daemon reads"


@pytest.mark.parametrize("name", services_running(*NEEDS))
def test_each_daemon_has_what_it_needs_and_no_more(name: str) -> None:
    path, _, _ = daemon(name)
    env, raw_env = environment(services()[name]), environment(raw_compose()["services"][name])
    for var in (f"{PREFIX}{field.upper()}" for field in NEEDS[path]):
        assert var in env, f"{name} (`sokovan {path}`) needs {var}"
        if var.endswith("CLUSTER_SECRET"):
            assert "${SOKOVAN_CLUSTER_SECRET" in raw_env[var], f"{name}: the secret must come from .env"
        else:
            assert env[var], f"{name}: {var} is empty"
    if "db_url" not in NEEDS[path]:
        assert f"{PREFIX}DB_URL" not in env, f"{name} gets the database URL it has no use for"


@pytest.mark.parametrize("name", services_running(*NEEDS))
def test_addresses_name_services_on_ports_they_listen_on(name: str) -> None:
    path, _, settings = daemon(name)
    for field in NEEDS[path] & set(TARGETS):
        host, port = TARGETS[field](settings)
        var = f"{PREFIX}{field.upper()}"
        assert host in services(), f"{name}: {var} points at {host!r}, which is no service here"
        target = services()[host]
        assert networks(services()[name]) & networks(target), f"{name} shares no network with {host}"
        assert port in listening(target), f"{name}: {var} uses port {port}; {host} has {listening(target)}"
        assert host in dependencies(name), f"{name} uses {host} but does not wait for it"


def _health_target(svc: Mapping[str, Any]) -> tuple[str, int, str]:
    test = " ".join(svc["healthcheck"]["test"])
    if url := re.search(r"https?://([\w.-]+):(\d+)(/[\w/]*)?", test):
        return url.group(1), int(url.group(2)), url.group(3) or "/"
    sock = re.search(r"\(\s*'([\w.-]+)'\s*,\s*(\d+)\s*\)", test)
    assert sock, f"no address in the health check {test!r}"
    return sock.group(1), int(sock.group(2)), ""


@pytest.mark.parametrize("name", services_running(*LISTENS))
def test_daemons_listen_where_they_are_published_and_checked(name: str) -> None:
    svc = services()[name]
    path, params, settings = daemon(name)
    host, port = LISTENS[path](params, settings)
    assert port in listening(svc), f"{name} listens on {port}; ports/expose say {listening(svc)}"
    check_host, check_port, check_path = _health_target(svc)
    assert check_port == port, f"{name}'s health check hits {check_port}, it listens on {port}"
    if path == "agent":  # bound to its own name: reachable at the address it announces
        assert host == svc.get("hostname") == name == params["agent_id"] == check_host
        assert any(params["work_dir"].startswith(v.split(":")[1]) for v in svc.get("volumes", []))
    else:
        assert host == "0.0.0.0", f"{name} binds {host}: unreachable from other containers"
        assert check_host in ("127.0.0.1", "localhost") and check_path == "/healthz"
        assert published(svc).get(port), f"{name}: port {port} is not published"


def test_agent_ids_are_unique_and_the_proxy_announces_its_published_port() -> None:
    ids = [daemon(n)[1]["agent_id"] for n in services_running("agent")]
    assert len(ids) == len(set(ids)), f"agent ids: {ids}"
    for name in services_running("proxy"):
        public = environment(services()[name])["SOKOVAN_PROXY_PUBLIC_URL"]
        port = parse_bind(daemon(name)[1]["bind"])[1]
        assert urlsplit(public).port == published(services()[name])[port], (
            f"{public}: not where it is published"
        )


@pytest.mark.parametrize("name", sorted(raw_compose()["services"]))
def test_start_order_waits_for_health_or_completion(name: str) -> None:
    svc = services()[name]
    deps = svc.get("depends_on", {})
    assert isinstance(deps, dict), f"{name}: depends_on needs conditions, not a bare list"
    for dep, spec in deps.items():
        assert dep in services(), f"{name} depends on {dep!r}, which is no service"
        condition = spec.get("condition")
        if condition == "service_healthy":
            assert "healthcheck" in services()[dep], f"{name} waits for {dep} to be healthy; it has no check"
        else:
            assert condition == "service_completed_successfully", f"{name} → {dep}: {condition}"
            assert services()[dep].get("restart") == "no", f"{dep} is waited on to finish but restarts"
    if svc.get("restart") != "no":
        assert "healthcheck" in svc, f"{name} is long-running and has no health check"


def test_schema_then_bootstrap_then_manager() -> None:
    by_command = {daemon(n)[0]: n for n in sokovan_services()}
    migrate, bootstrap, manager = (by_command[c] for c in ("db upgrade", "admin bootstrap", "manager"))
    assert migrate in dependencies(bootstrap) and bootstrap in dependencies(manager)
    assert daemon(bootstrap)[1]["if_needed"], "a second start would make (and print) another admin token"
    assert not daemon(bootstrap)[1]["as_json"], "people read the token from the log"


def test_postgres_creates_the_database_the_daemons_use() -> None:
    urls = {daemon(n)[2].db_url for n in sokovan_services() if "db_url" in NEEDS[daemon(n)[0]]}
    assert len(urls) == 1, f"the services disagree on the database: {urls}"
    url = make_url(urls.pop())
    assert url.drivername == "postgresql+asyncpg"
    pg = environment(services()[str(url.host)])
    assert url.database == pg.get("POSTGRES_DB"), f"{url.database} is not the database postgres creates"
    assert url.username == pg.get("POSTGRES_USER", "postgres")
    if url.password is None:
        assert pg.get("POSTGRES_HOST_AUTH_METHOD") == "trust", "a URL without a password needs trust"
    else:
        assert url.password == pg.get("POSTGRES_PASSWORD")


def test_env_example_and_the_compose_file_name_the_same_variables() -> None:
    refs, example = referenced(COMPOSE.read_text()), env_example()
    assert not set(example) - set(refs), f".env.example sets what compose ignores: {set(example) - set(refs)}"
    assert not set(refs) - set(example), f"compose uses what .env.example omits: {set(refs) - set(example)}"
    for var, default in refs.items():
        if default is not None and example[var]:
            assert default == example[var], f"{var}: compose defaults to {default!r}, .env.example not"


def test_networks_and_volumes_are_declared() -> None:
    top = raw_compose()
    for name, svc in services().items():
        assert networks(svc) <= {*(top.get("networks") or {}), "default"}, f"{name}: undeclared network"
        named = {v.split(":")[0] for v in svc.get("volumes", []) if not v.startswith((".", "/"))}
        assert named <= set(top.get("volumes") or {}), f"{name}: undeclared volume in {named}"
