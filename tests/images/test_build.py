"""`sokovan images build` against the real engine and registry: it builds and pushes both default
images and prints their digests; run again it pushes nothing; a registry or an engine that does not
answer ends it with one line on stderr and a non-zero exit."""

from __future__ import annotations

import socket
import subprocess

from tests.images.conftest import Containers, parse_lines, registry_digest, sokovan


def test_build_pushes_both_images_and_prints_their_digests(
    containers: Containers, first_build: subprocess.CompletedProcess[str]
) -> None:
    assert first_build.returncode == 0, first_build.stderr
    ns = containers.namespace
    printed = parse_lines(first_build.stdout)
    assert list(printed) == [f"{ns}/shell:latest", f"{ns}/python:3"]
    for ref, digest in printed.items():
        assert f"{ref}: pushing" in first_build.stderr
        path, _, tag = ref.removeprefix(containers.registry + "/").rpartition(":")
        # The digest printed is the registry's manifest digest for the tag.
        assert registry_digest(containers.registry, path, tag) == digest


def test_second_build_pushes_nothing(
    containers: Containers, first_build: subprocess.CompletedProcess[str]
) -> None:
    assert first_build.returncode == 0, first_build.stderr
    again = sokovan("images", "build", "--registry", containers.namespace, "--engine", containers.engine)
    assert again.returncode == 0, again.stderr
    assert parse_lines(again.stdout) == parse_lines(first_build.stdout)
    assert again.stderr.count("skipped") == 2, again.stderr
    assert "pushing" not in again.stderr and "building" not in again.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_clean_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_registry_that_does_not_answer_is_a_clean_error(containers: Containers) -> None:
    dead = f"127.0.0.1:{_free_port()}"
    line = _one_clean_line(sokovan("images", "build", "--registry", dead, "--engine", containers.engine))
    assert f"registry {dead} does not answer" in line


def test_a_malformed_registry_is_a_clean_error(containers: Containers) -> None:
    line = _one_clean_line(
        sokovan("images", "build", "--registry", "http://x/", "--engine", containers.engine)
    )
    assert "is not HOST:PORT" in line


def test_an_engine_that_does_not_answer_is_a_clean_error(containers: Containers, tmp_path: object) -> None:
    dead = f"unix://{tmp_path}/no-engine.sock"
    line = _one_clean_line(sokovan("images", "build", "--registry", containers.registry, "--engine", dead))
    assert f"engine {dead} does not answer" in line
