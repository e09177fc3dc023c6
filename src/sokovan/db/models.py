"""The core schema: tenancy, keypairs and policies, scaling groups, agents, sessions, kernels,
dependencies, scheduling history and the audit log; deployments with their routes and history are in
`serving_models` (re-exported here).

Resource slots are JSONB objects of slot name → decimal string. An agent's `occupied_slots` is
not stored: it is derived from the kernels that hold slots on it (see `repositories.agents`), so
it cannot drift from the kernels and resources cannot leak.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    column,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from sokovan.db import nominated_rows, retry_rows
from sokovan.db.base import EMPTY_JSON, Base, HandlerRun, created_at_column
from sokovan.db.serving_models import Deployment as Deployment
from sokovan.db.serving_models import DeploymentHistory as DeploymentHistory
from sokovan.db.serving_models import DeploymentRevision as DeploymentRevision
from sokovan.db.serving_models import Route as Route
from sokovan.db.serving_models import RouteHistory as RouteHistory

SLOTS = JSONB
STATICS_FINGERPRINT = "md5(CAST(available_slots AS TEXT) || '|' || CAST(images AS TEXT))"
EMPTY_LIST = text("'[]'::jsonb")


class Domain(Base):
    __tablename__ = "domains"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    total_resource_slots: Mapped[dict[str, Any] | None] = mapped_column(SLOTS, nullable=True)
    default_for_unspecified: Mapped[str] = mapped_column(String(16), nullable=False, server_default="limited")
    retry_policy_default: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    # its entitlement under the `fair_share` scheduler, against the other domains' (migration 0018)
    fair_share_weight: Mapped[float] = mapped_column(Float, nullable=False, server_default="1")
    created_at: Mapped[dt.datetime] = created_at_column()


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (UniqueConstraint("domain_name", "name"),)
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(64), nullable=False)
    domain_name: Mapped[str] = mapped_column(ForeignKey("domains.name"), nullable=False)
    total_resource_slots: Mapped[dict[str, Any] | None] = mapped_column(SLOTS, nullable=True)
    default_for_unspecified: Mapped[str] = mapped_column(String(16), nullable=False, server_default="limited")
    retry_policy_default: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    # its entitlement under the `fair_share` scheduler, against its domain's other projects'
    fair_share_weight: Mapped[float] = mapped_column(Float, nullable=False, server_default="1")
    created_at: Mapped[dt.datetime] = created_at_column()


class User(Base):
    __tablename__ = "users"
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    domain_name: Mapped[str] = mapped_column(ForeignKey("domains.name"), nullable=False)
    created_at: Mapped[dt.datetime] = created_at_column()


class KeypairResourcePolicy(Base):
    __tablename__ = "keypair_resource_policies"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    # None: unlimited. Otherwise a slot it does not name counts as 0, unless
    # default_for_unspecified is "unlimited".
    total_resource_slots: Mapped[dict[str, Any] | None] = mapped_column(SLOTS, nullable=True)
    default_for_unspecified: Mapped[str] = mapped_column(String(16), nullable=False, server_default="limited")
    max_concurrent_sessions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_pending_sessions: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_session_lifetime: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[dt.datetime] = created_at_column()


class Keypair(Base):
    __tablename__ = "keypairs"
    access_key: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), nullable=False)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id"), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    resource_policy: Mapped[str | None] = mapped_column(
        ForeignKey("keypair_resource_policies.name"), nullable=True
    )
    is_active: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    # The secret key of Backend.AI's request signatures, sealed under the cluster secret
    # (`common.secret_box`); None: this keypair signs nothing until its secret is rotated.
    secret_key_enc: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = created_at_column()


class ScalingGroup(Base):
    __tablename__ = "scaling_groups"
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    scheduler: Mapped[str] = mapped_column(String(32), nullable=False, server_default="fifo")
    agent_selection: Mapped[str] = mapped_column(String(32), nullable=False, server_default="concentrated")
    # Seconds a session may wait in PENDING before it is cancelled; 0 = forever.
    pending_timeout: Mapped[float] = mapped_column(Float, nullable=False, server_default="0")
    allowed_session_types: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, server_default=text('\'["batch", "interactive", "inference"]\'::jsonb')
    )
    scheduler_opts: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    # "backfill": a session that does not fit lets smaller ones behind it go first;
    # "block": it holds its place and nothing behind it (in any band) is placed before it.
    queue_policy: Mapped[str] = mapped_column(String(16), nullable=False, server_default="backfill")
    # Slot names in the order selectors compare agents by.
    resource_priority: Mapped[list[str]] = mapped_column(
        JSONB, nullable=False, server_default=text('\'["cuda.device", "cpu", "mem"]\'::jsonb')
    )
    # The agent the round-robin selector picked last; the next pick starts after it.
    roundrobin_cursor: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # {"mode": "off" | "terminate" | "requeue", "grace_period": seconds}: sokovan.common.preemption
    preemption: Mapped[dict[str, Any]] = mapped_column(
        JSONB, nullable=False, server_default=text("""'{"mode": "off", "grace_period": 30}'::jsonb""")
    )
    created_at: Mapped[dt.datetime] = created_at_column()


class Agent(Base):
    __tablename__ = "agents"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    status_changed_at: Mapped[dt.datetime] = created_at_column()
    scaling_group: Mapped[str] = mapped_column(ForeignKey("scaling_groups.name"), nullable=False)
    available_slots: Mapped[dict[str, Any]] = mapped_column(SLOTS, nullable=False)
    rpc_addr: Mapped[str] = mapped_column(String(256), nullable=False)
    images: Mapped[list[str]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_LIST)
    boot_id: Mapped[str] = mapped_column(String(64), nullable=False)
    heartbeat_seq: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    last_heartbeat_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    # When the agent signed the last heartbeat accepted (its own clock): an older beat is refused.
    heartbeat_signed_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    schedulable: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("true"))
    max_kernels: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The kernels the agent reported running in its last heartbeat (for reconciliation).
    running_kernels: Mapped[list[str]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_LIST)
    first_contact_at: Mapped[dt.datetime] = created_at_column()
    # Node lifecycle (seed 002): the class that picks the grace period, the last health summary, why
    # the agent is in its status, an operator's disable (a DOWN no heartbeat undoes), the unhealthy
    # boot reports in a row, and the heartbeats refused as replays.
    agent_class: Mapped[str] = mapped_column(String(16), nullable=False, server_default="standard")
    health: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    status_info: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    boot_failures: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    rejected_beats: Mapped[int] = mapped_column(BigInteger, nullable=False, server_default="0")
    # How the agent runs kernels (`container`, `process`, `hollow`), as its heartbeats say; for the
    # API only (placement reads none of it, so the fingerprint and the set version leave it out).
    backend: Mapped[str] = mapped_column(String(16), nullable=False, server_default="process")
    # Its GPUs as its last heartbeat reported them (CONTRACT section 15; `common.gpu.DeviceInfo`).
    devices: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_LIST)
    # What placement parses, fingerprinted by PostgreSQL whenever the row is written
    # (`provisioner.agent_statics`): equal fingerprints, equal capacity and images.
    statics_fingerprint: Mapped[str] = mapped_column(
        Text, Computed(STATICS_FINGERPRINT, persisted=True), nullable=False
    )


class AgentSetVersion(Base):
    """A token that changes (in the writer's transaction, at its commit) whenever any agent of the
    scaling group is added, removed, or changes a column placement reads: status, schedulable, the
    kernel limit, the group, or the capacity and images (`statics_fingerprint`). Written only by the
    triggers of migration 0011; read by `provisioner.agent_statics` to know, in one index probe,
    that the list it built last time is still the table's."""

    __tablename__ = "agent_set_versions"
    scaling_group: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[uuid.UUID] = mapped_column(nullable=False)


class Session(Base):
    __tablename__ = "sessions"
    __table_args__ = (
        # A session moves through a dozen statuses, each move a new row version that every index
        # not partial to it takes an entry for (status is indexed: no HOT update). The columns most
        # sessions leave empty are indexed only where they are set (migration 0012).
        Index(
            "uq_sessions_access_key_creation_id",
            "access_key",
            "creation_id",
            unique=True,
            postgresql_where=column("creation_id").is_not(None),
        ),
        Index(
            "ix_sessions_parent_session_id",
            "parent_session_id",
            postgresql_where=column("parent_session_id").is_not(None),
        ),
        Index(
            "ix_sessions_deployment_id",
            "deployment_id",
            postgresql_where=column("deployment_id").is_not(None),
        ),
        Index("ix_sessions_status_sg", "status", "scaling_group"),
        Index("ix_sessions_access_key_created", "access_key", "created_at"),
        # A session by its name (CONTRACT section 17): the caller's (user_id) or, for an admin,
        # anyone's; newest first (migration 0014).
        Index("ix_sessions_name_user_created", "name", "user_id", "created_at"),
        # Retention picks the oldest ended sessions.
        Index(
            "ix_sessions_terminated_at",
            "terminated_at",
            postgresql_where=column("terminated_at").is_not(None),
        ),
        # The retry lane's reads: only the sessions still waiting for it (`retry_rows`).
        Index("ix_sessions_retry_undecided", "created_at", postgresql_where=text(retry_rows.UNDECIDED)),
        Index("ix_sessions_retry_scheduled", "created_at", postgresql_where=text(retry_rows.SCHEDULED)),
        Index("ix_sessions_retry_uncounted", "id", postgresql_where=text(retry_rows.UNCOUNTED_SUCCESS)),
        # Placement reads the waiting sessions that carry a preemption nomination every cycle:
        # without this, every PENDING session's status_info is read to find the few (migration 0019).
        Index(
            "ix_sessions_nominated",
            "scaling_group",
            postgresql_where=text(nominated_rows.NOMINATED),
        ),
    )
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    creation_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    access_key: Mapped[str] = mapped_column(ForeignKey("keypairs.access_key"), nullable=False)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), nullable=False)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id"), nullable=False)
    domain_name: Mapped[str] = mapped_column(ForeignKey("domains.name"), nullable=False)
    scaling_group: Mapped[str] = mapped_column(ForeignKey("scaling_groups.name"), nullable=False)
    type: Mapped[str] = mapped_column(String(16), nullable=False)
    image: Mapped[str] = mapped_column(String(256), nullable=False)
    command: Mapped[str | None] = mapped_column(Text, nullable=True)
    environ: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    # Per kernel; the session's total is resources x cluster_size.
    resources: Mapped[dict[str, Any]] = mapped_column(SLOTS, nullable=False)
    cluster_size: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    cluster_mode: Mapped[str] = mapped_column(String(16), nullable=False, server_default="single-node")
    priority: Mapped[int] = mapped_column(Integer, nullable=False, server_default="10")
    preemptible: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=text("false"))
    # the run time it declares (seconds; NULL: none): past it, it ends LIFETIME_EXCEEDED (0018)
    max_duration: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    result: Mapped[str | None] = mapped_column(String(16), nullable=True)
    status_info: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    status_changed_at: Mapped[dt.datetime] = created_at_column()
    # How many times the handler of the current phase failed on this session.
    phase_attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    created_at: Mapped[dt.datetime] = created_at_column()
    terminated_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    parent_session_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("sessions.id"), nullable=True)
    retry_count: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    max_retries: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    retry_policy: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    retry_cause: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # A replica of a deployment (an inference session the deployment coordinator created).
    deployment_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("deployments.id"), nullable=True)


class Kernel(Base):
    __tablename__ = "kernels"
    __table_args__ = (Index("ix_kernels_agent_status", "agent_id", "status"),)
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    session_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False, index=True
    )
    cluster_role: Mapped[str] = mapped_column(String(16), nullable=False, server_default="main")
    cluster_idx: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id"), nullable=True)
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    status_info: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    status_changed_at: Mapped[dt.datetime] = created_at_column()
    occupied_slots: Mapped[dict[str, Any]] = mapped_column(SLOTS, nullable=False)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[dt.datetime] = created_at_column()
    terminated_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    # Where the kernel's server answers (`http://host:port`), reported by its agent when it runs.
    service_addr: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # The image the kernel runs as its agent resolved it, and its manifest digest (`sha256:…`);
    # reported by container agents when the kernel runs, NULL otherwise (CONTRACT section 11).
    image_ref: Mapped[str | None] = mapped_column(String(512), nullable=True)
    image_digest: Mapped[str | None] = mapped_column(String(128), nullable=True)
    # The UUIDs of the GPUs it was given when placed (`provisioner.devices`); empty for none.
    devices: Mapped[list[str]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_LIST)


class SessionDependency(Base):
    __tablename__ = "session_dependencies"
    session_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    depends_on: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class SessionSchedulingHistory(HandlerRun, Base):
    __tablename__ = "session_scheduling_history"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    session_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False, index=True
    )
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    created_at: Mapped[dt.datetime] = created_at_column()
    # Set when later runs with the same handler, outcome and statuses were merged into this row.
    updated_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)


class KernelSchedulingHistory(Base):
    __tablename__ = "kernel_scheduling_history"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    kernel_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("kernels.id", ondelete="CASCADE"), nullable=False, index=True
    )
    session_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False, index=True
    )
    source: Mapped[str] = mapped_column(String(64), nullable=False)
    from_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[dt.datetime] = created_at_column()


class AuditLog(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    actor: Mapped[str | None] = mapped_column(String(32), nullable=True)
    action: Mapped[str] = mapped_column(String(64), nullable=False)
    target: Mapped[str | None] = mapped_column(String(256), nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    created_at: Mapped[dt.datetime] = created_at_column()


class AgentHistory(HandlerRun, Base):
    """Every status change of an agent: what moved it (a lifecycle handler, a heartbeat, an
    operator's action), from → to, why, and who (the operator's access key; None for the system)."""

    __tablename__ = "agent_history"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(
        ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    actor: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[dt.datetime] = created_at_column()
