"""Core schema: tenancy, keypairs and policies, scaling groups, agents, sessions, kernels,
dependencies, session/kernel scheduling history and the audit log.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 09:37:57.014242
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("actor", sa.String(length=32), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=True),
        sa.Column(
            "detail",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_table(
        "domains",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("total_resource_slots", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("retry_policy_default", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_domains")),
    )
    op.create_table(
        "keypair_resource_policies",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("total_resource_slots", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("default_for_unspecified", sa.String(length=16), server_default="limited", nullable=False),
        sa.Column("max_concurrent_sessions", sa.Integer(), nullable=True),
        sa.Column("max_pending_sessions", sa.Integer(), nullable=True),
        sa.Column("max_session_lifetime", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_keypair_resource_policies")),
    )
    op.create_table(
        "scaling_groups",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("scheduler", sa.String(length=32), server_default="fifo", nullable=False),
        sa.Column("agent_selection", sa.String(length=32), server_default="concentrated", nullable=False),
        sa.Column("pending_timeout", sa.Float(), server_default="0", nullable=False),
        sa.Column(
            "allowed_session_types",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text('\'["batch", "interactive", "inference"]\'::jsonb'),
            nullable=False,
        ),
        sa.Column(
            "scheduler_opts",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scaling_groups")),
    )
    op.create_table(
        "agents",
        sa.Column("id", sa.String(length=128), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "status_changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("scaling_group", sa.String(length=64), nullable=False),
        sa.Column("available_slots", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("rpc_addr", sa.String(length=256), nullable=False),
        sa.Column(
            "images",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'[]'::jsonb"),
            nullable=False,
        ),
        sa.Column("boot_id", sa.String(length=64), nullable=False),
        sa.Column("heartbeat_seq", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("last_heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("schedulable", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("max_kernels", sa.Integer(), nullable=True),
        sa.Column(
            "first_contact_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["scaling_group"], ["scaling_groups.name"], name=op.f("fk_agents_scaling_group_scaling_groups")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agents")),
    )
    op.create_index(op.f("ix_agents_status"), "agents", ["status"], unique=False)
    op.create_table(
        "projects",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("domain_name", sa.String(length=64), nullable=False),
        sa.Column("total_resource_slots", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("retry_policy_default", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["domain_name"], ["domains.name"], name=op.f("fk_projects_domain_name_domains")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("domain_name", "name", name=op.f("uq_projects_domain_name_name")),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("domain_name", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["domain_name"], ["domains.name"], name=op.f("fk_users_domain_name_domains")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_table(
        "keypairs",
        sa.Column("access_key", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=128), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.UUID(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("resource_policy", sa.String(length=64), nullable=True),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_keypairs_project_id_projects")
        ),
        sa.ForeignKeyConstraint(
            ["resource_policy"],
            ["keypair_resource_policies.name"],
            name=op.f("fk_keypairs_resource_policy_keypair_resource_policies"),
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_keypairs_user_id_users")),
        sa.PrimaryKeyConstraint("access_key", name=op.f("pk_keypairs")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_keypairs_token_hash")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("creation_id", sa.String(length=128), nullable=True),
        sa.Column("access_key", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.UUID(), nullable=False),
        sa.Column("project_id", sa.UUID(), nullable=False),
        sa.Column("domain_name", sa.String(length=64), nullable=False),
        sa.Column("scaling_group", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("image", sa.String(length=256), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column(
            "environ",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("resources", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("cluster_size", sa.Integer(), server_default="1", nullable=False),
        sa.Column("cluster_mode", sa.String(length=16), server_default="single-node", nullable=False),
        sa.Column("priority", sa.Integer(), server_default="10", nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=True),
        sa.Column(
            "status_info",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "status_changed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.Column("phase_attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("terminated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("parent_session_id", sa.UUID(), nullable=True),
        sa.Column("retry_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_retries", sa.Integer(), server_default="0", nullable=False),
        sa.Column("retry_policy", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("retry_cause", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["access_key"], ["keypairs.access_key"], name=op.f("fk_sessions_access_key_keypairs")
        ),
        sa.ForeignKeyConstraint(
            ["domain_name"], ["domains.name"], name=op.f("fk_sessions_domain_name_domains")
        ),
        sa.ForeignKeyConstraint(
            ["parent_session_id"], ["sessions.id"], name=op.f("fk_sessions_parent_session_id_sessions")
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_sessions_project_id_projects")
        ),
        sa.ForeignKeyConstraint(
            ["scaling_group"], ["scaling_groups.name"], name=op.f("fk_sessions_scaling_group_scaling_groups")
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_sessions_user_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.UniqueConstraint("access_key", "creation_id", name=op.f("uq_sessions_access_key_creation_id")),
    )
    op.create_index("ix_sessions_access_key_created", "sessions", ["access_key", "created_at"], unique=False)
    op.create_index(op.f("ix_sessions_parent_session_id"), "sessions", ["parent_session_id"], unique=False)
    op.create_index("ix_sessions_status_sg", "sessions", ["status", "scaling_group"], unique=False)
    op.create_table(
        "kernels",
        sa.Column("id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("cluster_role", sa.String(length=16), server_default="main", nullable=False),
        sa.Column("cluster_idx", sa.Integer(), server_default="0", nullable=False),
        sa.Column("agent_id", sa.String(length=128), nullable=True),
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
        sa.Column("occupied_slots", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("terminated_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["agent_id"], ["agents.id"], name=op.f("fk_kernels_agent_id_agents")),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_kernels_session_id_sessions"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernels")),
    )
    op.create_index("ix_kernels_agent_status", "kernels", ["agent_id", "status"], unique=False)
    op.create_index(op.f("ix_kernels_session_id"), "kernels", ["session_id"], unique=False)
    op.create_index(op.f("ix_kernels_status"), "kernels", ["status"], unique=False)
    op.create_table(
        "session_dependencies",
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("depends_on", sa.UUID(), nullable=False),
        sa.ForeignKeyConstraint(
            ["depends_on"],
            ["sessions.id"],
            name=op.f("fk_session_dependencies_depends_on_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_dependencies_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", "depends_on", name=op.f("pk_session_dependencies")),
    )
    op.create_index(
        op.f("ix_session_dependencies_depends_on"), "session_dependencies", ["depends_on"], unique=False
    )
    op.create_table(
        "session_scheduling_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("handler", sa.String(length=64), nullable=False),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("attempt", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_scheduling_history_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_scheduling_history")),
    )
    op.create_index(
        op.f("ix_session_scheduling_history_session_id"),
        "session_scheduling_history",
        ["session_id"],
        unique=False,
    )
    op.create_table(
        "kernel_scheduling_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("kernel_id", sa.UUID(), nullable=False),
        sa.Column("session_id", sa.UUID(), nullable=False),
        sa.Column("source", sa.String(length=64), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(
            ["kernel_id"],
            ["kernels.id"],
            name=op.f("fk_kernel_scheduling_history_kernel_id_kernels"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_kernel_scheduling_history_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernel_scheduling_history")),
    )
    op.create_index(
        op.f("ix_kernel_scheduling_history_kernel_id"),
        "kernel_scheduling_history",
        ["kernel_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_kernel_scheduling_history_session_id"),
        "kernel_scheduling_history",
        ["session_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_kernel_scheduling_history_session_id"), table_name="kernel_scheduling_history")
    op.drop_index(op.f("ix_kernel_scheduling_history_kernel_id"), table_name="kernel_scheduling_history")
    op.drop_table("kernel_scheduling_history")
    op.drop_index(op.f("ix_session_scheduling_history_session_id"), table_name="session_scheduling_history")
    op.drop_table("session_scheduling_history")
    op.drop_index(op.f("ix_session_dependencies_depends_on"), table_name="session_dependencies")
    op.drop_table("session_dependencies")
    op.drop_index(op.f("ix_kernels_status"), table_name="kernels")
    op.drop_index(op.f("ix_kernels_session_id"), table_name="kernels")
    op.drop_index("ix_kernels_agent_status", table_name="kernels")
    op.drop_table("kernels")
    op.drop_index("ix_sessions_status_sg", table_name="sessions")
    op.drop_index(op.f("ix_sessions_parent_session_id"), table_name="sessions")
    op.drop_index("ix_sessions_access_key_created", table_name="sessions")
    op.drop_table("sessions")
    op.drop_table("keypairs")
    op.drop_table("users")
    op.drop_table("projects")
    op.drop_index(op.f("ix_agents_status"), table_name="agents")
    op.drop_table("agents")
    op.drop_table("scaling_groups")
    op.drop_table("keypair_resource_policies")
    op.drop_table("domains")
    op.drop_table("audit_log")
