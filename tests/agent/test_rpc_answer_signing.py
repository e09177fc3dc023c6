"""The manager reads an agent's RPC answer only once its signature holds (`common.answer_signing`).

Whatever holds an agent's RPC port while the agent restarts receives the manager's calls: a stand-in
here (an aiohttp server on 127.0.0.1) answers a `create_kernels` with a 200 naming the kernel and an
event saying where it serves. Unsigned, signed without the secret, a request's signature passed off
as an answer's, another agent's answer, another call's answer played back: each is an RPC failure
(`RPCError` without a status, as an unreachable agent), logged, never read. Genuine answers of a
real agent and of a hollow fleet, errors included, are read as before.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web
from pydantic import BaseModel

from sokovan.agent.daemon import AgentDaemon
from sokovan.common.answer_signing import (
    ANSWER_AGENT_HEADER,
    ANSWER_NONCE_HEADER,
    ANSWER_SIGNATURE_HEADER,
    ANSWER_TIMESTAMP_HEADER,
    NOT_SIGNED,
    answer_headers,
    answer_problem,
)
from sokovan.common.rpc import (
    AGENT_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AgentRPCClient,
    CreateKernelsRequest,
    RPCError,
    rpc_path,
)
from tests.agent.conftest import FleetFactory, signed, spec
from tests.agent.rpc_stub import SECRET, stub_server

AGENT = "agent-a"
Answer = Callable[[web.Request, bytes], web.Response]


@asynccontextmanager
async def stand_in(answer: Answer) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 answering every `POST /rpc/<method>` with `answer(request, body)`;
    its `host:port`."""

    async def handle(request: web.Request) -> web.Response:
        return answer(request, await request.read())

    app = web.Application()
    app.router.add_post("/rpc/{method}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def rpc() -> AsyncIterator[AgentRPCClient]:
    client = AgentRPCClient(SECRET, timeout=5)
    yield client
    await client.close()


def forged_start(request_body: bytes) -> bytes:
    """A 200's body claiming every kernel of the call started, serving on the forger's address."""
    kernels = CreateKernelsRequest.model_validate_json(request_body).kernels
    events = [
        {"name": "kernel.running", "kernel_id": k.kernel_id, "agent_id": AGENT, "service_addr": "6.6.6.6:80"}
        for k in kernels
    ]
    return json.dumps({"accepted": [k.kernel_id for k in kernels], "events": events}).encode()


def response(body: bytes, headers: Mapping[str, str] | None = None, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json", headers=headers)


def signed_as(request: web.Request, body: bytes, **overrides: Any) -> dict[str, str]:
    """Answer headers as the agent `AGENT` signs them for `request`, but for what `overrides` say."""
    options: dict[str, Any] = {
        "status": 200,
        "path": request.path,
        "agent_id": AGENT,
        "request_nonce": request.headers.get(NONCE_HEADER),
        **overrides,
    }
    secret = options.pop("secret", SECRET)
    return answer_headers(secret, body, **options)


def unsigned(request: web.Request, body: bytes) -> web.Response:
    return response(forged_start(body))


def without_the_secret(request: web.Request, body: bytes) -> web.Response:
    answer = forged_start(body)
    return response(answer, signed_as(request, answer, secret="a guess"))


def request_signature_as_answer(request: web.Request, body: bytes) -> web.Response:
    """The request's own signature, time, nonce and body sent back as a signed answer (and under
    the request's header names too): a different tag keeps it from passing."""
    echoed = {name: request.headers[name] for name in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)}
    return response(
        body,
        {
            **echoed,
            ANSWER_SIGNATURE_HEADER: request.headers[SIGNATURE_HEADER],
            ANSWER_TIMESTAMP_HEADER: request.headers[TIMESTAMP_HEADER],
            ANSWER_NONCE_HEADER: request.headers[NONCE_HEADER],
            ANSWER_AGENT_HEADER: request.headers[AGENT_HEADER],
        },
    )


def another_agents(request: web.Request, body: bytes) -> web.Response:
    answer = forged_start(body)
    return response(answer, signed_as(request, answer, agent_id="agent-b"))


def another_agents_relabelled(request: web.Request, body: bytes) -> web.Response:
    answer = forged_start(body)
    return response(answer, {**signed_as(request, answer, agent_id="agent-b"), ANSWER_AGENT_HEADER: AGENT})


def stale(request: web.Request, body: bytes) -> web.Response:
    answer = forged_start(body)
    return response(answer, signed_as(request, answer, now=time.time() - 3600))


def body_swapped(request: web.Request, body: bytes) -> web.Response:
    """A genuine (empty) answer's signature over a body that names the kernels."""
    return response(forged_start(body), signed_as(request, b'{"accepted":[]}'))


def status_swapped(request: web.Request, body: bytes) -> web.Response:
    """A refusal's signature on a 200."""
    answer = forged_start(body)
    return response(answer, signed_as(request, answer, status=404))


def for_another_method(request: web.Request, body: bytes) -> web.Response:
    answer = forged_start(body)
    return response(answer, signed_as(request, answer, path=rpc_path("check_and_pull")))


FORGED: dict[str, tuple[Answer, str]] = {
    "unsigned": (unsigned, NOT_SIGNED),
    "signed without the secret": (without_the_secret, "badly signed"),
    "the request's signature": (request_signature_as_answer, "badly signed"),
    "another agent's": (another_agents, "from agent 'agent-b', not 'agent-a'"),
    "another agent's, relabelled": (another_agents_relabelled, "badly signed"),
    "stale": (stale, "more than 300 s"),
    "another body's": (body_swapped, "badly signed"),
    "another status's": (status_swapped, "badly signed"),
    "another method's": (for_another_method, "badly signed"),
}


@pytest.mark.parametrize("case", sorted(FORGED))
async def test_a_stand_ins_create_kernels_answer_is_refused(case: str, rpc: AgentRPCClient) -> None:
    forge, reason = FORGED[case]
    kernel = spec("true")
    async with stand_in(forge) as addr:
        with structlog.testing.capture_logs() as logs, pytest.raises(RPCError) as raised:
            await rpc.create_kernels(addr, [kernel], agent_id=AGENT)
    assert reason in str(raised.value)
    assert raised.value.status is None  # as an unreachable agent: no status read from the answer
    refused = [e for e in logs if e["event"] == "rpc.answer_refused"]
    assert len(refused) == 1 and refused[0]["log_level"] == "warning"
    assert refused[0]["reason"] == str(raised.value).split(": ", 1)[1]
    assert (refused[0]["method"], refused[0]["agent_id"], refused[0]["rpc_addr"]) == (
        "create_kernels",
        AGENT,
        addr,
    )


async def test_an_unsigned_error_is_no_status_either(rpc: AgentRPCClient) -> None:
    """A stand-in's 413 would make the manager split its batch: unsigned, it is only a failure."""

    def too_large(request: web.Request, body: bytes) -> web.Response:
        return response(b'{"error": "request body over 1 bytes"}', status=413)

    async with stand_in(too_large) as addr:
        with pytest.raises(RPCError, match=NOT_SIGNED) as raised:
            await rpc.create_kernels(addr, [spec("true")], agent_id=AGENT)
    assert raised.value.status is None


async def _answer_of(agent: AgentDaemon, method: str, body: bytes) -> tuple[int, dict[str, str], bytes, str]:
    """A genuine answer of `agent` to a signed request: status, headers, body, the request's nonce."""
    headers = signed(agent, body, method=method)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"http://{agent.rpc_addr}{rpc_path(method)}", data=body, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read(), headers[NONCE_HEADER]


async def test_a_genuine_answer_played_back_for_another_call_is_refused(
    agent: AgentDaemon, client: AgentRPCClient
) -> None:
    first = spec(None)
    body = CreateKernelsRequest(kernels=[first]).model_dump_json().encode()
    await client.check_and_pull(agent.rpc_addr, [first])
    status, headers, answer, nonce = await _answer_of(agent, "create_kernels", body)
    secret = agent.settings.cluster_secret or ""
    path = rpc_path("create_kernels")
    assert status == 200 and b"kernel.running" in answer
    # It is the genuine answer to the request it answers ...
    assert (
        answer_problem(secret, answer, headers, status=200, path=path, agent_id=agent.agent_id, nonce=nonce)
        is None
    )
    signed_headers = {k: v for k, v in headers.items() if k.startswith("X-Sokovan-Answer-")}

    def played_back(request: web.Request, _: bytes) -> web.Response:
        return response(answer, signed_headers)

    def played_back_renonced(request: web.Request, _: bytes) -> web.Response:
        return response(answer, {**signed_headers, ANSWER_NONCE_HEADER: request.headers[NONCE_HEADER]})

    # ... and to no other: not as it was recorded, nor with the new call's nonce written in.
    second = spec("true")
    for forge, reason in (
        (played_back, "signed for another request"),
        (played_back_renonced, "badly signed"),
    ):
        async with stand_in(forge) as addr:
            with pytest.raises(RPCError, match=reason):
                await client.create_kernels(addr, [second], agent_id=agent.agent_id)


async def test_a_real_agents_answers_are_signed_and_read(agent: AgentDaemon, client: AgentRPCClient) -> None:
    kernel = spec(None)
    pulled = await client.check_and_pull(agent.rpc_addr, [kernel], agent_id=agent.agent_id)
    assert pulled.accepted == [kernel.kernel_id]
    started = await client.create_kernels(agent.rpc_addr, [kernel])  # no agent named: its own id signs
    assert [e["name"] for e in started.events] == ["kernel.running"]
    # An error is signed too: its status is read (a 404 here, a 413 splits a batch).
    with pytest.raises(RPCError, match="unknown kernel") as raised:
        await client.logs(agent.rpc_addr, "no-such-kernel", agent_id=agent.agent_id)
    assert raised.value.status == 404
    status, headers, _, nonce = await _answer_of(agent, "ping", b"{}")
    assert status == 200
    assert (headers[ANSWER_AGENT_HEADER], headers[ANSWER_NONCE_HEADER]) == (agent.agent_id, nonce)


async def test_a_hollow_fleets_answers_are_signed_by_the_agent_called(
    fleet_factory: FleetFactory, client: AgentRPCClient
) -> None:
    fleet = await fleet_factory(2)
    kernel = spec("sleep 30")
    await client.check_and_pull(fleet.rpc_addr, [kernel], agent_id="hollow-0001")
    started = await client.create_kernels(fleet.rpc_addr, [kernel], agent_id="hollow-0001")
    assert started.accepted == [kernel.kernel_id]
    assert started.events[0]["agent_id"] == "hollow-0001"
    with pytest.raises(RPCError, match="unknown agent") as raised:
        await client.create_kernels(fleet.rpc_addr, [spec("true")], agent_id="hollow-9999")
    assert raised.value.status == 404


class Padded(BaseModel):
    pad: str


async def test_a_refusal_before_the_body_is_read_is_signed_too(rpc: AgentRPCClient) -> None:
    """The 413 of a body over the agent's limit keeps its status: the manager splits its batch on it."""
    async with stub_server(max_body=1024) as server:
        with pytest.raises(RPCError, match="HTTP 413") as raised:
            await rpc.call(server.rpc_addr, "ping", Padded(pad="x" * 4096), agent_id="stub-agent")
        assert raised.value.status == 413
        with pytest.raises(RPCError, match="HTTP 404") as raised:
            await rpc.call(server.rpc_addr, "ping", Padded(pad=""), agent_id="someone-else")
        assert raised.value.status == 404


def test_a_request_signature_never_verifies_as_an_answer() -> None:
    """Same secret, body, time, nonce and path: the tags (and fields) differ, so the signatures do."""
    from sokovan.common.rpc import signed_headers

    body, nonce, now = b"{}", "ab" * 16, time.time()
    request = signed_headers(SECRET, body, method="ping", agent_id=AGENT, now=now, nonce=nonce)
    answer = answer_headers(
        SECRET, body, status=200, path=rpc_path("ping"), agent_id=AGENT, request_nonce=nonce, now=now
    )
    assert answer[ANSWER_TIMESTAMP_HEADER] == request[TIMESTAMP_HEADER]
    assert answer[ANSWER_SIGNATURE_HEADER] != request[SIGNATURE_HEADER]
    forged = {**answer, ANSWER_SIGNATURE_HEADER: request[SIGNATURE_HEADER]}
    check = {"status": 200, "path": rpc_path("ping"), "agent_id": AGENT, "nonce": nonce, "now": now}
    assert answer_problem(SECRET, body, answer, **check) is None
    assert answer_problem(SECRET, body, forged, **check) == "agent answer badly signed"
    malformed = {**answer, ANSWER_TIMESTAMP_HEADER: "nan"}
    assert (
        answer_problem(SECRET, body, malformed, **check) == "agent answer signed with a malformed timestamp"
    )
