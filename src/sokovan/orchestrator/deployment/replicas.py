"""How the serving coordinators create and end replica sessions, without knowing the API side.

A replica is an ordinary `inference` session, admitted and placed like any other (quotas apply; one
that cannot be placed says why). The manager gives the orchestrator an implementation backed by its
SchedulingController; the orchestrator only sees this protocol, so it never imports the manager.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol

from sokovan.state.serving_reads import replica_creation_id


@dataclass(frozen=True)
class ReplicaSpec:
    access_key: str  # the deployment owner's keypair: the replica is theirs
    deployment_id: uuid.UUID
    name: str
    image: str
    command: str | None
    resources: dict[str, Any]
    scaling_group: str
    # One per route: creating it again (another manager, a retry after a crash) finds the same session.
    creation_id: str
    environ: dict[str, str] = field(default_factory=dict)


class ReplicaRefused(Exception):
    """Admission refused the replica (quota that can never fit, image gone, ...): a failed start."""


class ReplicaSessions(Protocol):
    async def ensure(self, spec: ReplicaSpec) -> uuid.UUID:
        """The replica's session id, creating the session unless `creation_id` already made one."""

    async def terminate(self, access_key: str, session_id: uuid.UUID) -> None:
        """End the replica session (idempotent; one already gone is fine)."""


def replica_spec(
    access_key: str,
    deployment_id: uuid.UUID,
    deployment_name: str,
    route_id: uuid.UUID,
    definition: dict[str, Any],
    scaling_group: str,
) -> ReplicaSpec:
    return ReplicaSpec(
        access_key=access_key,
        deployment_id=deployment_id,
        name=f"{deployment_name}-{route_id.hex[:8]}",
        image=str(definition["image"]),
        command=definition.get("command"),
        resources=dict(definition.get("resources") or {}),
        scaling_group=scaling_group,
        creation_id=replica_creation_id(route_id),
        environ={str(k): str(v) for k, v in (definition.get("environ") or {}).items()},
    )
