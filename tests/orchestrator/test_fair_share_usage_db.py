"""The fair-share view read from real PostgreSQL (`state.fair_share_usage`): a session's interval
runs from its history row to RUNNING to its `terminated_at` (now while live), it holds
resources x cluster_size, sessions that never ran or ended beyond the horizon do not count, the
capacity is the counted agents', the weights are the projects' and domains'; the placement
snapshot carries the view only for `fair_share` groups given the settings (not in a dry run), and
a view is reused for a moment."""

from __future__ import annotations

import datetime as dt
import math
import uuid

import pytest
from sqlalchemy import insert, update
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.fair_share import LN2, FairShareConfig
from sokovan.common.types import AgentStatus, KernelStatus, SessionStatus
from sokovan.db.models import Keypair, Project, ScalingGroup, Session, SessionSchedulingHistory, User
from sokovan.orchestrator.provisioner.loader import load_snapshots
from sokovan.state.fair_share_usage import FairShareUsage, read_fair_share
from sokovan.state.session_reads import fetch_sessions
from tests.orchestrator.db_seed import Seed, session_row

HOUR = FairShareConfig(half_life_hours=1, weights={"cpu": 1})
H = 3600.0


class Cluster:
    """alice (project default) ran; bob (project p2, weight 3) only waits."""

    def __init__(self, seed: Seed, now: dt.datetime) -> None:
        self.seed = seed
        self.now = now
        self.bob = uuid.uuid4()
        self.p2 = uuid.uuid4()

    def ago(self, hours: float) -> dt.datetime:
        return self.now - dt.timedelta(hours=hours)

    async def ran(
        self, cpu: int, size: int, status: SessionStatus, started: float, ended: float | None
    ) -> None:
        sid = await self.seed.session(
            cpu=cpu,
            size=size,
            status=status,
            kernel_status=KernelStatus(status.value),
            agent_id="a1",
            terminated_at=None if ended is None else self.ago(ended),
        )
        async with self.seed.engine.begin() as conn:
            await conn.execute(
                insert(SessionSchedulingHistory).values(
                    session_id=sid,
                    handler="promote_to_running",
                    result="success",
                    from_status="CREATING",
                    to_status="RUNNING",
                    created_at=self.ago(started),
                )
            )

    async def bob_waits(self) -> None:
        async with self.seed.engine.begin() as conn:
            await conn.execute(insert(Project).values(id=self.p2, name="p2", domain_name="default"))
            await conn.execute(update(Project).where(Project.id == self.p2).values(fair_share_weight=3.0))
            await conn.execute(insert(User).values(id=self.bob, name="bob", domain_name="default"))
            await conn.execute(
                insert(Keypair).values(
                    access_key="AK2", token_hash="h2", user_id=self.bob, project_id=self.p2, role="user"
                )
            )
            await conn.execute(
                insert(Session).values(
                    session_row(
                        name="bob-waits",
                        access_key="AK2",
                        user_id=self.bob,
                        project_id=self.p2,
                        type="batch",
                        command="true",
                        resources={"cpu": "1"},
                        status=SessionStatus.PENDING.value,
                    )
                )
            )


@pytest.fixture
async def cluster(engine: AsyncEngine) -> Cluster:
    seed = await Seed(engine).tenancy()
    await seed.agent("a1", cpu=8)
    await seed.agent("gone", cpu=8, status=AgentStatus.DOWN)  # its capacity does not count
    c = Cluster(seed, dt.datetime.now(dt.UTC).replace(microsecond=0))
    await c.ran(2, 1, SessionStatus.TERMINATED, started=2, ended=1)  # 2 x (1/2 - 1/4)
    await c.ran(1, 2, SessionStatus.RUNNING, started=1, ended=None)  # 2 x (1 - 1/2)
    await c.ran(1000, 1, SessionStatus.TERMINATED, started=120, ended=20)  # beyond ten half-lives
    await seed.session(cpu=4, status=SessionStatus.CANCELLED)  # never ran
    await c.bob_waits()
    return c


async def test_the_view_holds_each_levels_decayed_usage_share_and_factor(
    engine: AsyncEngine, cluster: Cluster
) -> None:
    async with engine.connect() as conn:
        read = await read_fair_share(conn, HOUR, cluster.now)
    project, p2 = str(cluster.seed.project_id), str(cluster.p2)
    alice, bob = str(cluster.seed.user_id), str(cluster.bob)
    shares = read.view.shares
    assert set(shares) == {
        ("default",),
        ("default", project),
        ("default", project, alice),
        ("default", p2),
        ("default", p2, bob),
    }
    # (2 x 1/4 + 2 x 1/2) x h/ln2 over 8 cpus x h/ln2
    usage = 1.5 / 8
    assert shares[("default", project, alice)].usage == pytest.approx(usage, rel=1e-9)
    assert shares[("default", project)].usage == pytest.approx(usage, rel=1e-9)
    assert shares[("default",)].usage == pytest.approx(usage, rel=1e-9)
    assert shares[("default", p2, bob)].usage == 0.0
    assert shares[("default", project)].share == pytest.approx(0.25)  # weights 1 and 3
    assert shares[("default", p2)].share == pytest.approx(0.75)
    assert shares[("default", project)].factor == pytest.approx(math.pow(2, -usage / 0.25), rel=1e-9)
    assert read.view.factors("default", p2, bob) == (
        pytest.approx(math.pow(2, -usage)),
        1.0,
        1.0,
    )
    assert read.named(("default", project, alice)) == ["default", "default", "alice"]
    assert read.named(("default", p2, bob)) == ["default", "p2", "bob"]
    assert HOUR.half_life_seconds / LN2 == pytest.approx(H / LN2)


async def test_the_snapshot_carries_the_view_only_for_fair_share_groups(
    engine: AsyncEngine, cluster: Cluster
) -> None:
    async with engine.connect() as conn:
        pending = await fetch_sessions(conn, frozenset({SessionStatus.PENDING}))
        fifo = (await load_snapshots(conn, pending, now=cluster.now, fair_share=HOUR))["default"]
    assert fifo.fair_share is None
    async with engine.begin() as conn:
        await conn.execute(update(ScalingGroup).values(scheduler="fair_share"))
    async with engine.connect() as conn:
        snap = (await load_snapshots(conn, pending, now=cluster.now, fair_share=HOUR))["default"]
        dry = (await load_snapshots(conn, pending, now=cluster.now))["default"]  # as a dry run
    assert dry.fair_share is None
    assert snap.fair_share is not None
    alice = ("default", str(cluster.seed.project_id), str(cluster.seed.user_id))
    assert snap.fair_share.factor(*alice) == pytest.approx(math.pow(2, -1.5 / 8 / 1.0), rel=1e-6)


async def test_a_view_is_reused_for_a_moment_and_read_again_after_or_when_the_settings_change(
    engine: AsyncEngine, cluster: Cluster
) -> None:
    usage = FairShareUsage()
    async with engine.connect() as conn:
        first = await usage.read(conn, HOUR, cluster.now)
        assert await usage.read(conn, HOUR, cluster.now + dt.timedelta(seconds=1)) is first
        later = await usage.read(conn, HOUR, cluster.now + dt.timedelta(seconds=6))
        assert later is not first and later.now > first.now
        other = FairShareConfig(half_life_hours=2, weights={"cpu": 1})
        assert (await usage.read(conn, other, later.now)).config == other
        # a short half-life is never outrun by the cache: a hundredth of it at most
        short = FairShareConfig(half_life_hours=1 / 3600)
        again = await usage.read(conn, short, later.now)
        assert await usage.read(conn, short, later.now + dt.timedelta(seconds=0.05)) is not again
