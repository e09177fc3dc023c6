"""Agents: a version token per scaling group that PostgreSQL changes whenever an agent placement
reads is added, removed or changes (status, schedulable, kernel limit, group, capacity or images),
so that a placement cycle learns that its kept list of agents is still the table's from one index
probe instead of hashing every agent's row (`provisioner.agent_statics`).

The token is changed by a deferred constraint trigger, at the commit of the writer's transaction:
the version row is then the last row any transaction locks, so two writers never wait on each
other's agents while holding it. A heartbeat that changes none of those columns fires nothing.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 00:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BUMP = """
CREATE FUNCTION agent_set_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO agent_set_versions (scaling_group, version) VALUES (OLD.scaling_group, gen_random_uuid())
        ON CONFLICT (scaling_group) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.scaling_group IS DISTINCT FROM OLD.scaling_group) THEN
        INSERT INTO agent_set_versions (scaling_group, version) VALUES (NEW.scaling_group, gen_random_uuid())
        ON CONFLICT (scaling_group) DO UPDATE SET version = EXCLUDED.version;
    END IF;
    RETURN NULL;
END
$$
"""

_TRUNCATED = """
CREATE FUNCTION agent_sets_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE agent_set_versions SET version = gen_random_uuid();
    RETURN NULL;
END
$$
"""

_WHEN = """
    OLD.status IS DISTINCT FROM NEW.status
    OR OLD.schedulable IS DISTINCT FROM NEW.schedulable
    OR OLD.max_kernels IS DISTINCT FROM NEW.max_kernels
    OR OLD.scaling_group IS DISTINCT FROM NEW.scaling_group
    OR OLD.statics_fingerprint IS DISTINCT FROM NEW.statics_fingerprint
    OR OLD.id IS DISTINCT FROM NEW.id
"""


def upgrade() -> None:
    op.create_table(
        "agent_set_versions",
        sa.Column("scaling_group", sa.String(64), primary_key=True),
        sa.Column("version", sa.Uuid(), nullable=False),
    )
    op.execute(
        "INSERT INTO agent_set_versions (scaling_group, version)"
        " SELECT DISTINCT scaling_group, gen_random_uuid() FROM agents"
    )
    op.execute(_BUMP)
    op.execute(_TRUNCATED)
    op.execute(
        "CREATE CONSTRAINT TRIGGER agents_set_rows AFTER INSERT OR DELETE ON agents"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION agent_set_changed()"
    )
    op.execute(
        "CREATE CONSTRAINT TRIGGER agents_set_columns AFTER UPDATE ON agents"
        f" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({_WHEN}) EXECUTE FUNCTION agent_set_changed()"
    )
    op.execute(
        "CREATE TRIGGER agents_set_truncated AFTER TRUNCATE ON agents"
        " FOR EACH STATEMENT EXECUTE FUNCTION agent_sets_truncated()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER agents_set_truncated ON agents")
    op.execute("DROP TRIGGER agents_set_columns ON agents")
    op.execute("DROP TRIGGER agents_set_rows ON agents")
    op.execute("DROP FUNCTION agent_sets_truncated()")
    op.execute("DROP FUNCTION agent_set_changed()")
    op.drop_table("agent_set_versions")
