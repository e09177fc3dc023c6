"""Deployments (model serving), their routes, and the history of both: the tables of the
Deployment and Route coordinators."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import Boolean, DateTime, Float, ForeignKey, Index, Integer, String, column, false
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from sokovan.common.types import EndpointLifecycle
from sokovan.db.base import EMPTY_JSON, Base, HandlerRun, created_at_column


class Deployment(Base):
    """A deployment keeps `replicas` replicas of an HTTP service alive (EndpointLifecycle status).

    `definition` is what its type's generator produced (image, command, environ, resources,
    health_check); `replica_seq` numbers the replicas it ever created, so each has one creation key.
    A name is unique among deployments that are not DESTROYED.
    """

    __tablename__ = "deployments"
    __table_args__ = (
        Index(
            "uq_deployments_live_name",
            "name",
            unique=True,
            postgresql_where=column("status") != EndpointLifecycle.DESTROYED.value,
        ),
        Index("ix_deployments_status", "status"),
    )
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(40), nullable=False)
    type: Mapped[str] = mapped_column(String(16), nullable=False)
    access_key: Mapped[str] = mapped_column(ForeignKey("keypairs.access_key"), nullable=False)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), nullable=False)
    project_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("projects.id"), nullable=False)
    domain_name: Mapped[str] = mapped_column(ForeignKey("domains.name"), nullable=False)
    scaling_group: Mapped[str] = mapped_column(ForeignKey("scaling_groups.name"), nullable=False)
    replicas: Mapped[int] = mapped_column(Integer, nullable=False)
    definition: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    health_check: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    replica_seq: Mapped[int] = mapped_column(Integer, nullable=False, server_default="0")
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    status_info: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    status_changed_at: Mapped[dt.datetime] = created_at_column()
    created_at: Mapped[dt.datetime] = created_at_column()
    destroyed_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    # Revisions and updates (migration 0015): `definition`/`health_check` are those of `revision`.
    revision: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")
    rollout: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    serving_revision: Mapped[int | None] = mapped_column(Integer, nullable=True)
    autoscaling: Mapped[dict[str, Any] | None] = mapped_column(JSONB, nullable=True)
    token_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    open_to_public: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=false())
    backoff_until: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    drain_timeout: Mapped[float] = mapped_column(Float, nullable=False, server_default="30")


class Route(Base):
    """One replica's entry in the routing table (RouteStatus) and its last known health."""

    __tablename__ = "routes"
    __table_args__ = (Index("ix_routes_deployment_status", "deployment_id", "status"),)
    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    deployment_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False
    )
    session_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("sessions.id"), nullable=True, unique=True
    )
    status: Mapped[str] = mapped_column(String(16), nullable=False, index=True)
    status_info: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    endpoint: Mapped[str | None] = mapped_column(String(256), nullable=True)
    # consecutive_successes, consecutive_failures, last_checked_at, last_status (from the proxy)
    health: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False, server_default=EMPTY_JSON)
    status_changed_at: Mapped[dt.datetime] = created_at_column()
    created_at: Mapped[dt.datetime] = created_at_column()
    terminated_at: Mapped[dt.datetime | None] = mapped_column(nullable=True)
    revision: Mapped[int] = mapped_column(Integer, nullable=False, server_default="1")


class DeploymentRevision(Base):
    """What one revision of a deployment runs: its replicas are created from this, not from the
    deployment's current definition (which an update has moved on)."""

    __tablename__ = "deployment_revisions"
    deployment_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    definition: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    health_check: Mapped[dict[str, Any]] = mapped_column(JSONB, nullable=False)
    created_at: Mapped[dt.datetime] = created_at_column()


class DeploymentHistory(HandlerRun, Base):
    __tablename__ = "deployment_history"
    deployment_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False, index=True
    )


class RouteHistory(HandlerRun, Base):
    __tablename__ = "route_history"
    route_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("routes.id", ondelete="CASCADE"), nullable=False, index=True
    )
