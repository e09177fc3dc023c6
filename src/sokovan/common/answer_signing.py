"""The signature on an agent's RPC answer, and the manager's check of it.

The manager acts on what an answer says (the events of `create_kernels`, a kernel's logs), so an
answer is signed like a request: HMAC-SHA256 with the cluster secret of the canonical string
(`signing.canonical`)::

    sokovan-rpc-answer-v1\n<status>\n/rpc/<method>\n<agent id>\n<timestamp>\n<request nonce>\n<sha256 of body>

Every answer to `POST /rpc/<method>` is signed, an error as much as a success. Its own tag and
its own headers (`X-Sokovan-Answer-*`) keep a request's signature from ever passing for an
answer's. The nonce is the one of the request answered: the manager signs each call with a fresh
random nonce and accepts only an answer signed over that nonce, so a recorded answer cannot be
played back for another call, and needs no nonce store of its own. The agent id is the agent that
answered (the request's `X-Sokovan-Agent`, or a real agent's own id when the request named none):
an answer from another agent than the one called is refused. The timestamp is the agent's clock,
accepted within `SKEW` of the manager's, as requests are.

Whatever fails the check is no answer at all: the caller treats it as an unreachable agent and
reads nothing of it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sokovan.common.signing import (
    SKEW,
    canonical,
    format_time,
    parse_time,
    sign,
    valid_nonce,
    verify,
    within_skew,
)

ANSWER_TAG = "sokovan-rpc-answer-v1"
ANSWER_SIGNATURE_HEADER = "X-Sokovan-Answer-Signature"
ANSWER_TIMESTAMP_HEADER = "X-Sokovan-Answer-Timestamp"
ANSWER_AGENT_HEADER = "X-Sokovan-Answer-Agent"
# The request's nonce, echoed to tell "an answer to another call" from a forgery in the logs; the
# check itself uses the nonce the caller sent.
ANSWER_NONCE_HEADER = "X-Sokovan-Answer-Nonce"

NOT_SIGNED = "agent answer not signed"


def answer_headers(
    secret: str,
    body: bytes,
    *,
    status: int,
    path: str,
    agent_id: str,
    request_nonce: object,
    now: float | None = None,
) -> dict[str, str]:
    """The headers signing the answer `body` with `status` to the request on `path` whose
    `X-Sokovan-Nonce` was `request_nonce` (a malformed one is signed as "", which no caller sends),
    from `agent_id`."""
    nonce = request_nonce if isinstance(request_nonce, str) and valid_nonce(request_nonce) else ""
    agent = agent_id if "\n" not in agent_id and "\r" not in agent_id else ""
    ts = format_time(now if now is not None else time.time())
    payload = canonical(ANSWER_TAG, [str(status), path, agent], ts, nonce, body)
    return {
        ANSWER_TIMESTAMP_HEADER: ts,
        ANSWER_AGENT_HEADER: agent,
        ANSWER_NONCE_HEADER: nonce,
        ANSWER_SIGNATURE_HEADER: sign(secret, payload),
    }


def answer_problem(
    secret: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    status: int,
    path: str,
    agent_id: str,
    nonce: str,
    now: float | None = None,
) -> str | None:
    """Why the answer (`status`, `headers`, `body`) is not the signed answer of `agent_id` ("":
    whichever agent the address serves) to the request on `path` signed with `nonce`; None when
    it is."""
    signature = headers.get(ANSWER_SIGNATURE_HEADER)
    if not signature:
        return NOT_SIGNED
    ts = headers.get(ANSWER_TIMESTAMP_HEADER) or ""
    timestamp = parse_time(ts)
    if timestamp is None:
        return "agent answer signed with a malformed timestamp"
    if not within_skew(timestamp, now if now is not None else time.time(), SKEW):
        return f"agent answer signed at {ts}, more than {SKEW:g} s from this clock"
    answering = headers.get(ANSWER_AGENT_HEADER) or ""
    if agent_id and answering != agent_id:
        return f"agent answer from agent {answering!r}, not {agent_id!r}"
    echoed = headers.get(ANSWER_NONCE_HEADER)
    if echoed is not None and echoed != nonce:
        return "agent answer signed for another request (its nonce is not this call's)"
    try:
        payload = canonical(ANSWER_TAG, [str(status), path, answering], ts, nonce, body)
    except ValueError:
        return "agent answer badly signed"
    if not verify(secret, payload, signature):
        return "agent answer badly signed"
    return None
