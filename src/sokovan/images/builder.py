"""Build the default images through the Engine API and push them to a registry.

For each image the builder hashes its context first and asks the registry whether the tag already
carries that hash as its `org.sokovan.context` label; if so it reports the digest there and
builds nothing. Otherwise it sends the context to the engine's `POST /build`, pushes the tag, and
reports the manifest digest the registry now holds for it. Files are read in a worker thread, so
that the event loop only ever waits on the engine and the registry.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp

from sokovan.images.contexts import CONTEXT_LABEL, Context, python_context, shell_context
from sokovan.images.engine import EngineError, connect, describe, ping
from sokovan.images.errors import ImagesError
from sokovan.images.registry import Registry, RegistryError, check_address

DEFAULT_CONTEXTS: tuple[Callable[[], Context], ...] = (shell_context, python_context)
_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class Outcome:
    """One image: its reference, the registry's manifest digest, and whether this run pushed it."""

    reference: str
    digest: str
    pushed: bool


def _quiet(_: str) -> None:
    pass


async def build_default_images(
    engine: str,
    registry: str,
    *,
    progress: Callable[[str], None] = _quiet,
    contexts: tuple[Callable[[], Context], ...] = DEFAULT_CONTEXTS,
) -> list[Outcome]:
    """Build and push every default image that the registry does not hold as it is now."""
    check_address(registry)
    docker = connect(engine)
    try:
        await ping(docker, engine)
        async with aiohttp.ClientSession() as http:
            reg = Registry(registry, http)
            await reg.check()
            outcomes = []
            for make in contexts:
                context = await asyncio.to_thread(make)
                outcomes.append(await build_one(docker, reg, context, progress))
            return outcomes
    finally:
        await docker.close()


async def build_one(
    docker: aiodocker.Docker, reg: Registry, context: Context, progress: Callable[[str], None]
) -> Outcome:
    reference = f"{reg.address}/{context.repository}:{context.tag}"
    digest = await asyncio.to_thread(context.digest)
    existing = await reg.lookup(context.repository, context.tag)
    if existing is not None and existing.labels.get(CONTEXT_LABEL) == digest:
        progress(f"{reference}: up to date in the registry ({existing.digest}), skipped")
        return Outcome(reference, existing.digest, pushed=False)
    progress(f"{reference}: building (context {digest[:12]})")
    tar = await asyncio.to_thread(context.write_tar, digest)
    try:
        async for item in docker.images.build(
            fileobj=tar, tag=reference, encoding="identity", forcerm=True, stream=True
        ):
            _raise_if_error(item, f"building {reference}")  # only the progress lines' errors matter
    except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
        raise EngineError(f"building {reference} failed: {describe(exc)}") from exc
    finally:
        tar.close()
    progress(f"{reference}: pushing")
    said = await _push(docker, reference)
    found = await reg.lookup(context.repository, context.tag)
    if found is None:
        raise RegistryError(f"{reference} was pushed but the registry does not list it")
    if said and said != found.digest:
        progress(f"{reference}: the engine reported {said}, the registry holds {found.digest}")
    progress(f"{reference}: pushed {found.digest}")
    return Outcome(reference, found.digest, pushed=True)


async def _push(docker: aiodocker.Docker, reference: str) -> str | None:
    """Push `reference`; the digest the engine reports, if it reports one."""
    said: str | None = None
    try:
        # An anonymous push still needs an X-Registry-Auth header that parses (Podman checks it).
        async for item in docker.images.push(reference, auth={}, stream=True):
            _raise_if_error(item, f"pushing {reference}")
            aux = item.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                said = aux["Digest"]
            elif match := _DIGEST.search(str(item.get("status", ""))):
                said = match.group(1)
    except (aiodocker.DockerError, aiohttp.ClientError, OSError) as exc:
        raise EngineError(f"pushing {reference} failed: {_hint(describe(exc))}") from exc
    return said


def _hint(reason: str) -> str:
    if "HTTPS client" in reason or "server gave HTTP response" in reason:
        return reason + (
            " (the engine does not trust this registry over plain HTTP: Podman's registries.conf"
            " `insecure = true`, Docker's `insecure-registries`)"
        )
    return reason


def _raise_if_error(item: dict[str, Any], what: str) -> None:
    """EngineError for an error line of a progress stream (older aiodocker passes them on as items)."""
    if "error" in item or "errorDetail" in item:
        detail = item.get("errorDetail")
        message = detail.get("message") if isinstance(detail, dict) else None
        reason = str(message or item.get("error") or "unknown error").strip().splitlines()[0]
        raise EngineError(f"{what} failed: {_hint(reason)}")


__all__ = ["ImagesError", "Outcome", "build_default_images"]
