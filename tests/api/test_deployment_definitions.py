"""Definition generators: one per deployment type, pure, table-driven."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from sokovan.common.types import DeploymentType
from sokovan.manager.controller.definitions import GENERATORS, DefinitionError, generate
from sokovan.manager.controller.deployment_spec import DeploymentCreateRequest

HEALTH_DEFAULTS = {
    "path": "/health",
    "interval": 5.0,
    "timeout": 2.0,
    "healthy_threshold": 2,
    "unhealthy_threshold": 3,
    "initial_delay": 0.0,
    "eviction_grace": None,
}


def request(**fields: Any) -> DeploymentCreateRequest:
    return DeploymentCreateRequest.model_validate({"name": "d", **fields})


def test_every_type_has_a_generator() -> None:
    assert set(GENERATORS) == set(DeploymentType)


@pytest.mark.parametrize(
    ("fields", "image", "command"),
    [
        (
            {"type": "custom", "image": "python:3", "command": "python3 -m http.server $PORT"},
            "python:3",
            "python3 -m http.server $PORT",
        ),
        (
            {"type": "vllm", "model": "facebook/opt-125m"},
            "vllm",
            "vllm serve facebook/opt-125m --host 0.0.0.0 --port $PORT",
        ),
        (
            {"type": "tgi", "model": "bigscience/bloom-560m"},
            "tgi",
            "text-generation-launcher --model-id bigscience/bloom-560m --port $PORT",
        ),
        (
            {"type": "sglang", "model": "Qwen/Qwen2-0.5B"},
            "sglang",
            "python -m sglang.launch_server --model-path Qwen/Qwen2-0.5B --host 0.0.0.0 --port $PORT",
        ),
        # the model is shell-quoted; a model type may name its own image
        (
            {"type": "vllm", "model": "my model; rm -rf /"},
            "vllm",
            "vllm serve 'my model; rm -rf /' --host 0.0.0.0 --port $PORT",
        ),
        (
            {"type": "tgi", "model": "m", "image": "tgi:2.0"},
            "tgi:2.0",
            "text-generation-launcher --model-id m --port $PORT",
        ),
    ],
)
def test_generated_image_and_command(fields: dict[str, Any], image: str, command: str) -> None:
    definition = generate(request(**fields))
    assert (definition["image"], definition["command"]) == (image, command)
    assert definition["health_check"] == HEALTH_DEFAULTS
    assert definition["resources"] == {"cpu": "1", "mem": str(256 * 2**20)}
    assert definition["environ"] == {}


def test_resources_environ_and_health_check_carried() -> None:
    definition = generate(
        request(
            type="vllm",
            model="m",
            resources={"cpu": 2, "mem": "1g"},
            environ={"HF_HOME": "/tmp/hf"},
            health_check={"path": "/v1/models", "interval": 1, "healthy_threshold": 1},
        )
    )
    assert definition["resources"] == {"cpu": "2", "mem": str(2**30)}
    assert definition["environ"] == {"HF_HOME": "/tmp/hf"}
    assert definition["health_check"] == {
        **HEALTH_DEFAULTS,
        "path": "/v1/models",
        "interval": 1.0,
        "healthy_threshold": 1,
    }


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"type": "custom", "command": "serve $PORT"}, "image"),
        ({"type": "custom", "image": "shell"}, "command"),
        ({"type": "custom", "image": "shell", "command": "   "}, "command"),
        ({"type": "custom", "image": "shell", "command": "x", "model": "m"}, "model"),
        ({"type": "vllm"}, "model"),
        ({"type": "tgi", "model": "  "}, "model"),
        ({"type": "sglang", "model": "m", "command": "my own"}, "command"),
    ],
)
def test_what_a_type_needs(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(DefinitionError) as err:
        generate(request(**fields))
    assert err.value.field == field


@pytest.mark.parametrize(
    "fields",
    [
        {"type": "kserve", "model": "m"},
        {"type": "vllm", "model": "m", "name": "Upper"},
        {"type": "vllm", "model": "m", "name": "-lead"},
        {"type": "vllm", "model": "m", "name": "a" * 41},
        {"type": "vllm", "model": "m", "replicas": -1},
        {"type": "vllm", "model": "m", "replicas": 1001},
        {"type": "vllm", "model": "m", "replicas": "2"},
        {"type": "vllm", "model": "m", "resources": {"cpu": "lots"}},
        {"type": "vllm", "model": "m", "health_check": {"path": "health"}},
        {"type": "vllm", "model": "m", "surprise": 1},
    ],
)
def test_field_errors(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        request(**fields)
