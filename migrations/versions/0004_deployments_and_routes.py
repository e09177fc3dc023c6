"""Deployments and routes: deployments (EndpointLifecycle), their replicas' routes (RouteStatus),
both histories, the link from a replica session to its deployment, and a kernel's service address.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 22:21:45.877329
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=40), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("access_key", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.UUID(), nullable=False),
        sa.Column("domain_name", sa.String(length=64), nullable=False),
        sa.Column("scaling_group", sa.String(length=64), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("definition", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("health_check", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("replica_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "status_info",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "status_changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["access_key"], ["keypairs.access_key"], name=op.f("fk_deployments_access_key_keypairs")
        ),
        sa.ForeignKeyConstraint(
            ["domain_name"], ["domains.name"], name=op.f("fk_deployments_domain_name_domains")
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_deployments_project_id_projects")
        ),
        sa.ForeignKeyConstraint(
            ["scaling_group"],
            ["scaling_groups.name"],
            name=op.f("fk_deployments_scaling_group_scaling_groups"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_deployments_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployments")),
    )
    op.create_index("ix_deployments_status", "deployments", ["status"], unique=False)
    op.create_index(
        "uq_deployments_live_name",
        "deployments",
        ["name"],
        unique=True,
        postgresql_where=sa.text("status != 'DESTROYED'"),
    )
    op.create_table(
        "deployment_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("deployment_id", sa.UUID(), nullable=False),
        sa.Column("handler", sa.String(length=64), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_deployment_history_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_deployment_history")),
    )
    op.create_index(
        op.f("ix_deployment_history_deployment_id"), "deployment_history", ["deployment_id"], unique=False
    )
    op.create_table(
        "routes",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("deployment_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "status_info",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("endpoint", sa.String(length=256), nullable=True),
        sa.Column(
            "health",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "status_changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("terminated_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_routes_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["session_id"], ["sessions.id"], name=op.f("fk_routes_session_id_sessions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routes")),
        sa.UniqueConstraint("session_id", name=op.f("uq_routes_session_id")),
    )
    op.create_index("ix_routes_deployment_status", "routes", ["deployment_id", "status"], unique=False)
    op.create_index(op.f("ix_routes_status"), "routes", ["status"], unique=False)
    op.create_table(
        "route_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("route_id", sa.UUID(), nullable=False),
        sa.Column("handler", sa.String(length=64), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["route_id"], ["routes.id"], name=op.f("fk_route_history_route_id_routes"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_route_history")),
    )
    op.create_index(op.f("ix_route_history_route_id"), "route_history", ["route_id"], unique=False)
    op.add_column("kernels", sa.Column("service_addr", sa.String(length=256), nullable=True))
    op.add_column("sessions", sa.Column("deployment_id", sa.UUID(), nullable=True))
    op.create_index(op.f("ix_sessions_deployment_id"), "sessions", ["deployment_id"], unique=False)
    op.create_foreign_key(
        op.f("fk_sessions_deployment_id_deployments"), "sessions", "deployments", ["deployment_id"], ["id"]
    )


def downgrade() -> None:
    op.drop_constraint(op.f("fk_sessions_deployment_id_deployments"), "sessions", type_="foreignkey")
    op.drop_index(op.f("ix_sessions_deployment_id"), table_name="sessions")
    op.drop_column("sessions", "deployment_id")
    op.drop_column("kernels", "service_addr")
    op.drop_index(op.f("ix_route_history_route_id"), table_name="route_history")
    op.drop_table("route_history")
    op.drop_index(op.f("ix_routes_status"), table_name="routes")
    op.drop_index("ix_routes_deployment_status", table_name="routes")
    op.drop_table("routes")
    op.drop_index(op.f("ix_deployment_history_deployment_id"), table_name="deployment_history")
    op.drop_table("deployment_history")
    op.drop_index(
        "uq_deployments_live_name",
        table_name="deployments",
        postgresql_where=sa.text("status != 'DESTROYED'"),
    )
    op.drop_index("ix_deployments_status", table_name="deployments")
    op.drop_table("deployments")
