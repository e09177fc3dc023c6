"""Alembic environment: async engine, URL from SOKOVAN_DB_URL (or the -x db_url=… option)."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from sokovan.common.settings import load_settings
from sokovan.db.models import Base

target_metadata = Base.metadata


def _url() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("db_url")
    configured = context.config.attributes.get("db_url")
    return str(explicit or configured or load_settings().db_url)


def _run(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async() -> None:
    engine = create_async_engine(_url())
    async with engine.connect() as conn:
        await conn.run_sync(_run)
    await engine.dispose()


if context.is_offline_mode():
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_async())
