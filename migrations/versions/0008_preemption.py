"""Preemption: whether a session may be preempted, and each scaling group's preemption settings.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sessions", sa.Column("preemptible", sa.Boolean(), nullable=False, server_default=sa.text("false"))
    )
    op.add_column(
        "scaling_groups",
        sa.Column(
            "preemption",
            postgresql.JSONB(),
            nullable=False,
            server_default=sa.text("""'{"mode": "off", "grace_period": 30}'::jsonb"""),
        ),
    )


def downgrade() -> None:
    op.drop_column("scaling_groups", "preemption")
    op.drop_column("sessions", "preemptible")
