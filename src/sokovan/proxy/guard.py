"""The proxy's guard (CONTRACT section 12): a deployment's access token and its in-flight limits.

- **Token.** A deployment whose routing-table entry has `token_sha256` takes only requests with
  `Authorization: Bearer <token>` whose SHA-256 matches (compared in constant time); anything else is
  401 with `WWW-Authenticate: Bearer`, and nothing reaches a replica. The header itself never
  crosses the proxy (`headers`). A name the table routes without an entry (an older table) is open
  and gets the default limits.
- **Limits.** At most the entry's `max_connections` requests in flight per deployment through this
  proxy, and at most `ProxyConfig.max_per_client` per client address *per deployment*: counting per
  (client, deployment) means one client's slow uploads to one deployment never block its own or
  anyone's calls to another deployment, while one client still cannot take a whole deployment's
  share. The client address is the connection's peer (X-Forwarded-For is the client's to write, so
  it is not trusted). Past either limit the answer is 429 with `Retry-After: 1`. A request holds its
  slot until its response is finished, including while it waits for a replica to start.
"""

from __future__ import annotations

import hashlib
import hmac
from types import TracebackType
from typing import TypeVar

from aiohttp import web
from multidict import CIMultiDictProxy

from sokovan.bus.routing import DeploymentEntry
from sokovan.proxy.problems import problem

DEFAULT_MAX_CONNECTIONS = 256  # for a routed name without an entry
K = TypeVar("K")


def bearer_token(headers: CIMultiDictProxy[str]) -> str | None:
    """The token of a single `Authorization: Bearer <token>` header, else None."""
    values = headers.getall("Authorization", [])
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authorized(entry: DeploymentEntry | None, headers: CIMultiDictProxy[str]) -> bool:
    if entry is None or entry.token_sha256 is None:
        return True
    token = bearer_token(headers)
    if token is None:
        return False
    digest = hashlib.sha256(token.encode()).hexdigest()
    return hmac.compare_digest(digest, entry.token_sha256.lower())


def unauthorized(name: str) -> web.Response:
    return problem(
        401,
        "Unauthorized",
        f"deployment {name!r} needs 'Authorization: Bearer <token>' with its access token",
        headers={"WWW-Authenticate": "Bearer"},
    )


def too_many(name: str, why: str) -> web.Response:
    return problem(429, "Too many requests", f"deployment {name!r}: {why}", headers={"Retry-After": "1"})


class Slot:
    """One admitted request; `release()` (or leaving the `with`) frees its place, once."""

    def __init__(self, limits: Limits, key: str, client: str) -> None:
        self._limits = limits
        self._key = key
        self._client = client
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._limits._leave(self._key, self._client)

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class Limits:
    """Requests in flight per deployment and per (deployment, client address)."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._deployments: dict[str, int] = {}
        self._clients: dict[tuple[str, str], int] = {}

    def inflight(self, key: str) -> int:
        return self._deployments.get(key, 0)

    def enter(self, key: str, client: str, max_connections: int) -> Slot | str:
        """A slot, or why not (the deployment or the client is at its limit)."""
        if self._deployments.get(key, 0) >= max_connections:
            return f"{max_connections} requests in flight already, the most it takes through this proxy"
        if self._clients.get((key, client), 0) >= self.per_client:
            return f"{self.per_client} requests from {client} in flight already, the most per client"
        self._deployments[key] = self._deployments.get(key, 0) + 1
        self._clients[(key, client)] = self._clients.get((key, client), 0) + 1
        return Slot(self, key, client)

    def _leave(self, key: str, client: str) -> None:
        _decrement(self._deployments, key)
        _decrement(self._clients, (key, client))


def _decrement(counts: dict[K, int], key: K) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
