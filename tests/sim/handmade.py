"""Small traces written by hand, whose outcome can be worked out on paper."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sokovan.common.slots import ResourceSlots
from sokovan.sim.trace import Trace, TraceAgent, TraceGroup, TraceHeader, TraceSession

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
IMAGE = "python:3"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def session(
    sid: str, created: float, cpu: int, run: float | None, user: str = "alice", **extra: Any
) -> TraceSession:
    """A session of `user` asking `cpu` CPUs and 1 GiB, created `created` seconds after T0, that
    runs `run` seconds once started (None: it never ran in the trace)."""
    return TraceSession(
        id=sid,
        scaling_group="default",
        access_key=f"AK{user.upper()}",
        user=user,
        project="research",
        image=IMAGE,
        resources=ResourceSlots.parse({"cpu": cpu, "mem": "1g"}),
        created_at=at(created),
        run_seconds=run,
        **extra,
    )


def trace(
    sessions: list[TraceSession], cpu: int = 4, agents: int = 1, until: float = 20.0, **group: Any
) -> Trace:
    return Trace(
        header=TraceHeader(since=T0, until=at(until)),
        groups=[TraceGroup(name="default", **group)],
        agents=[
            TraceAgent(
                id=f"a{i}",
                scaling_group="default",
                available=ResourceSlots.parse({"cpu": cpu, "mem": "4g"}),
                images=[IMAGE],
            )
            for i in range(agents)
        ],
        sessions=sessions,
    )
