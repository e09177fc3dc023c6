"""How the daemons run their event loop: uvloop (libuv) where it is installed, else asyncio's own.

uvloop is a drop-in event loop that makes the loop's own work (sockets, timers, callbacks) several
times cheaper; the manager, the app proxy and the hollow fleet spend much of their CPU there.
The real agent keeps asyncio's loop: it starts and reaps kernels' processes, and asyncio's child
handling is the one its tests exercise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency, but the daemons work without it
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """`asyncio.run(main)`, on uvloop when `fast` and uvloop is installed."""
    with asyncio.Runner(loop_factory=loop_factory() if fast else None) as runner:
        return runner.run(main)
