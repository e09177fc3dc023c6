"""HMAC signatures with the cluster secret.

Agent RPC requests and every message an agent puts on the event bus carry a signature, so that
nothing without the cluster secret can start a kernel or pose as an agent.
"""

from __future__ import annotations

import hashlib
import hmac


def sign(secret: str, payload: bytes) -> str:
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def verify(secret: str, payload: bytes, signature: str | None) -> bool:
    if not signature:
        return False
    return hmac.compare_digest(sign(secret, payload), signature)
