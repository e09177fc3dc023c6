"""The retry engine against real PostgreSQL: decisions, durable dispatch, one child only."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.metrics import RETRY_SUCCEEDED
from sokovan.common.retry_policy import RetryPolicy
from sokovan.common.types import KernelStatus, SessionStatus
from sokovan.config.cluster import ClusterConfig
from sokovan.db.models import Kernel, Project, Session
from sokovan.orchestrator.retry.engine import RetryCoordinator
from tests.orchestrator.db_seed import Seed, read_one

FAST = {"max_retries": 2, "retry_delay": 0.05, "jitter": "none"}


async def failed(seed: Seed, cause: str = "KERNEL_NONZERO_EXIT", **extra: Any) -> uuid.UUID:
    status = extra.pop("status", SessionStatus.ERROR)
    sid = await seed.session(status=status, kernel_status=KernelStatus.ERROR, **extra)
    async with seed.engine.begin() as conn:
        await conn.execute(
            update(Session).where(Session.id == sid).values(result="FAILURE", status_info={"cause": cause})
        )
    return sid


async def row(engine: AsyncEngine, sid: uuid.UUID) -> Any:
    return await read_one(engine, select(Session).where(Session.id == sid))


async def children(engine: AsyncEngine, parent: uuid.UUID) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(Session).where(Session.parent_session_id == parent))).all())


async def test_a_failed_batch_session_gets_exactly_one_child_when_due(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    parent = await failed(seed, retry_policy=FAST)
    engines = [RetryCoordinator(engine, ClusterConfig()) for _ in range(2)]
    await engines[0].decide()
    decision = (await row(engine, parent)).status_info["retry"]
    assert decision["decision"] == "scheduled" and decision["attempt"] == 2
    await asyncio.sleep(0.1)
    await asyncio.gather(*(e.dispatch() for e in engines))  # two managers at once
    (child,) = await children(engine, parent)
    assert (child.status, child.retry_count, child.max_retries, child.retry_cause) == (
        "PENDING",
        1,
        2,
        "KERNEL_NONZERO_EXIT",
    )
    assert child.creation_id == f"{parent}:retry:1"
    async with engine.connect() as conn:
        kernels = (
            (await conn.execute(select(Kernel.status).where(Kernel.session_id == child.id))).scalars().all()
        )
    assert kernels == ["PENDING"]
    assert (await row(engine, parent)).status_info["retry"]["child"] == str(child.id)
    await engines[1].cycle()
    assert len(await children(engine, parent)) == 1


async def test_exhausted_ineligible_and_the_kill_switch(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    last = await failed(seed, retry_policy=FAST, retry_count=2)
    dependency = await failed(
        seed, cause="DEPENDENCY_FAILED", retry_policy=FAST, status=SessionStatus.CANCELLED
    )
    interactive = await seed.session(
        status=SessionStatus.ERROR, kernel_status=KernelStatus.ERROR, retry_policy=FAST
    )
    async with engine.begin() as conn:
        await conn.execute(update(Session).where(Session.id == interactive).values(type="interactive"))
    await RetryCoordinator(engine, ClusterConfig()).decide()
    assert (await row(engine, last)).status_info["retry"]["decision"] == "exhausted"
    assert (await row(engine, dependency)).status_info["retry"]["decision"] == "ineligible"
    assert (await row(engine, interactive)).status_info["retry"]["decision"] == "ineligible"
    off = ClusterConfig()
    off.retry_enabled = False
    stopped = await failed(seed, retry_policy=FAST)
    await RetryCoordinator(engine, off).decide()
    assert (await row(engine, stopped)).status_info["retry"]["reason"] == "retries are disabled cluster-wide"


async def test_defaults_apply_session_then_project_then_cluster(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    config = ClusterConfig()
    config.retry_policy_default = RetryPolicy.model_validate({"max_retries": 1, "retry_delay": 0.05})
    by_cluster = await failed(seed)
    await RetryCoordinator(engine, config).decide()
    assert (await row(engine, by_cluster)).max_retries == 1
    async with engine.begin() as conn:
        await conn.execute(update(Project).values(retry_policy_default={"max_retries": 0}))
    by_project = await failed(seed)  # the project says 0: no retry, whatever the cluster says
    by_session = await failed(seed, retry_policy={"max_retries": 3, "retry_delay": 0.05})
    await RetryCoordinator(engine, config).decide()
    assert (await row(engine, by_project)).status_info["retry"]["decision"] == "exhausted"
    assert (await row(engine, by_session)).status_info["retry"]["decision"] == "scheduled"
    assert (await row(engine, by_session)).max_retries == 3


async def test_a_retried_session_that_succeeds_is_counted_once(engine: AsyncEngine) -> None:
    seed = await Seed(engine).tenancy()
    await seed.session(status=SessionStatus.TERMINATED, kernel_status=KernelStatus.TERMINATED, retry_count=1)
    async with engine.begin() as conn:
        await conn.execute(update(Session).values(result="SUCCESS"))
    before = RETRY_SUCCEEDED._value.get()
    retry = RetryCoordinator(engine, ClusterConfig())
    assert await retry.count_successes() == 1
    assert await retry.count_successes() == 0
    assert RETRY_SUCCEEDED._value.get() == before + 1
