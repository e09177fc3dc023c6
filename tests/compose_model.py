"""docker-compose.yml, the Dockerfile, .dockerignore and .env.example read as compose and docker
read them, and the commands and variables of the real `sokovan` code they are checked against
(tests/test_compose.py). No Docker needed."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import pkgutil
import re
import shlex
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import Any
from unittest.mock import patch

import click
import yaml
from pydantic_settings import BaseSettings

import sokovan
from sokovan.cli.main import cli
from sokovan.common.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

_VAR = re.compile(r"\$(?:\$|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`, `${VAR:?error}`, `$$`."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1) or m.group(4), m.group(2), m.group(3)
        found = env.get(name)
        unset = not found if op and op.startswith(":") else found is None
        if unset and op in (":-", "-"):
            return arg
        if unset and op in (":?", "?"):
            raise ValueError(f"required variable {name} is missing a value: {arg}")
        return found or ""

    return _VAR.sub(one, value)


def referenced(text: str) -> dict[str, str | None]:
    """Every variable the text interpolates → its default (None: none)."""
    found = (m for m in _VAR.finditer(text) if m.group(0) != "$$")
    return {m.group(1) or m.group(4): m.group(3) if m.group(2) in (":-", "-") else None for m in found}


def env_example() -> dict[str, str]:
    lines = (ln.partition("=") for ln in (ROOT / ".env.example").read_text().splitlines())
    return {key.strip(): value.strip() for key, sep, value in lines if sep and not key.startswith("#")}


def _resolved(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: _resolved(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolved(v, env) for v in node]
    return interpolate(node, env) if isinstance(node, str) else node


@functools.cache
def raw_compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def services() -> dict[str, dict[str, Any]]:
    return dict(_resolved(raw_compose(), env_example())["services"])


def environment(svc: Mapping[str, Any]) -> dict[str, str]:
    env = svc.get("environment") or {}
    env = dict(item.split("=", 1) for item in env) if isinstance(env, list) else env
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def _port(spec: Any) -> tuple[int, int | None]:
    """(container port, host port or None) of one `ports`/`expose` entry."""
    if isinstance(spec, dict):
        return int(spec["target"]), int(spec["published"]) if "published" in spec else None
    parts = str(spec).split("/")[0].split(":")
    return int(parts[-1]), int(parts[-2]) if len(parts) > 1 else None


def listening(svc: Mapping[str, Any]) -> set[int]:
    return {_port(p)[0] for p in [*svc.get("ports", []), *svc.get("expose", [])]}


def published(svc: Mapping[str, Any]) -> dict[int, int | None]:
    return dict(_port(p) for p in svc.get("ports", []))


def networks(svc: Mapping[str, Any]) -> set[str]:
    return set(svc.get("networks") or ["default"])


def dependencies(name: str) -> set[str]:
    """Every service `name` waits for, directly or through others."""
    direct = set(services()[name].get("depends_on", {}))
    return direct.union(*(dependencies(d) for d in direct if d in services()))


def dockerfile() -> dict[str, str]:
    """The Dockerfile's instructions (continuations joined), the last of each kind."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [ln.strip().split(None, 1) for ln in text.splitlines() if ln.strip() and ln.strip()[0] != "#"]
    return {words[0].upper(): words[1] for words in lines}


def sokovan_services() -> list[str]:
    """The services that run the image the Dockerfile builds."""
    return sorted(n for n, s in services().items() if "build" in s)


def parse_command(args: list[str], env: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """`sokovan <args>` parsed by the real click tree under `env`: (command path, its parameters).
    An unknown command or option, or a bad value, raises click.UsageError."""
    command: click.Command = cli
    path: list[str] = []
    parent: click.Context | None = None
    with patch.dict(os.environ, env, clear=True):
        while isinstance(command, click.Group):
            ctx = click.Context(command, info_name=" ".join(["sokovan", *path]), parent=parent)
            sub = command.get_command(ctx, args[len(path)]) if len(args) > len(path) else None
            if sub is None:
                raise click.UsageError(f"no such command: `sokovan {' '.join(args[: len(path) + 1])}`")
            path.append(args[len(path)])
            command, parent = sub, ctx
        leaf = command.make_context(path[-1], args[len(path) :], parent=parent)
    return " ".join(path), dict(leaf.params)


def daemon(name: str) -> tuple[str, dict[str, Any], Settings]:
    """What service `name` runs: (command path, its parsed options, the settings it loads)."""
    svc, docker = services()[name], dockerfile()
    parts = (
        svc.get("entrypoint", json.loads(docker["ENTRYPOINT"])),
        svc.get("command", json.loads(docker["CMD"])),
    )
    args = [word for part in parts for word in (shlex.split(part) if isinstance(part, str) else part)]
    assert args[0] == "sokovan", f"{name} runs {args[0]!r}, not the sokovan entrypoint: {args}"
    path, params = parse_command(args[1:], environment(svc))
    with patch.dict(os.environ, environment(svc), clear=True):
        return path, params, Settings()


def services_running(*commands: str) -> list[str]:
    """For parametrising: the services whose command parses as one of `commands` (one that does
    not parse is left to the test that every service runs a real command)."""

    def runs(name: str) -> str | None:
        try:
            return daemon(name)[0]
        except (AssertionError, click.ClickException):
            return None

    return [name for name in sokovan_services() if runs(name) in commands]


# -- what the daemons read -------------------------------------------------------------------


def _settings_classes() -> list[type[BaseSettings]]:
    for module in pkgutil.walk_packages(sokovan.__path__, "sokovan."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found, todo = [], list(BaseSettings.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        found += [cls] if cls.__module__.startswith("sokovan.") else []
    return found


def _environ_reads(source: str) -> set[str]:
    """Names read through os.environ / os.getenv, as literals or module-level string constants."""
    tree = ast.parse(source)
    consts = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    readers = ("os.environ.get", "os.getenv", "os.environ.pop", "os.environ.setdefault")
    keys = [
        n.args[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and n.args and ast.unparse(n.func) in readers
    ]
    keys += [
        n.slice
        for n in ast.walk(tree)
        if isinstance(n, ast.Subscript) and ast.unparse(n.value) == "os.environ"
    ]
    names = {k.value if isinstance(k, ast.Constant) else consts.get(getattr(k, "id", "")) for k in keys}
    return {n for n in names if isinstance(n, str) and n}


@functools.cache
def daemon_variables() -> frozenset[str]:
    found: set[str] = set()
    for cls in _settings_classes():
        prefix = str(cls.model_config.get("env_prefix", ""))
        found |= {(prefix + (f.alias or n)).upper() for n, f in cls.model_fields.items()}

    def walk(command: click.Command) -> None:
        for param in command.params:
            found.update([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
        if isinstance(command, click.Group):  # the top group loads its commands lazily
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                walk(sub)

    walk(cli)
    for path in (ROOT / "src" / "sokovan").rglob("*.py"):
        found |= _environ_reads(path.read_text())
    return frozenset(found)


def dockerignored(path: str, patterns: list[str]) -> bool:
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(
        fnmatch(p, pat) or (pat.startswith("**/") and fnmatch(parts[i], pat[3:]))
        for pat in patterns
        for i, p in enumerate(prefixes)
    )
