"""Reconciliation and merged history: agents keep the kernels their last heartbeat reported
running; a history row records when later identical runs were merged into it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 10:43:00.271346
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agents",
        sa.Column(
            "running_kernels",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
    )
    op.add_column(
        "session_scheduling_history", sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("session_scheduling_history", "updated_at")
    op.drop_column("agents", "running_kernels")
