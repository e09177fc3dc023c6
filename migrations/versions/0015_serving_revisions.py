"""Serving for real (CONTRACT section 12): revisions, rollouts, autoscaling, tokens, backoff.

- `deployments`: `revision` (1 at creation, +1 per update), `rollout` (the update in progress:
  strategy, the revision it left, when it started, its rollback deadline; null when none),
  `serving_revision` (blue-green: the one revision the routing table serves; null: every one),
  `autoscaling` (the rules, null when the replicas are set by hand), `token_sha256` (the access
  token's digest; null with `open_to_public`), `backoff_until` (replacements wait until then),
  `drain_timeout` (seconds a route taken out of service may finish its requests).
- `routes.revision`: the revision its replica runs.
- `deployment_revisions`: each revision's definition and health check, so a route is created
  (and a rollback restored) from its own revision, whatever the deployment's current one is.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-27 16:50:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deployments", sa.Column("revision", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("deployments", sa.Column("rollout", JSONB(), nullable=True))
    op.add_column("deployments", sa.Column("serving_revision", sa.Integer(), nullable=True))
    op.add_column("deployments", sa.Column("autoscaling", JSONB(), nullable=True))
    op.add_column("deployments", sa.Column("token_sha256", sa.String(64), nullable=True))
    op.add_column(
        "deployments", sa.Column("open_to_public", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    op.add_column("deployments", sa.Column("backoff_until", sa.DateTime(timezone=True), nullable=True))
    op.add_column("deployments", sa.Column("drain_timeout", sa.Float(), nullable=False, server_default="30"))
    op.add_column("routes", sa.Column("revision", sa.Integer(), nullable=False, server_default="1"))
    op.create_table(
        "deployment_revisions",
        sa.Column(
            "deployment_id",
            sa.Uuid(),
            sa.ForeignKey("deployments.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("revision", sa.Integer(), primary_key=True),
        sa.Column("definition", JSONB(), nullable=False),
        sa.Column("health_check", JSONB(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    # Deployments made before revisions existed: what they run is their revision 1, and they
    # were open to anyone (keep them so; their owners can make a token).
    op.execute(
        "INSERT INTO deployment_revisions (deployment_id, revision, definition, health_check, created_at)"
        " SELECT id, 1, definition, health_check, created_at FROM deployments"
    )
    op.execute("UPDATE deployments SET open_to_public = true")


def downgrade() -> None:
    op.drop_table("deployment_revisions")
    op.drop_column("routes", "revision")
    for name in (
        "drain_timeout",
        "backoff_until",
        "open_to_public",
        "token_sha256",
        "autoscaling",
        "serving_revision",
        "rollout",
        "revision",
    ):
        op.drop_column("deployments", name)
