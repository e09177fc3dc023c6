"""Which agents offer an image, as placement judges it: an agent holds the image, or may pull it from
its registry (`common.image_refs`). Every check placement makes (`why_not`, `can_take`, a preemption
target, the whole plan) answers alike, for a container-like agent and a process agent."""

from __future__ import annotations

import pytest

from sokovan.common.image_refs import offers, stored_images
from sokovan.orchestrator.provisioner.build import provisioner_for
from sokovan.orchestrator.provisioner.pipeline import why_not
from sokovan.orchestrator.provisioner.reasons import AgentRefusal
from sokovan.orchestrator.provisioner.victims import _Fit
from tests.orchestrator.factories import agent, session, snapshot

REGISTRY = "127.0.0.1:5000"
CONTAINER = tuple(stored_images([f"{REGISTRY}/python:3"], [REGISTRY]))
PROCESS = ("python:3", "shell")

CASES = [
    # (agent's stored images, image, offered)
    (CONTAINER, "python:3", True),  # held, by its short name
    (CONTAINER, f"{REGISTRY}/python:3", True),  # held, by its reference
    (CONTAINER, "shell", True),  # a short name: pulled from the default registry
    (CONTAINER, f"{REGISTRY}/anything:1", True),  # its registry
    (CONTAINER, "other.registry:5000/x:1", False),  # a registry it may not pull from
    (PROCESS, "python:3", True),
    (PROCESS, "shell", True),
    (PROCESS, "nosuch:1", False),
    (PROCESS, f"{REGISTRY}/python:3", False),  # a process agent pulls nothing
]


@pytest.mark.parametrize(("stored", "image", "offered"), CASES)
def test_every_placement_check_agrees(stored: tuple[str, ...], image: str, offered: bool) -> None:
    assert offers(frozenset(stored), image) is offered
    assert offers(list(stored), image) is offered  # a list answers as its set does
    a = agent("a", images=stored)
    s = session(cpu=1, image=image)
    reason = why_not(a, image, s.resources, 1, s)
    assert reason == (None if offered else AgentRefusal.IMAGE_NOT_OFFERED)
    assert a.can_take(image, s.resources, 1) is offered
    assert _Fit(s, s.resources, 1).target(a) is offered
    snap = snapshot(a)
    plan = provisioner_for(snap).plan([s], snap)
    assert [p.session_id for p in plan.placements] == ([s.id] if offered else [])
    if not offered:
        assert plan.waiting[s.id] == "0/1 agents fit: 1 image not offered"


def test_the_container_agents_stored_list() -> None:
    assert CONTAINER == ("*", f"{REGISTRY}/*", f"{REGISTRY}/python:3", "python:3")


def test_a_mixed_group_places_a_registry_image_on_the_agent_that_may_pull_it() -> None:
    snap = snapshot(agent("proc", images=PROCESS), agent("ctr", images=CONTAINER))
    s = session(cpu=1, image=f"{REGISTRY}/shell:latest")
    plan = provisioner_for(snap).plan([s], snap)
    assert [list(p.kernels.values()) for p in plan.placements] == [["ctr"]]
