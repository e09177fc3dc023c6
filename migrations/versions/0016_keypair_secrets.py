"""Keypairs' secret keys, for Backend.AI's request signatures (issue 35).

- `keypairs.secret_key_enc`: the keypair's secret key sealed under the cluster secret
  (`common.secret_box`: AES-GCM, never the plain secret); null for a keypair made before, which
  signs nothing until its secret is rotated (`POST /v2/keypairs/{access_key}/secret`).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("keypairs", sa.Column("secret_key_enc", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("keypairs", "secret_key_enc")
