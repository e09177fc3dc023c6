"""Domains, projects, users and keypairs: bootstrap, keypair creation, token resolution and
secret keys.

Tokens are stored only as their SHA-256 hex digest, so a token is shown once, when it is made. A
keypair's secret key (Backend.AI's request signatures) is stored sealed under the cluster secret
(`common.secret_box`); callers seal it, this module stores and reads the sealed form only.
"""

from __future__ import annotations

import hashlib
import secrets
import string
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Row, Select, bindparam, func, insert, select, true, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.orm import InstrumentedAttribute

from sokovan.common.types import Role, SessionStatus
from sokovan.db.models import (
    AuditLog,
    Domain,
    Keypair,
    KeypairResourcePolicy,
    Project,
    ScalingGroup,
    Session,
    User,
)
from sokovan.state.quota import Quota, quota_of

DEFAULT_DOMAIN = "default"
DEFAULT_PROJECT = "default"
DEFAULT_SCALING_GROUP = "default"
ADMIN_USER = "admin"

_ACCESS_KEY_ALPHABET = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class Principal:
    """Who is calling: the keypair a token resolved to, with its user, project and domain."""

    access_key: str
    user_id: uuid.UUID
    user_name: str
    project_id: uuid.UUID
    domain_name: str
    role: Role
    project_name: str = ""

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN

    def may_see(self, owner: InstrumentedAttribute[uuid.UUID]) -> ColumnElement[bool]:
        """The rows this caller may see, by their `owner` (user id) column: an admin all, a user its own."""
        return true() if self.is_admin else owner == self.user_id


class TenancyError(ValueError):
    """A keypair request names something that does not exist or does not fit."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_access_key() -> str:
    return "AK" + "".join(secrets.choice(_ACCESS_KEY_ALPHABET) for _ in range(18))


def new_token() -> str:
    return secrets.token_urlsafe(32)


async def resolve_token(conn: AsyncConnection, token: str) -> Principal | None:
    """The active keypair a token belongs to, or None."""
    return await _principal(conn, Keypair.token_hash == hash_token(token))


async def principal_of(conn: AsyncConnection, access_key: str) -> Principal | None:
    """The active keypair `access_key` (e.g. a deployment's owner, acting through its replicas)."""
    return await _principal(conn, Keypair.access_key == access_key)


async def signer_of(conn: AsyncConnection, access_key: str) -> tuple[Principal, str | None] | None:
    """The active keypair `access_key` and its sealed secret key (None: it has none yet), or None:
    what a signed request resolves to."""
    row = (
        await conn.execute(
            _principal_query(Keypair.access_key == access_key).add_columns(Keypair.secret_key_enc)
        )
    ).first()
    if row is None:
        return None
    return _principal_of_row(row), row.secret_key_enc


_PRINCIPAL_COLUMNS: tuple[Any, ...] = (
    Keypair.access_key,
    Keypair.role,
    Keypair.project_id,
    User.id.label("user_id"),
    User.name.label("user_name"),
    Project.domain_name,
    Project.name.label("project_name"),
)


def _principal_query(which: ColumnElement[bool]) -> Select[Any]:
    return (
        select(*_PRINCIPAL_COLUMNS)
        .join(User, User.id == Keypair.user_id)
        .join(Project, Project.id == Keypair.project_id)
        .where(which, Keypair.is_active.is_(True))
    )


async def _principal(conn: AsyncConnection, which: ColumnElement[bool]) -> Principal | None:
    row = (await conn.execute(_principal_query(which))).first()
    return None if row is None else _principal_of_row(row)


def _principal_of_row(row: Row[Any]) -> Principal:
    return Principal(
        access_key=row.access_key,
        user_id=row.user_id,
        user_name=row.user_name,
        project_id=row.project_id,
        domain_name=row.domain_name,
        role=Role(row.role),
        project_name=row.project_name,
    )


async def _ensure_user(conn: AsyncConnection, name: str, domain: str) -> uuid.UUID:
    await conn.execute(
        pg_insert(User).values(id=uuid.uuid4(), name=name, domain_name=domain).on_conflict_do_nothing()
    )
    row = (await conn.execute(select(User.id, User.domain_name).where(User.name == name))).one()
    if row.domain_name != domain:
        raise TenancyError(f"user {name!r} belongs to domain {row.domain_name!r}, not {domain!r}")
    user_id: uuid.UUID = row.id
    return user_id


async def _ensure_project(conn: AsyncConnection, name: str, domain: str) -> uuid.UUID:
    await conn.execute(
        pg_insert(Project)
        .values(id=uuid.uuid4(), name=name, domain_name=domain)
        .on_conflict_do_nothing(index_elements=["domain_name", "name"])
    )
    project_id: uuid.UUID = (
        await conn.execute(select(Project.id).where(Project.domain_name == domain, Project.name == name))
    ).scalar_one()
    return project_id


async def create_keypair(
    conn: AsyncConnection,
    *,
    user: str,
    project: str,
    domain: str = DEFAULT_DOMAIN,
    role: Role = Role.USER,
    resource_policy: str | None = None,
    actor: str | None = None,
    secret_key_enc: str | None = None,
) -> tuple[str, str]:
    """Create a keypair (and the user and project if missing) in the caller's transaction, with
    `secret_key_enc` (a sealed secret key) if given.

    Returns `(access_key, token)`; raises `TenancyError` for an unknown domain or policy.
    """
    if (await conn.execute(select(Domain.name).where(Domain.name == domain))).first() is None:
        raise TenancyError(f"domain {domain!r} does not exist")
    if resource_policy is not None:
        found = await conn.execute(
            select(KeypairResourcePolicy.name).where(KeypairResourcePolicy.name == resource_policy)
        )
        if found.first() is None:
            raise TenancyError(f"resource policy {resource_policy!r} does not exist")
    user_id = await _ensure_user(conn, user, domain)
    project_id = await _ensure_project(conn, project, domain)
    access_key, token = new_access_key(), new_token()
    await conn.execute(
        insert(Keypair).values(
            access_key=access_key,
            token_hash=hash_token(token),
            user_id=user_id,
            project_id=project_id,
            role=role.value,
            resource_policy=resource_policy,
            secret_key_enc=secret_key_enc,
        )
    )
    await conn.execute(
        insert(AuditLog).values(
            actor=actor,
            action="keypair.create",
            target=access_key,
            detail={"user": user, "project": project, "domain": domain, "role": role.value},
        )
    )
    return access_key, token


async def bootstrap(engine: AsyncEngine, secret_key_enc: str | None = None) -> tuple[str, str]:
    """Create the default domain, project, scaling group and admin user if missing, and a NEW
    admin keypair every time (an old token cannot be shown again), with `secret_key_enc` (a sealed
    secret key) if given. Returns `(access_key, token)`."""
    async with engine.begin() as conn:
        await conn.execute(pg_insert(Domain).values(name=DEFAULT_DOMAIN).on_conflict_do_nothing())
        await conn.execute(
            pg_insert(ScalingGroup)
            .values(name=DEFAULT_SCALING_GROUP, scheduler="fifo", agent_selection="concentrated")
            .on_conflict_do_nothing()
        )
        return await create_keypair(
            conn,
            user=ADMIN_USER,
            project=DEFAULT_PROJECT,
            domain=DEFAULT_DOMAIN,
            role=Role.ADMIN,
            actor="bootstrap",
            secret_key_enc=secret_key_enc,
        )


async def keypair_user(conn: AsyncConnection, access_key: str) -> uuid.UUID | None:
    """The user a keypair belongs to (its row locked until the caller's transaction ends), or None
    for an unknown access key."""
    found = await conn.execute(
        select(Keypair.user_id).where(Keypair.access_key == access_key).with_for_update()
    )
    user: uuid.UUID | None = found.scalar_one_or_none()
    return user


async def set_secret_key(conn: AsyncConnection, access_key: str, secret_key_enc: str, actor: str) -> None:
    """Replace a keypair's sealed secret key (a rotation), in the caller's transaction, audited."""
    await conn.execute(
        update(Keypair).where(Keypair.access_key == access_key).values(secret_key_enc=secret_key_enc)
    )
    await conn.execute(
        insert(AuditLog).values(actor=actor, action="keypair.rotate_secret", target=access_key, detail={})
    )


# -- the limits a new session of an owner must respect -----------------------------------------


@dataclass(frozen=True)
class OwnerLimits:
    """What the caller's keypair policy, project and domain allow; None: no such limit."""

    policy_name: str | None
    policy_quota: Quota | None
    project_quota: Quota | None
    domain_quota: Quota | None
    max_concurrent_sessions: int | None
    max_pending_sessions: int | None
    project_retry_default: dict[str, Any] | None = None
    domain_retry_default: dict[str, Any] | None = None

    @property
    def quotas(self) -> list[Quota]:
        return [q for q in (self.policy_quota, self.project_quota, self.domain_quota) if q is not None]


# Built once: this runs on every create, and building a statement costs more than running it.
_OWNER_LIMITS = (
    select(
        Keypair.resource_policy,
        KeypairResourcePolicy.total_resource_slots,
        KeypairResourcePolicy.default_for_unspecified,
        KeypairResourcePolicy.max_concurrent_sessions,
        KeypairResourcePolicy.max_pending_sessions,
        Project.name.label("project_name"),
        Project.total_resource_slots.label("project_slots"),
        Project.default_for_unspecified.label("project_default"),
        Domain.total_resource_slots.label("domain_slots"),
        Domain.default_for_unspecified.label("domain_default"),
        Project.retry_policy_default.label("project_retry"),
        Domain.retry_policy_default.label("domain_retry"),
    )
    .outerjoin(KeypairResourcePolicy, KeypairResourcePolicy.name == Keypair.resource_policy)
    .join(Project, Project.id == bindparam("project_id"))
    .join(Domain, Domain.name == bindparam("domain_name"))
    .where(Keypair.access_key == bindparam("access_key"))
)


async def owner_limits(conn: AsyncConnection, principal: Principal) -> OwnerLimits:
    """The limits of `principal`'s keypair policy, project and domain, in one statement.

    (Creates read them from a cache; a pending limit is counted under the owner's keypair lock by
    the create batch, `repositories.session_inserts.lock_and_count_pending`.)
    """
    params = {
        "access_key": principal.access_key,
        "project_id": principal.project_id,
        "domain_name": principal.domain_name,
    }
    row = (await conn.execute(_OWNER_LIMITS, params)).one()
    policy_quota = None
    if row.resource_policy is not None:
        policy_quota = quota_of(
            f"keypair policy {row.resource_policy!r}", row.total_resource_slots, row.default_for_unspecified
        )
    return OwnerLimits(
        policy_name=row.resource_policy,
        policy_quota=policy_quota,
        project_quota=quota_of(f"project {row.project_name!r}", row.project_slots, row.project_default),
        domain_quota=quota_of(f"domain {principal.domain_name!r}", row.domain_slots, row.domain_default),
        max_concurrent_sessions=row.max_concurrent_sessions,
        max_pending_sessions=row.max_pending_sessions,
        project_retry_default=row.project_retry,
        domain_retry_default=row.domain_retry,
    )


async def count_pending(conn: AsyncConnection, access_key: str) -> int:
    found = await conn.scalar(
        select(func.count())
        .select_from(Session)
        .where(Session.access_key == access_key, Session.status == SessionStatus.PENDING.value)
    )
    return int(found or 0)
