"""Image references and what an agent offers (a table of names)."""

from __future__ import annotations

import pytest

from sokovan.common.image_refs import ImageRefError, offers, parse, split_stored, stored_images

REG = "127.0.0.1:5000"


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag"),
    [
        ("python:3", None, "python", "3"),
        ("shell", None, "shell", None),
        ("team/app:1.0", None, "team/app", "1.0"),
        (f"{REG}/python:3", REG, "python", "3"),
        ("localhost/x", "localhost", "x", None),
        ("reg.example/a/b:c", "reg.example", "a/b", "c"),
    ],
)
def test_parse(text: str, registry: str | None, repository: str, tag: str | None) -> None:
    ref = parse(text)
    assert (ref.registry, ref.repository, ref.tag) == (registry, repository, tag)
    assert str(ref) == text


@pytest.mark.parametrize("text", ["", " x", "x:", "a//b", "x@sha256:12", "a b"])
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ImageRefError):
        parse(text)


def test_short_names_resolve_against_the_default_registry() -> None:
    assert str(parse("python:3").resolved(REG)) == f"{REG}/python:3"
    assert str(parse("shell").resolved(REG)) == f"{REG}/shell:latest"
    assert str(parse("other.io/x").resolved(REG)) == "other.io/x:latest"


def test_a_container_agent_offers_what_it_holds_and_what_its_registries_have() -> None:
    stored = set(stored_images([f"{REG}/python:3", f"{REG}/shell:latest"], [REG, "mirror.io"]))
    for image in ("python:3", "shell", "shell:latest", "anything:1", f"{REG}/new:2", "mirror.io/x:1"):
        assert offers(stored, image), image
    assert not offers(stored, "elsewhere.io:5000/x:1")
    assert split_stored(sorted(stored)) == (
        ["127.0.0.1:5000/python:3", "127.0.0.1:5000/shell:latest", "python:3", "shell", "shell:latest"],
        ["127.0.0.1:5000", "mirror.io"],
    )


def test_a_process_agent_offers_its_catalog_only() -> None:
    stored = set(stored_images(["python:3", "shell"], []))
    assert offers(stored, "python:3") and offers(stored, "shell")
    assert not offers(stored, "nosuch:1") and not offers(stored, f"{REG}/python:3")
