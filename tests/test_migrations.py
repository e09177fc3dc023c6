"""The migrations produce exactly the models, and they go down and up again cleanly."""

from __future__ import annotations

import asyncio

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.db import migrate
from sokovan.db.models import Base
from tests import services


def _diff(url: str) -> list[object]:
    def compare(conn: Connection) -> list[object]:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(ctx, Base.metadata))

    async def run() -> list[object]:
        engine = create_async_engine(url)
        async with engine.connect() as conn:
            diff = await conn.run_sync(compare)
        await engine.dispose()
        return diff

    return asyncio.run(run())


def _tables(url: str) -> set[str]:
    async def run() -> set[str]:
        engine = create_async_engine(url)
        async with engine.connect() as conn:
            names = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        await engine.dispose()
        return names

    return asyncio.run(run())


def test_upgrade_downgrade_upgrade_matches_models() -> None:
    admin = services.admin_db_url()
    name = "sokovan_migration_roundtrip"
    url = f"{admin.rpartition('/')[0]}/{name}"

    async def recreate() -> None:
        engine = create_async_engine(admin, isolation_level="AUTOCOMMIT")
        async with engine.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        await engine.dispose()

    asyncio.run(recreate())
    migrate.upgrade(url)
    assert _diff(url) == []
    migrate.downgrade(url, "base")
    assert _tables(url) <= {"alembic_version"}
    migrate.upgrade(url)
    assert _diff(url) == []
    assert set(Base.metadata.tables) <= _tables(url)
