"""Every route of the Backend.AI surface, for `create_app` to mount."""

from __future__ import annotations

from sokovan.manager.api.compat import events, gql, root, sessions
from sokovan.manager.api.openapi import Route


def compat_routes() -> list[Route]:
    """Every route of the surface; mounted beside `/v2` and left out of its OpenAPI document (the
    client's protocol is Backend.AI's, not Sokovan's contract)."""
    return [*root.ROUTES, *sessions.ROUTES, *events.ROUTES, *gql.ROUTES]
