"""Images of the container backend: which reference a name means here, whether the engine holds
it, pulling it with the engine's progress, and the digest a kernel runs.

A short name resolves against the agent's default registry (its first `--registry`), as Docker
resolves one against its hub; a full reference must name one of the agent's registries to be
pulled (an image the engine already holds runs whatever its registry). Pulls of one reference are
shared: kernels that need it at once wait for the same pull. The digest recorded on a kernel is the
registry's manifest digest (`RepoDigests`), or the image id when the engine has no registry digest
for it (an image built locally and never pushed).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiodocker
import structlog

from sokovan.agent.events import Emit
from sokovan.common.events import KernelImagePullFailed, KernelPrepared, KernelPulling
from sokovan.common.image_refs import ImageRefError, parse
from sokovan.images.engine import describe

log = structlog.get_logger(__name__)

PROGRESS_EVERY = 2.0  # seconds between the progress lines of one pull in the log


class PullError(Exception):
    """The image cannot be had; the message is the engine's (or the agent's) reason."""


@dataclass(frozen=True)
class HeldImage:
    reference: str
    digest: str | None
    user: str  # the image's USER ("" for root)


def resolve(image: str, registries: Sequence[str]) -> str:
    """The full reference `image` means on an agent with these registries."""
    ref = parse(image)
    return str(ref.resolved(registries[0]) if registries else ref.normalized())


def _digest(info: dict[str, Any], reference: str) -> str | None:
    name = str(parse(reference).normalized()).rsplit(":", 1)[0] if "@" not in reference else ""
    digests = [d for d in info.get("RepoDigests") or [] if isinstance(d, str) and "@" in d]
    for entry in digests:
        repo, _, digest = entry.partition("@")
        if repo == name:
            return digest
    if digests:
        return digests[0].partition("@")[2]
    image_id = info.get("Id")
    return image_id if isinstance(image_id, str) and image_id.startswith("sha256:") else None


class ImageStore:
    """One agent's view of the engine's images."""

    def __init__(self, docker: aiodocker.Docker, registries: Sequence[str]) -> None:
        self.docker = docker
        self.registries = list(registries)
        self._pulls: dict[str, asyncio.Task[HeldImage]] = {}
        self._held: list[str] = []

    def resolve(self, image: str) -> str:
        return resolve(image, self.registries)

    async def prepare(self, image: str, ids: dict[str, str], emit: Emit) -> None:
        """`check_and_pull` of one kernel: PREPARED when the engine holds the image; else PULLING,
        the pull, then PREPARED, or IMAGE_PULL_FAILURE with the reason."""
        try:
            reference = self.resolve(image)
            if await self.inspect(reference) is None:
                emit(KernelPulling(**ids))
                await self.ensure(reference)
        except (PullError, ImageRefError) as exc:
            emit(KernelImagePullFailed(**ids, message=str(exc)))
            return
        except (aiodocker.DockerError, OSError) as exc:
            emit(KernelImagePullFailed(**ids, message=f"{image}: {describe(exc)}"))
            return
        emit(KernelPrepared(**ids))

    async def available(self, image: str) -> bool:
        """Whether the engine holds `image` now (a reconcile's "pull" phase)."""
        try:
            return await self.inspect(self.resolve(image)) is not None
        except (aiodocker.DockerError, ImageRefError, OSError):
            return False

    async def inspect(self, reference: str) -> HeldImage | None:
        try:
            info = await self.docker.images.inspect(reference)
        except aiodocker.DockerError as exc:
            if exc.status == 404:
                return None
            raise
        user = str((info.get("Config") or {}).get("User") or "")
        return HeldImage(reference, _digest(info, reference), user)

    async def ensure(self, reference: str) -> HeldImage:
        """The image, pulled first when the engine does not hold it (PullError when it cannot be)."""
        held = await self.inspect(reference)
        if held is not None:
            return held
        task = self._pulls.get(reference)
        if task is None:
            task = asyncio.create_task(self._pull(reference), name=f"pull-{reference}")
            self._pulls[reference] = task
            task.add_done_callback(lambda _: self._pulls.pop(reference, None))
        return await asyncio.shield(task)

    def may_pull(self, reference: str) -> bool:
        try:
            registry = parse(reference).registry
        except ImageRefError:
            return False
        return registry is not None and registry in self.registries

    async def _pull(self, reference: str) -> HeldImage:
        if not self.may_pull(reference):
            raise PullError(f"{reference}: not held, and its registry is not one this agent may pull from")
        ref = parse(reference)
        started = last = time.monotonic()
        log.info("image.pull_started", image=reference)
        try:
            stream = self.docker.images.pull(ref.name(), tag=ref.digest or ref.tag or "latest", stream=True)
            async for item in stream:
                if item.get("error"):
                    raise PullError(f"{reference}: {item.get('error')}")
                if time.monotonic() - last >= PROGRESS_EVERY:
                    last = time.monotonic()
                    log.info(
                        "image.pull_progress",
                        image=reference,
                        status=item.get("status"),
                        progress=item.get("progress"),
                    )
        except aiodocker.DockerError as exc:
            raise PullError(f"{reference}: {exc.message}") from exc
        held = await self.inspect(reference)
        if held is None:
            raise PullError(f"{reference}: the engine reported the pull done but does not hold the image")
        log.info(
            "image.pulled", image=reference, digest=held.digest, seconds=round(time.monotonic() - started, 3)
        )
        return held

    async def refresh(self) -> list[str]:
        """The references the engine holds now (for the heartbeat); the last list if it fails."""
        try:
            images = await self.docker.images.list()
        except (TimeoutError, aiodocker.DockerError, OSError) as exc:
            log.warning("image.list_failed", error=str(exc))
            return self._held
        refs = sorted({tag for image in images for tag in image.get("RepoTags") or [] if "<none>" not in tag})
        self._held = refs
        return refs

    def offered(self) -> list[str]:
        """What the heartbeat reports as `images` (the held references; the registries go apart)."""
        return list(self._held)
