"""Sessions: the columns most sessions leave empty (`creation_id`, `parent_session_id`,
`deployment_id`) are indexed only where they are set.

`status` is indexed, so every move of a session is a new row version (no HOT update) that every
index takes an entry for, unless the index is partial and the row outside it. The three indexes
held an entry per session, nearly all of them NULL, rewritten at each of a session's dozen moves:
a third of the index entries each move wrote. Every query on these columns compares them with `=`
(or `= ANY`), which PostgreSQL knows implies NOT NULL, so the partial indexes serve the same
queries; uniqueness of `(access_key, creation_id)` never applied to a NULL creation_id anyway. An
upsert on the key now names the index's predicate (`ON CONFLICT (access_key, creation_id) WHERE
creation_id IS NOT NULL`).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 01:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_NULLABLE = (
    ("ix_sessions_parent_session_id", "parent_session_id"),
    ("ix_sessions_deployment_id", "deployment_id"),
)
_KEY = "uq_sessions_access_key_creation_id"


def upgrade() -> None:
    op.drop_constraint(_KEY, "sessions", type_="unique")
    op.create_index(
        _KEY,
        "sessions",
        ["access_key", "creation_id"],
        unique=True,
        postgresql_where=sa.text("creation_id IS NOT NULL"),
    )
    for name, col in _NULLABLE:
        op.drop_index(name, table_name="sessions")
        op.create_index(name, "sessions", [col], postgresql_where=sa.text(f"{col} IS NOT NULL"))


def downgrade() -> None:
    for name, col in _NULLABLE:
        op.drop_index(name, table_name="sessions")
        op.create_index(name, "sessions", [col])
    op.drop_index(_KEY, table_name="sessions")
    op.create_unique_constraint(_KEY, "sessions", ["access_key", "creation_id"])
