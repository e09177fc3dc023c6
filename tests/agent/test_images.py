"""The image catalog: defaults and catalog files (pure, no services)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sokovan.agent.images import SYSTEM_PATH, ImageCatalog, ImageCatalogError, parse_catalog


def test_defaults() -> None:
    catalog = ImageCatalog()
    assert catalog.names() == ["python:3", "shell"]
    python = catalog.get("python:3")
    shell = catalog.get("shell")
    assert python is not None and shell is not None
    path = python.environment()["PATH"].split(":")
    assert path[-3:] == SYSTEM_PATH.split(":")  # the system's, maybe after python3's own directory
    assert shutil.which("python3", path=":".join(path)) is not None
    assert shell.environment() == {"PATH": SYSTEM_PATH}


def test_python_never_gets_the_agents_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"/agent/secret/bin:{SYSTEM_PATH}")
    python = ImageCatalog().get("python:3")
    assert python is not None and "/agent/secret/bin" not in python.environment()["PATH"]


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "images.toml"
    path.write_text('[images.myimg]\npath = ["/opt/x/bin"]\nenv = { FOO = "1", N = 2 }\n')
    catalog = ImageCatalog.from_file(path)
    assert catalog.names() == ["myimg", "python:3", "shell"]
    image = catalog.get("myimg")
    assert image is not None
    assert image.environment() == {"FOO": "1", "N": "2", "PATH": f"/opt/x/bin:{SYSTEM_PATH}"}


@pytest.mark.parametrize("wrapped", [False, True])
def test_json_file(tmp_path: Path, wrapped: bool) -> None:
    table = {"myimg": {"path": ["/opt/x/bin"], "env": {"FOO": "1"}}}
    path = tmp_path / "images.json"
    path.write_text(json.dumps({"images": table} if wrapped else table))
    image = ImageCatalog.from_file(path).get("myimg")
    assert image is not None and image.environment()["FOO"] == "1"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "expected a table of images"),
        ({"x": "not-a-table"}, "expected a table"),
        ({"x": {"paths": []}}, "unknown keys ['paths']"),
        ({"x": {"path": [1]}}, "'path' must be a list"),
        ({"x": {"env": ["A=1"]}}, "'env' must be a table"),
        ({"x": {"env": {"PATH": "/bin"}}}, "invalid variable name 'PATH'"),
        ({"x": {"env": {"A": {"b": 1}}}}, "must be a string or a number"),
    ],
)
def test_bad_documents(document: object, message: str) -> None:
    with pytest.raises(ImageCatalogError, match=re.escape(message)):
        parse_catalog(document)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ImageCatalogError, match="No such file"):
        ImageCatalog.from_file(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[images.x\n")
    with pytest.raises(ImageCatalogError, match="not valid TOML"):
        ImageCatalog.from_file(broken)
    broken_json = tmp_path / "broken.json"
    broken_json.write_text("{")
    with pytest.raises(ImageCatalogError, match="not valid JSON"):
        ImageCatalog.from_file(broken_json)
