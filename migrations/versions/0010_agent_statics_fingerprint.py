"""Agents: the fingerprint of what placement parses (capacity and images) as a stored generated
column, computed by PostgreSQL when a row is written instead of for every agent at every placement
cycle's read.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 00:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# The expression as it was when this revision was written (`sokovan.db.models.STATICS_FINGERPRINT`).
FINGERPRINT = "md5(CAST(available_slots AS TEXT) || '|' || CAST(images AS TEXT))"


def upgrade() -> None:
    op.add_column(
        "agents",
        sa.Column("statics_fingerprint", sa.Text(), sa.Computed(FINGERPRINT, persisted=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("agents", "statics_fingerprint")
