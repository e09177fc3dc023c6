"""A hollow fleet's one outbox stands for N agents' outboxes: a burst of start-ups as large as the
benchmark's (thousands of kernels, several events each, emitted faster than one pipeline publishes
them) is kept whole, where one agent's bound of 10,000 used to drop hundreds of kernel events."""

from __future__ import annotations

from sokovan.agent.hollow import HollowConfig, HollowFleet, outbox_bound
from sokovan.agent.outbox import MAX_PENDING
from sokovan.common.events import KernelPulling
from sokovan.common.settings import Settings


def test_the_bound_grows_with_the_fleet() -> None:
    assert outbox_bound(1) > MAX_PENDING
    assert outbox_bound(1_000) >= 10 * MAX_PENDING


def test_a_burst_of_a_thousand_agents_is_kept_whole(settings: Settings) -> None:
    fleet = HollowFleet(settings, HollowConfig(count=1_000, rpc_port=0))
    agents = list(fleet.agents)
    burst = 5 * MAX_PENDING  # 50,000 events: 10,000 kernels, five events each
    for i in range(burst):
        fleet.outbox.emit(
            KernelPulling(agent_id=agents[i % len(agents)], kernel_id=f"k{i}", session_id=f"s{i}")
        )
    assert len(fleet.outbox) == burst
    assert (fleet.outbox.dropped_events, fleet.outbox.dropped_heartbeats) == (0, 0)
