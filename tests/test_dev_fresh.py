"""`sokovan dev --fresh` (`make dev-reset`): the dev database dropped and created again, empty and
migrated, the agents' work directories (their state files) and the cluster's Redis keys gone; an
ordinary start keeps everything."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.db.models import Keypair
from sokovan.devenv import reset_state
from sokovan.harness import count_agents, prepare_database
from sokovan.manager.repositories.tenancy import bootstrap
from tests import services
from tests.api.conftest import add_agent


@pytest.fixture
async def dev_db() -> AsyncIterator[str]:
    admin_url = services.admin_db_url()
    url = f"{admin_url.rpartition('/')[0]}/sokovan_test_dev_{uuid.uuid4().hex[:8]}"
    await prepare_database(url)
    yield url
    admin = create_async_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)'))
    finally:
        await admin.dispose()


async def test_fresh_empties_the_database_and_the_agents_state(dev_db: str, tmp_path: Path) -> None:
    engine = create_async_engine(dev_db)
    agent_dir = tmp_path / "dev-agent-1"
    (agent_dir / "kernel-1").mkdir(parents=True)
    (agent_dir / "agent-state.json").write_text("{}")
    other = tmp_path / "kept"
    other.mkdir()
    try:
        await bootstrap(engine)  # an admin keypair and the default scaling group
        await add_agent(engine, "dev-agent-1")
        await prepare_database(dev_db)  # an ordinary start keeps what is there
        assert await count_agents(engine) == 1
        await engine.dispose()  # (the drop would end its connections anyway)

        prefix = f"sokovan-test-dev-{uuid.uuid4().hex[:8]}"
        redis = aioredis.Redis.from_url(services.redis_url())
        await redis.set(f"{prefix}:events", "an earlier run's")
        await redis.set(f"{prefix}:routing:table", "an earlier run's")
        await redis.set(f"{prefix}-other:events", "another cluster's")

        await reset_state(
            dev_db, [agent_dir, tmp_path / "never-made"], redis_url=services.redis_url(), prefix=prefix
        )

        assert await redis.exists(f"{prefix}:events", f"{prefix}:routing:table") == 0
        assert await redis.get(f"{prefix}-other:events") == b"another cluster's"
        await redis.delete(f"{prefix}-other:events")
        await redis.aclose()

        assert await count_agents(engine) == 0
        async with engine.connect() as conn:  # migrated to head again, and empty
            assert await conn.scalar(text("SELECT count(*) FROM alembic_version")) == 1
            assert await conn.scalar(select(func.count()).select_from(Keypair)) == 0
        assert not agent_dir.exists() and other.exists()
    finally:
        await engine.dispose()
