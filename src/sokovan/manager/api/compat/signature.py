"""Backend.AI's request signatures, Sokovan's second authentication scheme (beside bearer tokens).

The client (`ai.backend.common.auth.utils.generate_signature`) sends
`Authorization: BackendAI signMethod=HMAC-SHA256, credential=<access key>:<hex signature>`, a `Date`
header (ISO 8601, an aware datetime's `isoformat()`) and `X-BackendAI-Version`. It signs, one per line::

    <METHOD>\\n<path?query as sent>\\n<Date as sent>\\nhost:<Host>\\ncontent-type:<type>\\n
    x-backendai-version:<version>\\n<sha256 hex of EMPTY bytes: the body is never hashed>

with the key HMAC(HMAC(secret key, the date's YYYYMMDD), Host). The content type is the request's
media type lowercased, without parameters (the client signs `multipart/form-data` for an upload
whose header carries a boundary), `application/octet-stream` when there is no Content-Type header
(the event stream sends none).

The server accepts a Date within `WINDOW` of its clock and each signature once: an accepted
signature is remembered in Redis (`<prefix>:compat:sig:<signature>`, SET NX) until its date leaves
the window, so a replayed request is refused. Every refusal is a 401 problem that says why, and
writes nothing. A keypair's secret is read sealed from PostgreSQL (`common.secret_box`), opened
with the cluster secret and kept `SignerCache.TTL` seconds per process, so a rotated secret stops
working within that time (at once in the process that rotated it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import math
import re
import time

import structlog
from aiohttp import web

from sokovan.common.secret_box import SecretBoxError, open_sealed
from sokovan.manager.api.problems import Problem
from sokovan.manager.context import ManagerContext
from sokovan.manager.repositories.tenancy import Principal, signer_of

log = structlog.get_logger(__name__)

SCHEME = "backendai"
WINDOW = dt.timedelta(minutes=15)
_HEADER = re.compile(
    r"BackendAI\s+signMethod=HMAC-(?P<hash>[A-Za-z0-9-]+)\s*,\s*"
    r"credential=(?P<access_key>[A-Za-z0-9]{1,32}):(?P<signature>[0-9A-Fa-f]{64})\s*"
)
_EMPTY_BODY = hashlib.sha256(b"").hexdigest()
_CHALLENGE = {"WWW-Authenticate": 'BackendAI realm="sokovan"'}
_SHAPE = "BackendAI signMethod=HMAC-SHA256, credential=<access key>:<64 hex digits>"


def _refuse(detail: str) -> Problem:
    return Problem(401, "Unauthorized", detail, headers=_CHALLENGE)


def parse_date(text: str) -> dt.datetime:
    """The Date header of a signed request as an aware datetime (UTC when it names no zone);
    ValueError when it is not ISO 8601."""
    date = dt.datetime.fromisoformat(text.strip())
    return date if date.tzinfo is not None else date.replace(tzinfo=dt.UTC)


def signature_of(
    *, secret_key: str, method: str, rel_url: str, date: str, host: str, content_type: str, version: str
) -> str:
    """The hex signature the client computes for these parts (`date`: the Date header as sent)."""
    signed = (
        f"{method.upper()}\n{rel_url}\n{date}\nhost:{host}\ncontent-type:{content_type.lower()}\n"
        f"x-backendai-version:{version}\n{_EMPTY_BODY}"
    )
    day = parse_date(date).strftime("%Y%m%d")
    key = hmac.new(secret_key.encode(), day.encode(), hashlib.sha256).digest()
    key = hmac.new(key, host.encode(), hashlib.sha256).digest()
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


class SignerCache:
    """Opened secret keys (with their keypair's principal) seen in the last `TTL` seconds, by
    access key. Only keypairs that have a secret are kept; `forget` drops one at once."""

    TTL = 5.0

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._items: dict[str, tuple[float, Principal, str]] = {}

    def get(self, access_key: str) -> tuple[Principal, str] | None:
        hit = self._items.get(access_key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1], hit[2]

    def put(self, access_key: str, principal: Principal, secret_key: str) -> None:
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[access_key] = (time.monotonic() + self.TTL, principal, secret_key)

    def forget(self, access_key: str) -> None:
        self._items.pop(access_key, None)


SIGNERS = SignerCache()


async def _signer(ctx: ManagerContext, access_key: str) -> tuple[Principal, str]:
    cached = SIGNERS.get(access_key)
    if cached is not None:
        return cached
    if not ctx.settings.cluster_secret:
        raise _refuse(
            "this manager has no cluster secret, so it takes no signed requests: use a bearer token"
        )
    async with ctx.engine.connect() as conn:
        found = await signer_of(conn, access_key)
    if found is None:
        raise _refuse(f"unknown or inactive access key {access_key}")
    principal, sealed = found
    if sealed is None:
        raise _refuse(
            f"keypair {access_key} has no secret key yet: make one with POST /v2/keypairs/{access_key}/secret"
        )
    try:
        secret_key = open_sealed(sealed, ctx.settings.cluster_secret)
    except SecretBoxError as exc:
        log.warning("a keypair's secret key cannot be opened", access_key=access_key, error=str(exc))
        raise _refuse(
            f"the secret key of keypair {access_key} cannot be read (was the cluster secret changed?): "
            f"rotate it with POST /v2/keypairs/{access_key}/secret"
        ) from exc
    SIGNERS.put(access_key, principal, secret_key)
    return principal, secret_key


def _date_of(request: web.Request) -> tuple[str, dt.datetime]:
    text = request.headers.get("Date") or request.headers.get("X-BackendAI-Date")
    if not text:
        raise _refuse("a signed request needs a Date header (ISO 8601, e.g. 2026-01-02T03:04:05.678+00:00)")
    try:
        date = parse_date(text)
    except ValueError as exc:
        raise _refuse(f"the Date header {text[:64]!r} is not an ISO 8601 date and time") from exc
    skew = abs((dt.datetime.now(dt.UTC) - date).total_seconds())
    if skew > WINDOW.total_seconds():
        raise _refuse(
            f"the request's Date is {skew:.0f} s away from the server's clock "
            f"(at most {WINDOW.total_seconds():.0f} s): check the client's clock"
        )
    return text, date


async def principal_from_signature(request: web.Request, ctx: ManagerContext) -> Principal:
    """The caller of a request signed the Backend.AI way, or a 401 problem saying what is wrong."""
    match = _HEADER.fullmatch(request.headers.get("Authorization", "").strip())
    if match is None:
        raise _refuse(f"malformed BackendAI authorization: expected {_SHAPE}")
    if match["hash"].lower() != "sha256":
        raise _refuse(f"unsupported signMethod HMAC-{match['hash']}: only HMAC-SHA256 is accepted")
    date_text, date = _date_of(request)
    access_key, signature = match["access_key"], match["signature"].lower()
    principal, secret_key = await _signer(ctx, access_key)
    expected = signature_of(
        secret_key=secret_key,
        method=request.method,
        rel_url=request.raw_path,
        date=date_text,
        host=request.headers.get("Host", ""),  # not request.host: without one it asks the resolver
        content_type=request.content_type,
        version=request.headers.get("X-BackendAI-Version", ""),
    )
    if not hmac.compare_digest(expected, signature):
        raise _refuse(
            "signature mismatch: check the secret key, and that the client signs the host and path "
            "this server sees"
        )
    # Remembered until the date leaves the window: a replay after that is refused for its date.
    remaining = (date + WINDOW - dt.datetime.now(dt.UTC)).total_seconds()
    key = f"{ctx.settings.etcd_prefix}:compat:sig:{signature}"
    if not await ctx.redis.set(key, b"1", nx=True, ex=max(1, math.ceil(remaining))):
        raise _refuse("replayed request: this signature was accepted before (sign each request anew)")
    return principal
