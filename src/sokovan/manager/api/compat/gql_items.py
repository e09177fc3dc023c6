"""Sokovan's sessions, kernels and keypairs as the objects of Backend.AI's GraphQL (`gql_schema`).

Each builder takes what the reads gave (a session's REST view from `sessions_read`, its
`SessionExtras`, a `KeypairInfo`) and gives a dict keyed by the schema's field names; graphql-core
then answers only the fields a query selects, in its order. Values Sokovan does not have are None.
A session's `status_info` (Sokovan's document) becomes Backend.AI's pair: `status_info`, a short
string (the cause of an ending, or why it is pending), and `status_data`, the whole document, as
the caller may see it (`redact`).
"""

from __future__ import annotations

import uuid
from typing import Any

from sokovan.common.slots import ResourceSlots
from sokovan.common.types import KernelStatus, Role
from sokovan.manager.api.compat.mapping import bai_result, bai_status
from sokovan.manager.api.redact import shown_info
from sokovan.manager.repositories.compat_read import KernelExtras, KeypairInfo, SessionExtras
from sokovan.manager.repositories.tenancy import Principal

_HOLDING = {s.value for s in KernelStatus.slot_holding()}


def status_line(info: dict[str, Any]) -> str | None:
    """Backend.AI's one-line `status_info`: what ended it (`cause`) or why it waits."""
    for key in ("cause", "pending_reason"):
        value = info.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def occupying(kernels: list[dict[str, Any]], extras: SessionExtras | None) -> dict[str, str]:
    """What the session's kernels hold now: the slots of those placed on an agent and not ended."""
    if extras is None:
        return {}
    held = [
        ResourceSlots.from_json(extras.kernels[uuid.UUID(k["id"])].occupied_slots)
        for k in kernels
        if k["agent_id"] is not None and k["status"] in _HOLDING and uuid.UUID(k["id"]) in extras.kernels
    ]
    return ResourceSlots.total(held).to_json()


def container_item(
    kernel: dict[str, Any], session_id: str, extra: KernelExtras | None, principal: Principal
) -> dict[str, Any]:
    """One kernel (`kernel`: an entry of a session view's `kernels`) as a ComputeContainer."""
    info = shown_info(extra.status_info, principal) if extra else {}
    return {
        "id": kernel["id"],
        "kernel_id": kernel["id"],
        "idx": extra.cluster_idx if extra else None,
        "cluster_idx": extra.cluster_idx if extra else None,
        "role": kernel["cluster_role"],
        "cluster_role": kernel["cluster_role"],
        "session_id": session_id,
        "image": kernel["image"],
        "status": kernel["status"],
        "status_changed": extra.status_changed_at if extra else None,
        "status_info": status_line(info),
        "status_data": info,
        "created_at": extra.created_at if extra else None,
        "terminated_at": extra.terminated_at if extra else None,
        "agent": kernel["agent_id"],
        "occupied_slots": ResourceSlots.from_json(extra.occupied_slots if extra else {}).to_json(),
        "preopen_ports": [],
    }


def session_item(view: dict[str, Any], extras: SessionExtras | None, principal: Principal) -> dict[str, Any]:
    """One session (`view`: as `sessions_read` reads it for REST) as a ComputeSession."""
    kernels: list[dict[str, Any]] = view["kernels"]
    info = shown_info(view["status_info"], principal)
    agents = list(dict.fromkeys(k["agent_id"] for k in kernels if k["agent_id"] is not None))
    kernel_extras = extras.kernels if extras else {}
    session_type = str(view["type"]).upper()
    return {
        "id": view["id"],
        "session_id": view["id"],
        "main_kernel_id": kernels[0]["id"] if kernels else None,
        "name": view["name"],
        "type": session_type,
        "main_kernel_role": session_type,
        "priority": view["priority"],
        "image": view["image"],
        "cluster_mode": view["cluster_mode"],
        "cluster_size": view["cluster_size"],
        "domain_name": extras.domain_name if extras else None,
        "group_name": extras.project_name if extras else None,
        "group_id": extras.project_id if extras else None,
        "user_email": view["owner"],
        "user_id": extras.user_id if extras else None,
        "access_key": view["access_key"],
        "status": bai_status(view["status"]),
        "status_changed": view["status_changed_at"],
        "status_info": status_line(info),
        "status_data": info,
        "created_at": view["created_at"],
        "terminated_at": view["terminated_at"],
        "startup_command": view["command"],
        "result": bai_result(view["result"]),
        "abusing_reports": [],
        "agent_ids": agents,
        "agents": agents,
        "scaling_group": view["scaling_group"],
        "mounts": [],
        "vfolder_mounts": [],
        "occupying_slots": occupying(kernels, extras),
        "occupied_slots": occupying(kernels, extras),
        "requested_slots": ResourceSlots.from_json(view["resources"]).scaled(view["cluster_size"]).to_json(),
        "containers": [
            container_item(k, view["id"], kernel_extras.get(uuid.UUID(k["id"])), principal) for k in kernels
        ],
        "_depends_on": view["depends_on"],  # for the `dependencies` resolver; not a field
    }


def keypair_item(kp: KeypairInfo) -> dict[str, Any]:
    """A keypair as Backend.AI's KeyPair: `user_id` is the user's name (Backend.AI's email); the
    secret key is never shown (Sokovan keeps only a token's hash)."""
    return {
        "user_id": kp.user_name,
        "user_info": {"email": kp.user_name, "full_name": None},
        "user": kp.user_id,
        "projects": [kp.project_name],
        "access_key": kp.access_key,
        "is_active": kp.is_active,
        "is_admin": kp.role == Role.ADMIN,
        "created_at": kp.created_at,
        "resource_policy": kp.resource_policy,
        "concurrency_used": kp.concurrency_used,
    }
