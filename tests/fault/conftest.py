"""Fault tests start the real daemons; each cluster starts from empty tables, no leftover Redis
streams, and fast self-healing timings in etcd (removed again afterwards)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from sokovan.common.settings import Settings
from sokovan.harness import bootstrap_admin
from tests.fault.harness import clear_timings, reset_cluster_state


@pytest.fixture
def fresh_cluster_state(settings: Settings, service_env: dict[str, str]) -> Iterator[str]:
    """Reset the shared services for a new cluster; yields the admin token."""
    asyncio.run(reset_cluster_state(settings))
    try:
        yield bootstrap_admin(service_env)
    finally:
        asyncio.run(clear_timings(settings))
