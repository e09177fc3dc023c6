"""`sokovan admin bootstrap`: the default tenancy and a fresh admin keypair, straight in PostgreSQL.

`--if-needed` makes it safe to run on every start (a container's entrypoint, a unit's
ExecStartPre): when the admin user already has an active admin keypair it says "already
bootstrapped" and exits 0 without making another; starts that race are serialised by a PostgreSQL
advisory lock, so however many run at once, one keypair is made.

A new keypair gets a secret key too (Backend.AI's client signs requests with it), printed once
beside the token and stored sealed under the cluster secret; without SOKOVAN_CLUSTER_SECRET it
gets none (JSON: `"secret_key": null`) until `POST /v2/keypairs/{access_key}/secret` makes one.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import click
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.cli.common import config_option, load_or_exit
from sokovan.common.secret_box import new_secret_key, seal
from sokovan.common.types import Role
from sokovan.db.engine import make_engine
from sokovan.db.models import Keypair, User
from sokovan.manager.repositories.tenancy import ADMIN_USER
from sokovan.manager.repositories.tenancy import bootstrap as bootstrap_tenancy
from sokovan.orchestrator.locks import lock_key

BOOTSTRAP_LOCK = lock_key("admin.bootstrap")


@dataclass(frozen=True)
class Outcome:
    """The admin keypair bootstrap made (with its token and secret key) or found (token None:
    shown when made)."""

    access_key: str
    token: str | None
    secret_key: str | None = None


@click.group()
def admin() -> None:
    """Administration commands that work on the database directly."""


async def existing_admin_key(conn: AsyncConnection) -> str | None:
    """The oldest active admin keypair of the bootstrap's admin user, if there is one."""
    found = await conn.execute(
        select(Keypair.access_key)
        .join(User, User.id == Keypair.user_id)
        .where(User.name == ADMIN_USER, Keypair.role == Role.ADMIN.value, Keypair.is_active)
        .order_by(Keypair.created_at, Keypair.access_key)
        .limit(1)
    )
    return found.scalar_one_or_none()


async def _bootstrap(engine: AsyncEngine, cluster_secret: str | None) -> Outcome:
    """A new admin keypair, with a secret key when there is a cluster secret to seal it with."""
    if not cluster_secret:
        return Outcome(*await bootstrap_tenancy(engine))
    secret_key = new_secret_key()
    access_key, token = await bootstrap_tenancy(engine, seal(secret_key, cluster_secret))
    return Outcome(access_key, token, secret_key)


async def _bootstrap_once(engine: AsyncEngine, cluster_secret: str | None) -> Outcome:
    # The lock lives in this transaction; the bootstrap itself commits on a second connection
    # before the lock is released, so a start waiting on the lock then finds its keypair.
    async with engine.begin() as guard:
        await guard.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": BOOTSTRAP_LOCK})
        access_key = await existing_admin_key(guard)
        if access_key is not None:
            return Outcome(access_key, None)
        return await _bootstrap(engine, cluster_secret)


async def run_bootstrap(db_url: str, if_needed: bool, cluster_secret: str | None = None) -> Outcome:
    engine = make_engine(db_url, pool_size=2, max_overflow=0)
    try:
        if if_needed:
            return await _bootstrap_once(engine, cluster_secret)
        return await _bootstrap(engine, cluster_secret)
    finally:
        await engine.dispose()


@admin.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print only {"access_key": ..., "token": ..., "secret_key": ...}.',
)
@click.option(
    "--if-needed",
    is_flag=True,
    help="When an admin keypair exists already, make none: say 'already bootstrapped' (JSON: "
    '"token": null) and exit 0. For start-up scripts that run on every start.',
)
@config_option
def bootstrap(as_json: bool, if_needed: bool, config: str | None) -> None:
    """Create the default domain, project, scaling group and admin user if missing, and a NEW
    admin keypair (tokens are stored hashed, so an earlier one cannot be shown again)."""
    settings = load_or_exit(config)
    try:
        outcome = asyncio.run(run_bootstrap(settings.db_url, if_needed, settings.cluster_secret))
    except Exception as exc:  # a CLI prints a message, never a stack trace
        raise click.ClickException(
            f"bootstrap failed ({type(exc).__name__}): {str(exc).splitlines()[0] if str(exc) else exc!r}\n"
            "Is PostgreSQL reachable at SOKOVAN_DB_URL, and has `sokovan db upgrade` been run?"
        ) from exc
    if as_json:
        click.echo(
            json.dumps(
                {"access_key": outcome.access_key, "token": outcome.token, "secret_key": outcome.secret_key}
            )
        )
    elif outcome.token is None:
        click.echo(
            f"already bootstrapped: admin keypair {outcome.access_key} exists (its token was shown "
            "when it was made; `sokovan admin bootstrap` without --if-needed makes another)."
        )
    else:
        click.echo(f"access key: {outcome.access_key}")
        click.echo(f"token:      {outcome.token}")
        if outcome.secret_key is not None:
            click.echo(f"secret key: {outcome.secret_key}")
            click.echo(
                "Keep both: they are shown only once. Use the token as SOKOVAN_TOKEN; the access and "
                "secret keys as BACKEND_ACCESS_KEY and BACKEND_SECRET_KEY for Backend.AI's client."
            )
        else:
            click.echo("Keep the token: it is shown only once. Use it as SOKOVAN_TOKEN.")
            click.echo("(no secret key: SOKOVAN_CLUSTER_SECRET is not set to seal one with)")
