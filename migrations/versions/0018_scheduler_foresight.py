"""Scheduler foresight (issue 37, CONTRACT section 16).

- `sessions.max_duration`: the run time a session declares (seconds, NULL: none); one that runs
  longer ends with cause LIFETIME_EXCEEDED, and the `reserve` queue policy and the start-time
  estimates count on it.
- `projects.fair_share_weight`, `domains.fair_share_weight`: their entitlement under the
  `fair_share` scheduler, against their siblings' (default 1).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-28 09:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sessions", sa.Column("max_duration", sa.Integer(), nullable=True))
    for table in ("projects", "domains"):
        op.add_column(table, sa.Column("fair_share_weight", sa.Float(), nullable=False, server_default="1"))


def downgrade() -> None:
    for table in ("domains", "projects"):
        op.drop_column(table, "fair_share_weight")
    op.drop_column("sessions", "max_duration")
