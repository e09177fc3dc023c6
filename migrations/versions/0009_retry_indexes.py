"""Retry lane: partial indexes holding only the sessions still waiting for the lane (a retry to
decide, a retry to dispatch, a retried success to count), so its reads no longer scan every
session kept until retention.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 19:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# The predicates as they were when this revision was written (`sokovan.db.retry_rows`).
UNDECIDED = (
    "NOT (sessions.status_info ? 'retry') AND (sessions.status IN ('ERROR', 'CANCELLED')"
    " OR (sessions.status = 'TERMINATED' AND (sessions.status_info ->> 'cause') = 'PREEMPTED'))"
)
SCHEDULED = (
    "((sessions.status_info -> 'retry') ->> 'decision') = 'scheduled'"
    " AND NOT ((sessions.status_info -> 'retry') ? 'child')"
)
UNCOUNTED_SUCCESS = (
    "sessions.status = 'TERMINATED' AND sessions.result = 'SUCCESS' AND sessions.retry_count > 0"
    " AND NOT (sessions.status_info ? 'retry')"
)
INDEXES = (
    ("ix_sessions_retry_undecided", "created_at", UNDECIDED),
    ("ix_sessions_retry_scheduled", "created_at", SCHEDULED),
    ("ix_sessions_retry_uncounted", "id", UNCOUNTED_SUCCESS),
)


def upgrade() -> None:
    for name, col, where in INDEXES:
        op.create_index(name, "sessions", [col], unique=False, postgresql_where=sa.text(where))


def downgrade() -> None:
    for name, _, _ in INDEXES:
        op.drop_index(name, table_name="sessions")
