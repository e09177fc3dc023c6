"""An RPC call's answer carries the kernel events the call emitted (`agent.answers`), and the same
events still go out on the bus, in their order: with a real agent and with a hollow fleet."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from sokovan.agent import answers
from sokovan.agent.daemon import AgentDaemon
from sokovan.common.events import AgentStopping, KernelPrepared
from sokovan.common.rpc import AgentRPCClient
from sokovan.common.settings import Settings
from tests.agent.conftest import AgentEvents, FleetFactory, spec


def names(raw: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(e["name"], e["kernel_id"]) for e in raw]


async def test_a_real_agents_answers_carry_the_events_the_bus_carries_too(
    agent: AgentDaemon, events: AgentEvents, client: AgentRPCClient
) -> None:
    kernel, missing = spec(None), spec(None, image="no-such-image")
    pulled = await client.check_and_pull(agent.rpc_addr, [kernel, missing])
    assert names(pulled.events) == [
        ("kernel.pulling", kernel.kernel_id),
        ("kernel.prepared", kernel.kernel_id),
        ("kernel.pulling", missing.kernel_id),
        ("kernel.image_pull_failed", missing.kernel_id),
    ]
    assert {e["agent_id"] for e in pulled.events} == {agent.agent_id}
    started = await client.create_kernels(agent.rpc_addr, [kernel])
    assert names(started.events) == [("kernel.running", kernel.kernel_id)]
    # The bus carries the same events, in the same order.
    await events.wait_kernel("kernel.running", kernel.kernel_id)
    assert events.of_kernel(kernel.kernel_id) == ["kernel.pulling", "kernel.prepared", "kernel.running"]
    # A call that emits nothing answers as before: no `events` key at all.
    raw = await client.call(agent.rpc_addr, "destroy_kernels", _destroy(kernel.kernel_id))
    assert raw == {"accepted": [kernel.kernel_id]}


async def test_a_hollow_fleets_answers_leave_out_what_the_call_did_not_emit_in_time(
    fleet_factory: FleetFactory, redis: aioredis.Redis, settings: Settings, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2, pull_delay=0.3)
    bus = AgentEvents(redis, settings, None)
    kernel = spec("sleep 30")
    pulled = await client.check_and_pull(fleet.rpc_addr, [kernel], agent_id="hollow-0001")
    # The delayed pull's KernelPrepared is emitted after the answer went: the bus alone has it.
    assert names(pulled.events) == [("kernel.pulling", kernel.kernel_id)]
    prepared = await bus.wait_kernel("kernel.prepared", kernel.kernel_id)
    assert prepared.agent_id == "hollow-0001"
    started = await client.create_kernels(fleet.rpc_addr, [kernel], agent_id="hollow-0001")
    assert names(started.events) == [("kernel.running", kernel.kernel_id)]
    assert started.events[0]["agent_id"] == "hollow-0001"


async def test_events_are_collected_only_from_the_call_and_only_while_it_answers() -> None:
    event = KernelPrepared(agent_id="a", kernel_id="k", session_id="s")
    answers.note(event)  # no call runs: nothing collects it
    with answers.answering() as answer:
        answers.note(event)
        answers.note(AgentStopping(agent_id="a", boot_id="b"))  # not a kernel event
        await asyncio.create_task(_note_later(event))  # a task the call started shares its answer
        asyncio.get_running_loop().call_later(0.05, answers.note, event)  # fires after the answer went
    answers.note(event)
    await asyncio.sleep(0.1)
    assert len(answer.events) == 2 and not answer.open
    with answers.answering() as other:
        answers.note(event)
    assert len(other.events) == 1 and len(answer.events) == 2


async def _note_later(event: KernelPrepared) -> None:
    answers.note(event)


def _destroy(kernel_id: str) -> object:
    from sokovan.common.rpc import DestroyKernelsRequest

    return DestroyKernelsRequest(kernel_ids=[kernel_id], forced=True)
