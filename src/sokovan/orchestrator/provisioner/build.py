"""The provisioner a scaling group's settings ask for."""

from __future__ import annotations

from sokovan.orchestrator.provisioner import registry
from sokovan.orchestrator.provisioner.pipeline import Provisioner
from sokovan.orchestrator.provisioner.snapshot import ScalingGroupSnapshot


def provisioner_for(snapshot: ScalingGroupSnapshot) -> Provisioner:
    """Raises `registry.UnknownStage` when the group names a stage that does not exist."""
    return Provisioner(
        validators=registry.validators(),
        sequencer=registry.sequencer(snapshot.scheduler),
        selector=registry.selector(snapshot.agent_selection),
        block=registry.queue_policy(snapshot.queue_policy) == "block",
        reserve=snapshot.queue_policy == "reserve",
    )
