"""What a registry holds under a tag, asked over the registry HTTP API (v2).

`lookup` reads the tag's manifest (an OCI or Docker image manifest) for its digest, the
registry's `Docker-Content-Digest`, and then the image's config blob for its labels: that is how
the builder tells that an image is already there, built from the same context. The local
registries this serves speak plain HTTP, as the engine that pushes to them is told to expect.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sokovan.images.errors import ImagesError

MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
TIMEOUT = aiohttp.ClientTimeout(total=30)
_NAMESPACE = re.compile(r"([a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)?")


class RegistryError(ImagesError):
    """The registry cannot be reached or answered something unexpected."""


@dataclass(frozen=True)
class Existing:
    """A tag the registry holds: its manifest digest and its image's labels."""

    digest: str
    labels: dict[str, str] = field(default_factory=dict)


def check_address(address: str) -> str:
    """`address` when it is `HOST[:PORT]`, optionally with a namespace (`HOST:PORT/team`); else RegistryError.

    A namespace is a path prefix for the repositories (`HOST:PORT/team/python:3`), as registries allow.
    """
    hostport, slash, namespace = address.partition("/")
    host, sep, port = hostport.rpartition(":")
    if not sep:
        host, port = hostport, ""
    bad_namespace = (slash and not namespace) or not _NAMESPACE.fullmatch(namespace)
    if not host or (sep and not port.isdigit()) or bad_namespace:
        raise RegistryError(f"--registry {address!r} is not HOST:PORT (e.g. 127.0.0.1:5000)")
    return address


class Registry:
    """A registry at `address` (HOST:PORT), spoken to over `session`."""

    def __init__(self, address: str, session: aiohttp.ClientSession) -> None:
        self.address = check_address(address)
        hostport, _, namespace = address.partition("/")
        self.root = f"http://{hostport}/v2"
        self.base = f"{self.root}/{namespace}" if namespace else self.root
        self.session = session

    async def check(self) -> None:
        """RegistryError unless the registry answers `GET /v2/` (200, or 401 asking for a login)."""
        status, _, body = await self._get("/", root=True)
        if status not in (200, 401):
            raise RegistryError(
                f"registry {self.address} answered GET /v2/ with HTTP {status}: {body[:80]!r}"
            )

    async def lookup(self, repository: str, tag: str) -> Existing | None:
        """The tag's manifest digest and labels; None when the registry has no such tag."""
        accept = ", ".join(MANIFEST_TYPES)
        status, headers, body = await self._get(f"/{repository}/manifests/{tag}", accept)
        if status == 404:
            return None
        if status != 200:
            raise RegistryError(
                f"registry {self.address}: GET manifest {repository}:{tag} answered HTTP {status}"
            )
        digest = headers.get("Docker-Content-Digest") or "sha256:" + hashlib.sha256(body).hexdigest()
        manifest = _json(body)
        config = manifest.get("config")
        if not isinstance(config, dict) or not isinstance(config.get("digest"), str):
            return Existing(digest)  # an index or an old schema: no labels to compare
        status, _, blob = await self._get(f"/{repository}/blobs/{config['digest']}")
        if status != 200:
            raise RegistryError(
                f"registry {self.address}: the config of {repository}:{tag} answered HTTP {status}"
            )
        labels = (_json(blob).get("config") or {}).get("Labels") or {}
        return Existing(digest, {str(k): str(v) for k, v in labels.items()})

    async def _get(
        self, path: str, accept: str | None = None, *, root: bool = False
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {"Accept": accept} if accept else {}
        url = (self.root if root else self.base) + path
        try:
            async with self.session.get(url, headers=headers, timeout=TIMEOUT) as resp:
                return resp.status, dict(resp.headers), await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise RegistryError(f"registry {self.address} does not answer: {reason}") from exc


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise RegistryError(f"the registry answered something that is not JSON: {body[:80]!r}") from exc
    return data if isinstance(data, dict) else {}
