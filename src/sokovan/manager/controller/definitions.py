"""Definition generators: what each deployment type runs, from its create request.

A deployment's `definition` — `{image, command, environ, resources, health_check}` — is what every
one of its replica sessions is made from. One pure function per `DeploymentType`, in one table:
`custom` runs the caller's image and command; the model types run their server (image named like
the type unless the caller names another) with a generated command line that serves the model on
`$PORT`, the port each replica's agent hands it. A request that does not fit its type (no model for
vllm, no command for custom, ...) raises `DefinitionError`, naming the field.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from typing import Any

from sokovan.common.types import DeploymentType
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest


class DefinitionError(ValueError):
    """The request does not fit its deployment type; `field` is the request field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# (image, command) for a request of the generator's type
Generator = Callable[[DeploymentCreateRequest], tuple[str, str]]

MODEL_TYPES = "vllm, tgi and sglang"


def _custom(request: DeploymentCreateRequest) -> tuple[str, str]:
    if request.model is not None:
        raise DefinitionError(
            "model", f"model applies to {MODEL_TYPES} deployments; a custom one runs its command"
        )
    if not request.image:
        raise DefinitionError("image", "a custom deployment needs an image")
    if not (request.command and request.command.strip()):
        raise DefinitionError("command", "a custom deployment needs a command (its server listens on $PORT)")
    return request.image, request.command


def model_server(image: str, template: str) -> Generator:
    """A model type's generator: `template` with `{model}` replaced by the shell-quoted model."""

    def generate(request: DeploymentCreateRequest) -> tuple[str, str]:
        kind = request.type.value
        if not (request.model and request.model.strip()):
            raise DefinitionError("model", f"a {kind} deployment needs a model")
        if request.command is not None:
            raise DefinitionError(
                "command", f"a {kind} deployment's command is generated; use type custom to run your own"
            )
        return request.image or image, template.format(model=shlex.quote(request.model))

    return generate


GENERATORS: Mapping[DeploymentType, Generator] = {
    DeploymentType.CUSTOM: _custom,
    DeploymentType.VLLM: model_server("vllm", "vllm serve {model} --host 0.0.0.0 --port $PORT"),
    DeploymentType.TGI: model_server("tgi", "text-generation-launcher --model-id {model} --port $PORT"),
    DeploymentType.SGLANG: model_server(
        "sglang", "python -m sglang.launch_server --model-path {model} --host 0.0.0.0 --port $PORT"
    ),
}


def generate(request: DeploymentCreateRequest) -> dict[str, Any]:
    """The definition of the deployment `request` asks for (JSON-ready)."""
    image, command = GENERATORS[request.type](request)
    return {
        "image": image,
        "command": command,
        "environ": dict(request.environ),
        "resources": request.per_replica_slots().to_json(),
        "health_check": request.health_check.model_dump(mode="json"),
    }
