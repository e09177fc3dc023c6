"""Sessions by name (CONTRACT section 17): an index on `(name, user_id, created_at)`.

Wherever a session id is taken, the session's name is taken too: the caller's live sessions of
that name, else its newest ended one. Without an index that is a scan of every session. `name`
leads, so an admin's lookup (any owner) uses the index as well as a user's (`name` and `user_id`);
`created_at` last gives the newest first without a sort. An id prefix needs no index of its own:
it is a range of the primary key.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27 14:10:00
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_INDEX = "ix_sessions_name_user_created"


def upgrade() -> None:
    op.create_index(_INDEX, "sessions", ["name", "user_id", "created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="sessions")
