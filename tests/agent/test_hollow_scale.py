"""A smoke test at scale: a thousand hollow agents and two thousand timer kernels.

Only generous timeouts, no performance assertions: it shows that registration, routing and
timers do not fall over at the size the benchmarks use.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from sokovan.common.events import AgentHeartbeat, KernelTerminated
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, FleetFactory, spec

AGENTS = 1_000
KERNELS_PER_AGENT = 2


async def test_thousand_agents_register_and_run_two_thousand_kernels(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(AGENTS, heartbeat_interval=5.0)
    events = AgentEvents(redis, settings, None)
    registered: set[str] = set()
    ours = set(fleet.agents)  # the streams also hold the beats of agents that earlier tests ran

    def all_registered(event: object) -> bool:  # called on every event seen, so one at a time
        if isinstance(event, AgentHeartbeat) and event.seq == 1 and event.agent_id in ours:
            registered.add(event.agent_id)
        return len(registered) == AGENTS

    await events.wait_for(all_registered, within=30)
    assert registered == set(fleet.agents)

    kernels = {agent_id: [spec("sleep 0.5") for _ in range(KERNELS_PER_AGENT)] for agent_id in fleet.agents}
    semaphore = asyncio.Semaphore(50)

    async def create(agent_id: str) -> None:
        async with semaphore:
            await client.create_kernels(fleet.rpc_addr, kernels[agent_id], agent_id=agent_id)

    await asyncio.gather(*(create(agent_id) for agent_id in kernels))
    expected = {k.kernel_id: agent_id for agent_id, ks in kernels.items() for k in ks}
    ended: dict[str, KernelTerminated] = {}

    def all_ended(event: object) -> bool:
        if isinstance(event, KernelTerminated) and event.kernel_id in expected:
            ended[event.kernel_id] = event
        return len(ended) == len(expected)

    await events.wait_for(all_ended, within=60)
    assert all((e.exit_code, e.reason) == (0, "exited") for e in ended.values())
    assert all(e.agent_id == expected[kernel_id] for kernel_id, e in ended.items())
    assert fleet.running_kernels() == 0
