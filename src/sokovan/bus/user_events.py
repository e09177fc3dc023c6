"""Transitions as users see them: published on Redis pub/sub, streamed by `GET /v2/events`.

Every session and kernel transition the manager applies becomes one `UserEvent` on the channel
`<prefix>:user-events`; each manager's SSE endpoint subscribes to it and forwards to each client the
events it may see (its own sessions; an admin all). Delivery is live (pub/sub): a client that
reconnects reads the current state from the REST API, as with Kubernetes watches after a gap.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel, ConfigDict, Field

log = structlog.get_logger(__name__)


def user_events_channel(prefix: str) -> str:
    return f"{prefix}:user-events"


class UserEvent(BaseModel):
    """`name` is e.g. session.status, kernel.status, agent.status, deployment.status, route.status;
    `from`/`to` are statuses."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    at: dt.datetime = Field(default_factory=lambda: dt.datetime.now(dt.UTC))
    session_id: str | None = None
    kernel_id: str | None = None
    agent_id: str | None = None
    deployment_id: str | None = None
    route_id: str | None = None
    from_status: str | None = Field(default=None, alias="from")
    to_status: str | None = Field(default=None, alias="to")
    preempted_by: str | None = None  # session.preempted: the preemptor's id
    # Who may see it: the session's owner (user id); None for cluster events (admins only).
    owner: str | None = None
    detail: dict[str, object] = Field(default_factory=dict)

    def wire(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


async def publish(publisher: UserEventPublisher | None, events: Sequence[UserEvent]) -> None:
    """Publish after the fact: a lost user event never fails the transition it reports."""
    if publisher is None or not events:
        return
    try:
        await publisher.publish_many(events)
    except Exception:
        log.warning("user_events.publish_failed", count=len(events), exc_info=True)


class UserEventPublisher:
    def __init__(self, redis: aioredis.Redis, prefix: str) -> None:
        self._redis = redis
        self._channel = user_events_channel(prefix)

    async def publish_many(self, events: Sequence[UserEvent]) -> None:
        if not events:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for event in events:
                pipe.publish(self._channel, event.wire())
            await pipe.execute()
