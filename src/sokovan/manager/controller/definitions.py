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

from pydantic import ValidationError

from sokovan.bus.routing import HealthCheck
from sokovan.common.types import DeploymentType
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest, DeploymentUpdateRequest


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


# Each model type's server command line; `{model}` is the request's model, shell-quoted. Its
# image is named like the type.
TEMPLATES: Mapping[DeploymentType, str] = {
    DeploymentType.VLLM: "vllm serve {model} --host 0.0.0.0 --port $PORT",
    DeploymentType.TGI: "text-generation-launcher --model-id {model} --port $PORT",
    DeploymentType.SGLANG: "python -m sglang.launch_server --model-path {model} --host 0.0.0.0 --port $PORT",
}
GENERATORS: Mapping[DeploymentType, Generator] = {
    DeploymentType.CUSTOM: _custom,
    **{kind: model_server(kind.value, template) for kind, template in TEMPLATES.items()},
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


def model_of(kind: str, command: str) -> str | None:
    """The model a model type's generated `command` serves (None for custom, or for a command
    that is not its type's template)."""
    template = next((t for k, t in TEMPLATES.items() if k.value == kind), None)
    if template is None:
        return None
    head, _, tail = template.partition("{model}")
    if not (command.startswith(head) and command.endswith(tail)) or len(command) <= len(head) + len(tail):
        return None
    try:
        words = shlex.split(command[len(head) : len(command) - len(tail)])
    except ValueError:
        return None
    return words[0] if len(words) == 1 else None


def updated_request(
    name: str, kind: str, scaling_group: str, current: dict[str, Any], patch: DeploymentUpdateRequest
) -> DeploymentCreateRequest:
    """The create request whose definition is the current one with `patch`'s definition fields
    over it (raises `DefinitionError`): the new revision is generated and admitted like a create."""
    given = patch.model_fields_set
    custom = kind == DeploymentType.CUSTOM.value
    health = dict(current.get("health_check") or {})
    if patch.health_check is not None:
        health.update(patch.health_check.model_dump(include=patch.health_check.model_fields_set))
    model = patch.model if "model" in given else (None if custom else model_of(kind, current["command"]))
    if not custom and model is None and "model" not in given:
        raise DefinitionError("model", "the current command is not the generated one: give the model")
    try:
        return DeploymentCreateRequest(
            name=name,
            type=DeploymentType(kind),
            image=patch.image if "image" in given else current["image"],
            command=patch.command if "command" in given else (current["command"] if custom else None),
            model=model,
            resources=patch.resources if "resources" in given else current["resources"],
            environ=patch.environ if "environ" in given else current.get("environ") or {},
            scaling_group=scaling_group,
            health_check=HealthCheck.model_validate(health),
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(p) for p in error["loc"]) or "definition"
        raise DefinitionError(field, error["msg"]) from None
