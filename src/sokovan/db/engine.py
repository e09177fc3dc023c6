"""Engine and session factory for the manager's PostgreSQL."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine


def make_engine(url: str, *, pool_size: int = 10, max_overflow: int = 10) -> AsyncEngine:
    # No pre-ping: it costs a round trip per checkout on the hot path; connections are recycled
    # instead, and a broken one surfaces as an error that the caller's retry or the next cycle absorbs.
    return create_async_engine(url, pool_size=pool_size, max_overflow=max_overflow, pool_recycle=1800)
