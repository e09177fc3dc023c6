"""The time an agent signed its last accepted heartbeat: a beat signed before it is refused, whatever
its boot (an old registration's beat cannot bring the agent back).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("heartbeat_signed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("agents", "heartbeat_signed_at")
