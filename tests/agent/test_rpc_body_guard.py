"""An unauthenticated sender cannot make the agent hold its requests' bodies: what the headers can
tell is checked before the body is read, the bodies read before their signature can be checked
are few at once (the rest are refused at once), and each is read within a deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from sokovan.common.rpc import MAX_BODY, NONCE_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, signed_headers
from sokovan.common.signing import format_time, new_nonce
from tests.agent.rpc_stub import SECRET, RawRequest, plausible_headers, stub_server

BIG = MAX_BODY - 1  # declared, never sent


def _fresh() -> dict[str, str]:
    return {TIMESTAMP_HEADER: format_time(time.time()), NONCE_HEADER: new_nonce()}


REFUSED_HEADS = {
    "unsigned": lambda: {},
    "no signature": _fresh,
    "signature not hex": lambda: {**_fresh(), SIGNATURE_HEADER: "not-a-signature"},
    "stale": lambda: {**plausible_headers(), TIMESTAMP_HEADER: format_time(time.time() - 3600)},
    "malformed nonce": lambda: {**plausible_headers(), NONCE_HEADER: "z" * 32},
}


@pytest.mark.parametrize("case", sorted(REFUSED_HEADS))
async def test_many_unauthenticated_heads_are_401_before_any_body(case: str) -> None:
    """Hundreds of connections declaring a 16 MiB body each: every one is answered 401 from its
    headers alone, though no byte of its body was sent."""
    async with stub_server() as server:
        assert server.bound_port is not None
        requests = await asyncio.gather(
            *(
                RawRequest.send_head(server.bound_port, "create_kernels", REFUSED_HEADS[case](), BIG)
                for _ in range(200)
            )
        )
        try:
            statuses = await asyncio.gather(*(r.status() for r in requests))
        finally:
            await asyncio.gather(*(r.close() for r in requests))
    assert statuses == [401] * 200


async def test_a_declared_body_over_the_cap_is_413_before_it_is_read() -> None:
    async with stub_server(max_body=1000) as server:
        assert server.bound_port is not None
        request = await RawRequest.send_head(server.bound_port, "ping", plausible_headers(), 1001)
        try:
            assert await request.status() == 413
        finally:
            await request.close()


async def test_bodies_read_before_verification_are_capped_and_the_excess_refused_at_once() -> None:
    async with stub_server(max_reads=4, read_timeout=30.0) as server:
        port = server.bound_port
        assert port is not None
        slow = [await RawRequest.send_head(port, "ping", plausible_headers(), 100) for _ in range(4)]
        for request in slow:
            await request.send(b'{"a":')  # a slow sender: part of its body, then nothing
        await asyncio.sleep(0.3)  # the server reads all four
        extra = await RawRequest.send_head(port, "ping", plausible_headers(), 100)
        try:
            assert await extra.status(within=2.0) == 503
            # The slow ones finish their bodies: their signature is checked, and is wrong.
            for request in slow:
                await request.send(b" " * 95)
            assert [await r.status() for r in slow] == [401] * 4
        finally:
            await asyncio.gather(*(r.close() for r in [*slow, extra]))
        # The slots are free again: a signed request is served.
        ok = await RawRequest.send_head(port, "ping", signed_headers(SECRET, b"{}", method="ping"), 2)
        try:
            await ok.send(b"{}")
            assert await ok.status() == 200
        finally:
            await ok.close()


async def test_a_body_not_sent_in_time_is_408_and_frees_its_slot() -> None:
    async with stub_server(max_reads=1, read_timeout=0.3) as server:
        port = server.bound_port
        assert port is not None
        stalled = await RawRequest.send_head(port, "ping", plausible_headers(), 100)
        try:
            await stalled.send(b"{")
            assert await stalled.status(within=3.0) == 408
        finally:
            await stalled.close()
        ok = await RawRequest.send_head(port, "ping", signed_headers(SECRET, b"{}", method="ping"), 2)
        try:
            await ok.send(b"{}")
            assert await ok.status() == 200
        finally:
            await ok.close()
