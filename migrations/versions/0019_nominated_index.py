"""Waiting sessions that carry a preemption nomination, by scaling group: a partial index.

Every placement cycle reads the PENDING sessions of its groups that carry a nomination
(`provisioner.loader._read_nominated`). Through `ix_sessions_status_sg` that read fetched every
PENDING session of the group and tested its status_info: some milliseconds per cycle with ten
thousand waiting, for a handful of nominees at most. The index holds only the nominees.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 08:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_INDEX = "ix_sessions_nominated"
# The predicate as it was when this revision was written (`sokovan.db.nominated_rows`).
_WHERE = "sessions.status = 'PENDING' AND sessions.status_info ? 'nominated_agents'"


def upgrade() -> None:
    op.create_index(
        _INDEX,
        "sessions",
        ["scaling_group"],
        unique=False,
        postgresql_where=sa.text(_WHERE),
    )


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="sessions")
