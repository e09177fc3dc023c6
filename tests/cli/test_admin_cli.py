"""`sokovan admin bootstrap` as a subprocess."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.manager.repositories.tenancy import resolve_token
from tests.cli.conftest import run_cli


async def test_bootstrap_json_prints_a_working_token(
    engine: AsyncEngine, service_env: dict[str, str]
) -> None:
    first = await run_cli("admin", "bootstrap", "--json", env=service_env)
    assert first.code == 0, first.err
    body = first.json()
    assert set(body) == {"access_key", "token", "secret_key"}  # the secret: for signed requests
    if service_env.get("SOKOVAN_CLUSTER_SECRET"):  # sealed with it; without one there is none
        assert len(body["secret_key"]) == 40
    second = (await run_cli("admin", "bootstrap", "--json", env=service_env)).json()
    assert second["token"] != body["token"]
    async with engine.connect() as conn:
        for creds in (body, second):
            principal = await resolve_token(conn, creds["token"])
            assert principal is not None
            assert (principal.access_key, principal.user_name, principal.is_admin) == (
                creds["access_key"],
                "admin",
                True,
            )


async def test_bootstrap_human_output(engine: AsyncEngine, service_env: dict[str, str]) -> None:
    res = await run_cli("admin", "bootstrap", env=service_env)
    assert res.code == 0, res.err
    assert "token:" in res.out and "access key:" in res.out


async def test_bootstrap_without_database_is_a_message(service_env: dict[str, str]) -> None:
    env = {**service_env, "SOKOVAN_DB_URL": "postgresql+asyncpg://postgres@127.0.0.1:1/nothing"}
    res = await run_cli("admin", "bootstrap", "--json", env=env)
    assert res.code == 1
    assert res.err.startswith("Error: bootstrap failed")
    assert "Traceback" not in res.err and res.out == ""
