"""Kernels in containers (CONTRACT section 11): how each agent runs kernels, and which image a
kernel runs.

`agents.backend` (`container`, `process` or `hollow`) is what the agent's heartbeats say, for the
API; placement reads none of it, so neither the statics fingerprint (0010) nor the agent-set
version triggers (0011) name it: a beat that changes only the backend bumps no version. What an
agent offers stays in `agents.images`, now with the marks of the registries it may pull from
(`common.image_refs`), which the fingerprint already covers.

`kernels.image_ref` is the reference a kernel runs as its agent resolved it (a short name placed in
the agent's default registry) and `kernels.image_digest` its manifest digest (`sha256:…`); both
NULL until a container agent reports the kernel running, and for kernels of the other backends.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 13:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agents", sa.Column("backend", sa.String(16), nullable=False, server_default="process"))
    op.add_column("kernels", sa.Column("image_ref", sa.String(512), nullable=True))
    op.add_column("kernels", sa.Column("image_digest", sa.String(128), nullable=True))


def downgrade() -> None:
    op.drop_column("kernels", "image_digest")
    op.drop_column("kernels", "image_ref")
    op.drop_column("agents", "backend")
