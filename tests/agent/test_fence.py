"""The agent's fence (`agent.fence.Fence`): its clock, its classes, once per silence."""

from __future__ import annotations

from sokovan.agent.fence import Fence
from sokovan.common.types import AgentClass
from sokovan.config.cluster import GracePeriods, NodeLifecycleSettings

TIMINGS = NodeLifecycleSettings(
    heartbeat_interval=1, heartbeat_timeout=3, grace_period=GracePeriods(standard=2, sensitive=2, borrowed=1)
)


class World:
    def __init__(self, agent_class: AgentClass) -> None:
        self.now = 100.0
        self.delivered: float | None = None
        self.running = ["k1", "k2"]
        self.stopped: list[list[str]] = []

        async def stop(kernels: list[str]) -> None:
            self.stopped.append(kernels)

        self.fence = Fence(
            agent_class,
            lambda: TIMINGS,
            lambda: self.delivered,
            lambda: list(self.running),
            stop,
            lambda: self.now,
        )


async def test_a_standard_agent_stops_its_kernels_once_the_silence_passes_timeout_plus_grace() -> None:
    world = World(AgentClass.STANDARD)
    for k in world.running:
        world.fence.started(k)
    world.delivered = 100.0
    world.now = 105.0  # exactly timeout + grace: not longer than it
    assert await world.fence.check() == [] and world.stopped == []
    world.now = 105.1
    assert await world.fence.check() == ["k1", "k2"]
    assert world.stopped == [["k1", "k2"]] and world.fence.epoch == 2
    # their ends are reported "lost" (retried), once each; a kernel it did not stop is not
    assert world.fence.stopped_by_fence("k1") and not world.fence.stopped_by_fence("k1")
    assert not world.fence.stopped_by_fence("k9")
    world.now = 106.0
    assert await world.fence.check() == []  # once per silence
    assert world.stopped == [["k1", "k2"]]


async def test_the_beats_getting_through_again_end_the_fence_and_a_new_epoch_counts() -> None:
    world = World(AgentClass.BORROWED)  # 3 + 1
    world.delivered, world.now = 100.0, 104.5
    assert await world.fence.check() == ["k1", "k2"]
    world.delivered, world.now = 110.0, 110.5
    assert await world.fence.check() == [] and world.fence.fenced is False
    world.running = ["k3"]
    world.fence.started("k3")
    assert world.fence.epoch_of("k3") == 2
    world.now = 114.6
    assert await world.fence.check() == ["k3"] and world.fence.epoch == 3


async def test_a_sensitive_agent_keeps_its_kernels() -> None:
    world = World(AgentClass.SENSITIVE)
    world.delivered, world.now = 100.0, 200.0
    assert await world.fence.check() == []
    assert world.stopped == [] and world.fence.fenced is True


async def test_silence_counts_from_the_start_until_a_first_beat_is_delivered() -> None:
    world = World(AgentClass.STANDARD)  # made at 100
    world.now = 104.0
    assert await world.fence.check() == []
    world.now = 105.5
    assert await world.fence.check() == ["k1", "k2"]
