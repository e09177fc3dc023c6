"""`sokovan admin bootstrap --if-needed`: safe on every start (docker-compose runs it each time)."""

from __future__ import annotations

import asyncio
import re

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.cli.admin_cmd import run_bootstrap
from sokovan.common.settings import Settings
from sokovan.db.models import Keypair
from sokovan.manager.repositories.tenancy import resolve_token
from tests.cli.conftest import run_cli


async def _keypairs(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(Keypair))).scalar_one())


async def test_first_start_makes_the_keypair_and_later_starts_do_not(
    engine: AsyncEngine, service_env: dict[str, str]
) -> None:
    first = await run_cli("admin", "bootstrap", "--if-needed", "--json", env=service_env)
    assert first.code == 0, first.err
    made = first.json()
    assert set(made) == {"access_key", "token", "secret_key"} and made["token"]
    assert re.fullmatch(r"[A-Za-z0-9]{40}", made["secret_key"])
    async with engine.connect() as conn:
        principal = await resolve_token(conn, made["token"])
    assert principal is not None and principal.is_admin and principal.user_name == "admin"

    again = await run_cli("admin", "bootstrap", "--if-needed", "--json", env=service_env)
    assert again.code == 0, again.err
    assert again.json() == {"access_key": made["access_key"], "token": None, "secret_key": None}
    human = await run_cli("admin", "bootstrap", "--if-needed", env=service_env)
    assert human.code == 0, human.err
    assert human.out.startswith(f"already bootstrapped: admin keypair {made['access_key']} exists")
    assert "token:" not in human.out
    assert await _keypairs(engine) == 1


async def test_a_plain_bootstrap_still_makes_a_new_keypair_each_time(
    engine: AsyncEngine, service_env: dict[str, str]
) -> None:
    await run_cli("admin", "bootstrap", "--if-needed", "--json", env=service_env)
    plain = await run_cli("admin", "bootstrap", "--json", env=service_env)
    assert plain.code == 0, plain.err
    assert plain.json()["token"]
    assert await _keypairs(engine) == 2
    found = (await run_cli("admin", "bootstrap", "--if-needed", "--json", env=service_env)).json()
    assert found["token"] is None
    assert await _keypairs(engine) == 2


async def test_racing_starts_make_one_keypair(engine: AsyncEngine, settings: Settings) -> None:
    # In one process, so the five really interleave between their check and their commit.
    outcomes = await asyncio.gather(*(run_bootstrap(settings.db_url, if_needed=True) for _ in range(5)))
    assert sum(1 for o in outcomes if o.token is not None) == 1
    assert len({o.access_key for o in outcomes}) == 1
    assert await _keypairs(engine) == 1


async def test_if_needed_without_a_database_is_a_message(service_env: dict[str, str]) -> None:
    env = {**service_env, "SOKOVAN_DB_URL": "postgresql+asyncpg://postgres@127.0.0.1:1/nothing"}
    res = await run_cli("admin", "bootstrap", "--if-needed", env=env)
    assert res.code == 1
    assert res.err.startswith("Error: bootstrap failed") and "Traceback" not in res.err
