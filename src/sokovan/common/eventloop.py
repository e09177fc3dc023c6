"""How the daemons run their event loop: uvloop (libuv) where it is installed, else asyncio's own.

uvloop is a drop-in event loop that makes the loop's own work (sockets, timers, callbacks) several
times cheaper; the manager, the app proxy and the hollow fleet spend much of their CPU there.
The real agent keeps asyncio's loop: it starts and reaps kernels' processes, and asyncio's child
handling is the one its tests exercise.

The cyclic garbage collector stops the whole process while it runs; a full collection walks every
object the process holds, most of them the modules, classes and models loaded at start. Measured
in a busy manager: full collections of 90-150 ms, several a second under load, each one a pause
for every request in flight. So before the loop starts, what was loaded is frozen (`gc.freeze`:
left out of every later collection) and the youngest generation collects every `GC_THRESHOLD`
allocations instead of 700, which makes the full collections rarer too.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

GC_THRESHOLD = (50_000, 20, 100)


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency, but the daemons work without it
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], *, fast: bool = True) -> T:
    """`asyncio.run(main)`, on uvloop when `fast` and uvloop is installed, with the collector tuned
    for a long-lived daemon."""
    tune_gc()
    with asyncio.Runner(loop_factory=loop_factory() if fast else None) as runner:
        return runner.run(main)


def tune_gc() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
