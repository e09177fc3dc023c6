"""Placement policies: queue policy (block/backfill), resource priority and the round-robin cursor
per scaling group; default_for_unspecified on project and domain quotas.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 09:53:56.319198
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "domains",
        sa.Column("default_for_unspecified", sa.String(length=16), server_default="limited", nullable=False),
    )
    op.add_column(
        "projects",
        sa.Column("default_for_unspecified", sa.String(length=16), server_default="limited", nullable=False),
    )
    op.add_column(
        "scaling_groups",
        sa.Column("queue_policy", sa.String(length=16), server_default="backfill", nullable=False),
    )
    op.add_column(
        "scaling_groups",
        sa.Column(
            "resource_priority",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text('\'["cuda.device", "cpu", "mem"]\'::jsonb'),
            nullable=False,
        ),
    )
    op.add_column("scaling_groups", sa.Column("roundrobin_cursor", sa.String(length=128), nullable=True))


def downgrade() -> None:
    op.drop_column("scaling_groups", "roundrobin_cursor")
    op.drop_column("scaling_groups", "resource_priority")
    op.drop_column("scaling_groups", "queue_policy")
    op.drop_column("projects", "default_for_unspecified")
    op.drop_column("domains", "default_for_unspecified")
