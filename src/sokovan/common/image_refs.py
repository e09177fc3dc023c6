"""OCI image references as the agents and the manager read them, and what an agent offers.

A reference is `[registry/]repository[:tag][@sha256:…]`. Its first component is a registry when it
holds a `.` or a `:` or is `localhost`, as Docker reads it; otherwise the name is *short* and
resolves against an agent's default registry (`python:3` → `127.0.0.1:5000/python:3`), as Docker
resolves it against its hub. A reference with neither tag nor digest means `:latest`.

What an agent offers is stored on its row as one list (`agents.images`), so that placement and
admission test membership in a set, and PostgreSQL with one `?|`:

- the references of the images it holds (for the process backend: its catalog's names), and for
  those from its default registry also their short forms (`python:3`, `shell`, `shell:latest`);
- `<registry>/*` for every registry it may pull from;
- `*` when it has a default registry, so any short name may be pulled there.

`image_keys(image)` lists the entries any one of which makes an agent offer `image`;
`stored_images` builds an agent's list and `split_stored` takes it apart for the API.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass

ANY_SHORT = "*"
REGISTRY_SUFFIX = "/*"
DEFAULT_TAG = "latest"


class ImageRefError(ValueError):
    """A string that is not an image reference."""


@dataclass(frozen=True)
class ImageRef:
    registry: str | None
    repository: str
    tag: str | None
    digest: str | None

    @property
    def short(self) -> bool:
        return self.registry is None

    def name(self) -> str:
        """`registry/repository` (or the repository alone for a short name)."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    def __str__(self) -> str:
        out = self.name()
        if self.tag is not None:
            out += f":{self.tag}"
        if self.digest is not None:
            out += f"@{self.digest}"
        return out

    def normalized(self) -> ImageRef:
        """With `:latest` where it names neither a tag nor a digest."""
        if self.tag is None and self.digest is None:
            return ImageRef(self.registry, self.repository, DEFAULT_TAG, None)
        return self

    def resolved(self, default_registry: str) -> ImageRef:
        """A short name placed in `default_registry`, normalized; a full one normalized."""
        ref = self.normalized()
        if ref.registry is None:
            return ImageRef(default_registry, ref.repository, ref.tag, ref.digest)
        return ref


def _is_registry(component: str) -> bool:
    return "." in component or ":" in component or component == "localhost"


@functools.lru_cache(maxsize=4096)
def parse(reference: str) -> ImageRef:
    """Parse `reference`; ImageRefError when it cannot be one."""
    text = reference.strip()
    if not text or text != reference or any(c.isspace() for c in text):
        raise ImageRefError(f"not an image reference: {reference!r}")
    rest, _, digest = text.partition("@")
    if digest and not (digest.startswith("sha256:") and len(digest) == 71):
        raise ImageRefError(f"bad digest in {reference!r}")
    first, sep, remainder = rest.partition("/")
    registry = first if sep and _is_registry(first) else None
    path = remainder if registry else rest
    repository, tag = path, None
    slash = path.rfind("/")
    colon = path.rfind(":")
    if colon > slash:
        repository, tag = path[:colon], path[colon + 1 :]
        if not tag:
            raise ImageRefError(f"empty tag in {reference!r}")
    if not repository or repository.startswith("/") or repository.endswith("/") or "//" in repository:
        raise ImageRefError(f"bad repository in {reference!r}")
    return ImageRef(registry, repository, tag, digest or None)


def registry_mark(registry: str) -> str:
    return f"{registry}{REGISTRY_SUFFIX}"


@functools.lru_cache(maxsize=4096)
def image_keys(image: str) -> tuple[str, ...]:
    """The stored entries any one of which means an agent offers `image` (see the docstring)."""
    keys = [image]
    try:
        ref = parse(image)
    except ImageRefError:
        return tuple(keys)
    norm = str(ref.normalized())
    if norm != image:
        keys.append(norm)
    keys.append(ANY_SHORT if ref.short else registry_mark(ref.registry or ""))
    return tuple(keys)


def offers(stored: Collection[str], image: str) -> bool:
    """Whether an agent whose stored list is `stored` (a set, ideally) holds or may pull `image`.

    Placement asks this for every agent of a group and every session of a cycle: the image itself
    is tried first (the common yes), then the other keys in one C-level pass over a set (a
    generator over the keys had cost 0.8 µs a call, thirty times a set's own membership test)."""
    if image in stored:
        return True
    keys = image_keys(image)
    if isinstance(stored, (frozenset, set)):
        return not stored.isdisjoint(keys)
    return any(key in stored for key in keys)


def short_forms(reference: str, default_registry: str | None) -> list[str]:
    """The short names that also name `reference` on an agent whose default registry is given."""
    try:
        ref = parse(reference).normalized()
    except ImageRefError:
        return []
    if default_registry is None or ref.registry != default_registry or ref.tag is None:
        return []
    forms = [f"{ref.repository}:{ref.tag}"]
    if ref.tag == DEFAULT_TAG:
        forms.append(ref.repository)
    return forms


def stored_images(images: Iterable[str], registries: Iterable[str]) -> list[str]:
    """An agent's stored list: its images (with the short forms of its default registry's),
    one mark per registry, and `*` when it has a default registry."""
    regs = list(dict.fromkeys(registries))
    default = regs[0] if regs else None
    out: dict[str, None] = {}
    for image in images:
        out[image] = None
        for form in short_forms(image, default):
            out[form] = None
    for registry in regs:
        out[registry_mark(registry)] = None
    if default is not None:
        out[ANY_SHORT] = None
    return sorted(out)


def split_stored(stored: Iterable[str]) -> tuple[list[str], list[str]]:
    """(images, registries) of a stored list, for the API; the marks are not images."""
    images: list[str] = []
    registries: list[str] = []
    for entry in stored:
        if entry == ANY_SHORT:
            continue
        if entry.endswith(REGISTRY_SUFFIX):
            registries.append(entry[: -len(REGISTRY_SUFFIX)])
        else:
            images.append(entry)
    return images, registries
