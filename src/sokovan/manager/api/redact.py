"""What a user (not an admin) is not shown of what the cluster wrote for operators: agents' RPC
addresses and another keypair's access key, wherever they sit in a `status_info` document.

A key naming an RPC address (`rpc_addr`, `agent_rpc_addr`, ...) is left out; a key naming an access
key (`access_key`, `preempted_by_access_key`, ...) is left out unless its value is the caller's own.
"""

from __future__ import annotations

from typing import Any

from sokovan.manager.repositories.tenancy import Principal


def _hidden(key: str, value: Any, own_access_key: str) -> bool:
    name = key.lower()
    if name.endswith("rpc_addr"):
        return True
    return name.endswith("access_key") and value != own_access_key


def redact(value: Any, own_access_key: str) -> Any:
    """`value` without the keys a user may not see, at any depth."""
    if isinstance(value, dict):
        return {
            k: redact(v, own_access_key)
            for k, v in value.items()
            if not (isinstance(k, str) and _hidden(k, v, own_access_key))
        }
    if isinstance(value, list):
        return [redact(v, own_access_key) for v in value]
    return value


def shown_info(info: dict[str, Any], principal: Principal) -> dict[str, Any]:
    """A `status_info` as `principal` may see it: whole for an admin."""
    if principal.is_admin:
        return info
    out: dict[str, Any] = redact(info, principal.access_key)
    return out
