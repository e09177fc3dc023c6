"""Node lifecycle: an agent's class, health, status reason, operator disable, boot failures in a
row and refused (replayed) heartbeats; and the agent status history.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_EMPTY = sa.text("'{}'::jsonb")


def upgrade() -> None:
    op.add_column(
        "agents", sa.Column("agent_class", sa.String(length=16), server_default="standard", nullable=False)
    )
    op.add_column(
        "agents",
        sa.Column("health", postgresql.JSONB(astext_type=sa.Text()), server_default=_EMPTY, nullable=False),
    )
    op.add_column(
        "agents",
        sa.Column(
            "status_info", postgresql.JSONB(astext_type=sa.Text()), server_default=_EMPTY, nullable=False
        ),
    )
    op.add_column(
        "agents", sa.Column("disabled", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )
    op.add_column("agents", sa.Column("boot_failures", sa.Integer(), server_default="0", nullable=False))
    op.add_column("agents", sa.Column("rejected_beats", sa.BigInteger(), server_default="0", nullable=False))
    op.create_table(
        "agent_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.String(length=128), nullable=False),
        sa.Column("actor", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("handler", sa.String(length=64), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_agent_history_agent_id"), "agent_history", ["agent_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_agent_history_agent_id"), table_name="agent_history")
    op.drop_table("agent_history")
    for column in ("rejected_beats", "boot_failures", "disabled", "status_info", "health", "agent_class"):
        op.drop_column("agents", column)
