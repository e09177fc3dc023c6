"""Retention: an index on when sessions ended, so the maintenance lane finds the oldest ended
sessions without reading the table.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_sessions_terminated_at",
        "sessions",
        ["terminated_at"],
        unique=False,
        postgresql_where=sa.text("terminated_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_sessions_terminated_at", table_name="sessions")
