"""A stop is never held up by a background task that does not end when cancelled (`AgentLink.close`):
such a task is logged and left behind."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from sokovan.agent import runtime
from sokovan.agent.runtime import AgentLink
from sokovan.common.settings import Settings


async def test_a_task_that_ignores_its_cancellation_does_not_hold_the_stop(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "CLOSE_TIMEOUT", 0.5)
    link = AgentLink(settings, frozenset())
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # as a client library's close that waits on its peer would

    async def obliging() -> None:
        await asyncio.Event().wait()

    kept = link.spawn(stubborn(), name="stubborn")
    ended = link.spawn(obliging(), name="obliging")
    await link.redis.ping()
    with structlog.testing.capture_logs() as logs:
        await asyncio.wait_for(link.close(), 10)
    try:
        assert ended.cancelled()
        assert not kept.done()
        left = [e for e in logs if e["event"] == "agent.tasks_left_at_stop"]
        assert left and left[0]["tasks"] == ["stubborn"], logs
    finally:
        release.set()
        await kept
