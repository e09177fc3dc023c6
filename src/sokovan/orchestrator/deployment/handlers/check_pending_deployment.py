"""PENDING → SCALING: a new deployment starts getting its replicas.

The API validated the request; what can change meanwhile is the scaling group (deleted, or no
longer allowing inference sessions): then the deployment waits, saying why.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from sokovan.common.types import SessionType
from sokovan.db.models import ScalingGroup
from sokovan.orchestrator.deployment.handler import DeploymentHandler, DeploymentTransitions, E
from sokovan.orchestrator.spine.outcome import OutcomeResult
from sokovan.state.serving_reads import DeploymentRow


class CheckPendingDeployment(DeploymentHandler):
    targets = frozenset({E.PENDING})
    transitions = DeploymentTransitions(success=E.SCALING, failure=None)

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def execute(self, rows: Sequence[DeploymentRow]) -> OutcomeResult:
        result = OutcomeResult()
        async with self._engine.connect() as conn:
            groups = {
                g.name: list(g.allowed_session_types or [])
                for g in await conn.execute(
                    select(ScalingGroup.name, ScalingGroup.allowed_session_types).where(
                        ScalingGroup.name.in_({d.scaling_group for d in rows})
                    )
                )
            }
        for d in rows:
            allowed = groups.get(d.scaling_group)
            if allowed is None:
                result.failures[d.id] = f"scaling group {d.scaling_group!r} does not exist"
            elif SessionType.INFERENCE.value not in allowed:
                result.failures[d.id] = f"scaling group {d.scaling_group!r} does not allow inference sessions"
            else:
                result.successes.append(d.id)
        return result
