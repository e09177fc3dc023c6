"""GPU devices (issue 36, CONTRACT section 15).

- `agents.devices`: the devices an agent's last heartbeat reported, each `{"id": "cuda:<index>",
  "uuid", "model", "memory", "status", "reason", "temperature", "utilization", "memory_used",
  "power", "ecc_uncorrected"}` (empty for an agent without GPUs).
- `kernels.devices`: the UUIDs of the devices the kernel was given when it was placed (empty for a
  kernel given none); a live kernel's devices are taken, an ended one's free again.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    empty = sa.text("'[]'::jsonb")
    op.add_column("agents", sa.Column("devices", JSONB(), nullable=False, server_default=empty))
    op.add_column("kernels", sa.Column("devices", JSONB(), nullable=False, server_default=empty))


def downgrade() -> None:
    op.drop_column("kernels", "devices")
    op.drop_column("agents", "devices")
