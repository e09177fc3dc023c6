"""The image catalog of the process backend: image name → the environment a kernel runs in.

On the process backend an "image" is not a container image but a named environment: the PATH
entries and variables a kernel's `/bin/sh -c <command>` starts with. Every agent offers
`python:3` (the host's PATH, so that `python3` resolves) and `shell` (a plain /bin/sh); a catalog
file adds names:

    # TOML
    [images.myimg]
    path = ["/opt/x/bin"]
    env = { FOO = "1" }

    # JSON ({"images": {...}} is accepted as well)
    {"myimg": {"path": ["/opt/x/bin"], "env": {"FOO": "1"}}}

PATH entries of a catalog image come first, followed by the system directories.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
_ALLOWED_KEYS = frozenset({"path", "env"})


class ImageCatalogError(ValueError):
    """A catalog file that is missing, unreadable or malformed."""


@dataclass(frozen=True)
class ImageEnv:
    """The environment one image gives its kernels."""

    path: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        out = dict(self.env)
        out["PATH"] = ":".join(self.path)
        return out


def python_path() -> tuple[str, ...]:
    """The PATH of `python:3`: the system directories, with the directory of the first `python3`
    on the agent's PATH before them when the system has none. Never the agent's whole PATH (a
    kernel would find the agent's virtual environment and whatever else the agent's PATH names)."""
    system = tuple(SYSTEM_PATH.split(":"))
    if shutil.which("python3", path=SYSTEM_PATH):
        return system
    found = shutil.which("python3")
    return (os.path.dirname(found), *system) if found else system


def default_images() -> dict[str, ImageEnv]:
    return {
        "python:3": ImageEnv(path=python_path()),
        "shell": ImageEnv(path=tuple(SYSTEM_PATH.split(":"))),
    }


class ImageCatalog:
    """The images one agent offers."""

    def __init__(self, images: Mapping[str, ImageEnv] | None = None) -> None:
        self._images: dict[str, ImageEnv] = default_images()
        self._images.update(images or {})

    @classmethod
    def from_file(cls, path: str | Path | None) -> ImageCatalog:
        if path is None:
            return cls()
        return cls(parse_catalog(_read(Path(path)), str(path)))

    def names(self) -> list[str]:
        return sorted(self._images)

    def __contains__(self, name: object) -> bool:
        return name in self._images

    def get(self, name: str) -> ImageEnv | None:
        return self._images.get(name)


def _read(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ImageCatalogError(f"image catalog {path}: {exc.strerror or exc}") from exc
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ImageCatalogError(f"image catalog {path} is not valid JSON: {exc}") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as toml_exc:
        try:  # a JSON document under another suffix
            return json.loads(text)
        except json.JSONDecodeError:
            raise ImageCatalogError(f"image catalog {path} is not valid TOML: {toml_exc}") from toml_exc


def parse_catalog(data: Any, source: str = "image catalog") -> dict[str, ImageEnv]:
    """Validate a decoded catalog document into image environments."""
    if not isinstance(data, dict):
        raise ImageCatalogError(f"{source}: expected a table of images")
    table = data.get("images", data) if isinstance(data.get("images"), dict) else data
    images: dict[str, ImageEnv] = {}
    for name, entry in table.items():
        where = f"{source}: image {name!r}"
        if not isinstance(name, str) or not name.strip():
            raise ImageCatalogError(f"{source}: image names must be non-empty strings")
        if not isinstance(entry, dict):
            raise ImageCatalogError(f"{where}: expected a table with 'path' and/or 'env'")
        unknown = sorted(set(entry) - _ALLOWED_KEYS)
        if unknown:
            raise ImageCatalogError(f"{where}: unknown keys {unknown} (allowed: path, env)")
        images[name] = ImageEnv(path=_parse_path(entry.get("path", []), where), env=_parse_env(entry, where))
    return images


def _parse_path(raw: Any, where: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [p for p in raw.split(":") if p]
    if not isinstance(raw, list) or not all(isinstance(p, str) and p for p in raw):
        raise ImageCatalogError(f"{where}: 'path' must be a list of directories")
    return (*raw, *SYSTEM_PATH.split(":"))


def _parse_env(entry: dict[str, Any], where: str) -> dict[str, str]:
    raw = entry.get("env", {})
    if not isinstance(raw, dict):
        raise ImageCatalogError(f"{where}: 'env' must be a table of variables")
    env: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key or "=" in key or key == "PATH":
            raise ImageCatalogError(f"{where}: invalid variable name {key!r} (set PATH with 'path')")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ImageCatalogError(f"{where}: variable {key} must be a string or a number")
        env[key] = str(value)
    return env
