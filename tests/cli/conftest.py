"""Run the real `sokovan` console script against an API served on a real port."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sokovan.common.types import SchedulingResult, SessionStatus
from sokovan.state.session_writes import SessionTransition
from tests.api.conftest import Api, api, ctx, publisher  # noqa: F401  (fixtures reused)

SOKOVAN = str(Path(sys.executable).with_name("sokovan"))
TIMEOUT = 60.0


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


async def start_cli(*args: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """`sokovan <args>`, started, with its stdout and stderr piped."""
    return await asyncio.create_subprocess_exec(
        SOKOVAN, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )


async def run_cli(*args: str, env: dict[str, str]) -> Result:
    proc = await start_cli(*args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


def session_move(sid: uuid.UUID, src: str, dst: str) -> SessionTransition:
    """The guarded move of session `sid` from `src` to `dst`, as a handler named "test" makes it."""
    return SessionTransition(
        session_id=sid,
        expected=frozenset({SessionStatus(src)}),
        to_status=SessionStatus(dst),
        handler="test",
        result=SchedulingResult.SUCCESS,
    )


@pytest.fixture
def cli_env(api: Api, service_env: dict[str, str]) -> dict[str, str]:  # noqa: F811
    """alice's token and the served API's URL."""
    return {
        **service_env,
        "SOKOVAN_API": str(api.client.make_url("")).rstrip("/"),
        "SOKOVAN_TOKEN": api.alice["Authorization"].removeprefix("Bearer "),
    }
