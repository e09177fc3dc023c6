"""Admin writes and reads: keypair resource policies, domains, projects and scaling groups.

Every write runs in the caller's transaction together with its audit row, so a write and its
record of who made it commit or roll back as one.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from sqlalchemy import insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from sokovan.common.preemption import PreemptionSettings
from sokovan.db.models import AuditLog, Domain, KeypairResourcePolicy, Project, ScalingGroup
from sokovan.manager.repositories.paging import page_after_key
from sokovan.manager.repositories.tenancy import TenancyError


class AlreadyExists(ValueError):
    """A create names something that exists already."""


async def audit(conn: AsyncConnection, actor: str, action: str, target: str, detail: dict[str, Any]) -> None:
    await conn.execute(insert(AuditLog).values(actor=actor, action=action, target=target, detail=detail))


def _row(row: Any) -> dict[str, Any]:
    return dict(row._mapping)


# -- keypair resource policies -------------------------------------------------------------------

_POLICY_FIELDS = (
    "total_resource_slots",
    "default_for_unspecified",
    "max_concurrent_sessions",
    "max_pending_sessions",
    "max_session_lifetime",
)


async def put_resource_policy(
    conn: AsyncConnection, name: str, values: dict[str, Any], actor: str
) -> dict[str, Any]:
    """Create or replace the policy `name` with `values` (every field of the policy)."""
    fields = {k: values[k] for k in _POLICY_FIELDS}
    stmt = pg_insert(KeypairResourcePolicy).values(name=name, **fields)
    row = (
        await conn.execute(
            stmt.on_conflict_do_update(index_elements=[KeypairResourcePolicy.name], set_=fields).returning(
                *KeypairResourcePolicy.__table__.c
            )
        )
    ).one()
    await audit(conn, actor, "resource_policy.put", name, fields)
    return _row(row)


async def get_resource_policy(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (
        await conn.execute(
            select(*KeypairResourcePolicy.__table__.c).where(KeypairResourcePolicy.name == name)
        )
    ).first()
    return _row(row) if row else None


# -- domains and projects ----------------------------------------------------------------------


async def put_domain(conn: AsyncConnection, name: str, changes: dict[str, Any], actor: str) -> dict[str, Any]:
    """Create the domain if missing; set the columns in `changes` (the others keep their value)."""
    stmt = pg_insert(Domain).values(name=name, **changes)
    stmt = (
        stmt.on_conflict_do_update(index_elements=[Domain.name], set_=changes)
        if changes
        else stmt.on_conflict_do_nothing()
    )
    await conn.execute(stmt)
    row = (await conn.execute(select(*Domain.__table__.c).where(Domain.name == name))).one()
    await audit(conn, actor, "domain.put", name, changes)
    return _row(row)


async def put_project(
    conn: AsyncConnection, name: str, domain: str, changes: dict[str, Any], actor: str
) -> dict[str, Any]:
    """Create the project in `domain` if missing (the domain must exist); set `changes`."""
    if (await conn.execute(select(Domain.name).where(Domain.name == domain))).first() is None:
        raise TenancyError(f"domain {domain!r} does not exist")
    stmt = pg_insert(Project).values(name=name, domain_name=domain, **changes)
    keys = [Project.domain_name, Project.name]
    stmt = (
        stmt.on_conflict_do_update(index_elements=keys, set_=changes)
        if changes
        else stmt.on_conflict_do_nothing(index_elements=keys)
    )
    await conn.execute(stmt)
    row = (
        await conn.execute(
            select(*Project.__table__.c).where(Project.domain_name == domain, Project.name == name)
        )
    ).one()
    await audit(conn, actor, "project.put", f"{domain}/{name}", changes)
    return _row(row)


# -- scaling groups ----------------------------------------------------------------------------


def stored_preemption(value: Any) -> dict[str, Any]:
    """A group's stored `preemption` as the API shows it: an object `PreemptionSettings` refuses
    (written by hand) reads as the default, mode off, which is also how the scheduler treats it."""
    try:
        settings = PreemptionSettings.model_validate(value)
    except ValidationError:
        settings = PreemptionSettings()
    return settings.model_dump(mode="json")


def merged_preemption(stored: Any, given: dict[str, Any]) -> dict[str, Any]:
    """A PATCH's `preemption` keys over the stored object (the keys it leaves out are kept)."""
    merged = PreemptionSettings.model_validate({**stored_preemption(stored), **given})
    return merged.model_dump(mode="json")


def _group_row(row: Any) -> dict[str, Any]:
    out = _row(row)
    out["preemption"] = stored_preemption(out.get("preemption"))
    return out


async def create_scaling_group(conn: AsyncConnection, values: dict[str, Any], actor: str) -> dict[str, Any]:
    row = (
        await conn.execute(
            pg_insert(ScalingGroup)
            .values(**values)
            .on_conflict_do_nothing(index_elements=[ScalingGroup.name])
            .returning(*ScalingGroup.__table__.c)
        )
    ).first()
    if row is None:
        raise AlreadyExists(f"scaling group {values['name']!r} already exists")
    await audit(conn, actor, "scaling_group.create", values["name"], values)
    return _group_row(row)


async def patch_scaling_group(
    conn: AsyncConnection, name: str, changes: dict[str, Any], actor: str
) -> dict[str, Any] | None:
    """Set `changes` on the scaling group; None when it does not exist."""
    if not changes:
        return await get_scaling_group(conn, name)
    if "preemption" in changes:
        stored = (
            await conn.execute(
                select(ScalingGroup.preemption).where(ScalingGroup.name == name).with_for_update()
            )
        ).first()
        if stored is None:
            return None
        changes = {**changes, "preemption": merged_preemption(stored.preemption, changes["preemption"])}
    row = (
        await conn.execute(
            update(ScalingGroup)
            .where(ScalingGroup.name == name)
            .values(**changes)
            .returning(*ScalingGroup.__table__.c)
        )
    ).first()
    if row is None:
        return None
    await audit(conn, actor, "scaling_group.update", name, changes)
    return _group_row(row)


async def get_scaling_group(conn: AsyncConnection, name: str) -> dict[str, Any] | None:
    row = (await conn.execute(select(*ScalingGroup.__table__.c).where(ScalingGroup.name == name))).first()
    return _group_row(row) if row else None


async def list_scaling_groups(
    conn: AsyncConnection, limit: int, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """By name; `cursor` continues after the last name of the previous page."""
    query = select(*ScalingGroup.__table__.c)
    rows, next_cursor = await page_after_key(conn, query, ScalingGroup.name, "name", str, limit, cursor)
    return [_group_row(r) for r in rows], next_cursor
