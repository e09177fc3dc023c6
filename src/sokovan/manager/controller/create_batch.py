"""Group commit for session creates: admitted creates that arrive together are written together.

`CreateBatcher.submit` queues one admitted create and waits for its own answer. A batch leaves
when `window` seconds passed since the first create queued, or `max_batch` are queued; at most
`max_in_flight` batches are written at once, and whatever queues meanwhile leaves as the next
batch, so batches grow with the load and a lone create waits only the window.

A batch is one statement when no owner in it has a pending limit (`insert_sessions`, run without
a transaction of its own: a statement is atomic). When some owner has one, the batch is a
transaction that first holds those owners' keypair rows and counts their PENDING sessions, so that
the limit holds across batches and managers (`plan_batch` admits up to the limit, in order of
arrival, and refuses the rest with 429).

Idempotency: within a batch, the first create of an `(access_key, creation_id)` is written and
the others with that key get its id (`created=False`); across batches and managers the unique
constraint decides, and a create whose key exists gets the existing session (`created=False`).
A batch that fails on a transient conflict (deadlock, serialization) is retried; one that fails
for any other reason is retried create by create, so a bad create fails alone; an outage, or a
write that hangs past `WRITE_TIMEOUT`, fails them all (the API answers 503 and the client may
retry with its creation_id).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from sokovan.common.outages import is_outage
from sokovan.db.engine import autocommit
from sokovan.manager.controller.admission import too_many_pending
from sokovan.manager.repositories.session_inserts import (
    Inserted,
    NewSession,
    existing_sessions,
    insert_sessions,
    lock_and_count_pending,
)

log = structlog.get_logger(__name__)

WINDOW = 0.002  # seconds a batch waits for company after its first create
MAX_BATCH = 256
MAX_IN_FLIGHT = 2
TRANSIENT_TRIES = 3
# A batch that has not been written after this long (a connection that hangs rather than fails)
# fails its creates as an outage (503), so that it never holds up the batches behind it.
WRITE_TIMEOUT = 15.0
_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})  # serialization failure, deadlock detected


@dataclass(frozen=True)
class PendingLimit:
    """The owner's `max_pending_sessions` (and the policy that sets it, for the refusal)."""

    cap: int
    policy_name: str | None


@dataclass(frozen=True)
class CreateRequest:
    session: NewSession
    pending_limit: PendingLimit | None = None


@dataclass(frozen=True)
class Created:
    """One create's answer: the session, and whether this create made it (`inserted`: its
    timestamps) or found it made by an earlier create with the same creation_id."""

    session_id: uuid.UUID
    inserted: Inserted | None

    @property
    def created(self) -> bool:
        return self.inserted is not None


@dataclass(frozen=True)
class _Insert:
    pass


@dataclass(frozen=True)
class _Follow:
    leader: int  # the index of the create of the batch with the same key


Decision = _Insert | _Follow | Created | Exception


def plan_batch(
    requests: Sequence[CreateRequest],
    existing: Mapping[tuple[str, str], uuid.UUID],
    pending: Mapping[str, int],
) -> tuple[list[NewSession], list[Decision]]:
    """What to write and what each create is answered, in order of arrival: an existing key is
    answered with its session, a key seen earlier in the batch follows that create, an owner at
    its pending limit (`pending`: its PENDING count now) is refused, the rest are written."""
    counts = dict(pending)
    claimed: dict[tuple[str, str], int] = {}
    writes: list[NewSession] = []
    decisions: list[Decision] = []
    for i, request in enumerate(requests):
        session, key, limit = request.session, request.session.key, request.pending_limit
        if key is not None and key in existing:
            decisions.append(Created(existing[key], None))
            continue
        if key is not None and key in claimed:
            decisions.append(_Follow(claimed[key]))
            continue
        if limit is not None:
            count = counts.get(session.access_key, 0)
            if count >= limit.cap:
                decisions.append(too_many_pending(session.access_key, count, limit.cap, limit.policy_name))
                continue
            counts[session.access_key] = count + 1
        if key is not None:
            claimed[key] = i
        writes.append(session)
        decisions.append(_Insert())
    return writes, decisions


def resolve(
    requests: Sequence[CreateRequest],
    decisions: Sequence[Decision],
    inserted: Mapping[uuid.UUID, Inserted],
    existing: Mapping[tuple[str, str], uuid.UUID],
) -> list[Created | Exception]:
    """Each create's answer once the batch is written (`existing`: also the keys that conflicted)."""
    out: list[Created | Exception] = []
    for request, decision in zip(requests, decisions, strict=True):
        session = request.session
        if isinstance(decision, _Insert):
            if session.id in inserted:
                out.append(Created(session.id, inserted[session.id]))
            elif session.key is not None and session.key in existing:
                out.append(Created(existing[session.key], None))
            else:
                out.append(RuntimeError(f"session {session.id} was neither written nor found"))
        elif isinstance(decision, _Follow):
            leader = out[decision.leader]
            out.append(Created(leader.session_id, None) if isinstance(leader, Created) else leader)
        else:
            out.append(decision)
    return out


async def write_batch(conn: AsyncConnection, requests: Sequence[CreateRequest]) -> list[Created | Exception]:
    """Write `requests` on `conn` (in a transaction when some owner has a pending limit)."""
    limited = [r for r in requests if r.pending_limit is not None]
    pending = await lock_and_count_pending(conn, {r.session.access_key for r in limited})
    existing = await existing_sessions(conn, [r.session.key for r in limited if r.session.key])
    writes, decisions = plan_batch(requests, existing, pending)
    inserted = await insert_sessions(conn, writes)
    conflicts = [s.key for s in writes if s.id not in inserted and s.key is not None]
    if conflicts:
        existing = {**existing, **await existing_sessions(conn, conflicts)}
    return resolve(requests, decisions, inserted, existing)


def _transient(exc: BaseException) -> bool:
    current: BaseException | None = exc
    while current is not None:
        if getattr(current, "sqlstate", None) in _TRANSIENT_SQLSTATES:
            return True
        current = getattr(current, "orig", None) or current.__cause__
    return False


class CreateBatcher:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        window: float = WINDOW,
        max_batch: int = MAX_BATCH,
        max_in_flight: int = MAX_IN_FLIGHT,
        on_created: Callable[[], object] | None = None,
    ) -> None:
        self._engine = engine
        # One statement needs no transaction around it: no BEGIN and COMMIT round trips.
        self._autocommit = autocommit(engine)
        self._window = window
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._on_created = on_created
        self._queue: list[tuple[CreateRequest, asyncio.Future[Created]]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, request: CreateRequest) -> Created:
        """Queue one admitted create; its answer (or its own error) once its batch is written."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Created] = loop.create_future()
        self._queue.append((request, future))
        if len(self._queue) >= self._max_batch:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._window, self._flush)
        return await future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # A create whose request was cancelled before its batch left is not written.
        self._queue = [(request, future) for request, future in self._queue if not future.done()]
        while self._queue and self._in_flight < self._max_in_flight:
            batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
            self._in_flight += 1
            task = asyncio.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[CreateRequest, asyncio.Future[Created]]]) -> None:
        try:
            results = await self._write([request for request, _ in batch])
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():  # its request was cancelled meanwhile
                    continue
                if isinstance(result, Created):
                    future.set_result(result)
                else:
                    future.set_exception(result)
            if self._on_created is not None and any(isinstance(r, Created) and r.created for r in results):
                self._on_created()
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else RuntimeError("the create batch was interrupted")
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._in_flight -= 1
            if self._queue:
                self._flush()

    async def _write(self, requests: Sequence[CreateRequest]) -> list[Created | Exception]:
        """The batch; after a failure that is not an outage, each create on its own."""
        try:
            return await self._write_retrying(requests)
        except Exception as exc:
            if is_outage(exc) or len(requests) == 1:
                raise
            log.warning(
                "create batch failed; writing its creates one by one", size=len(requests), exc_info=True
            )
        out: list[Created | Exception] = []
        for request in requests:
            try:
                out += await self._write_retrying([request])
            except Exception as exc:
                out.append(exc)
        return out

    async def _write_retrying(self, requests: Sequence[CreateRequest]) -> list[Created | Exception]:
        for attempt in range(1, TRANSIENT_TRIES + 1):
            try:
                async with asyncio.timeout(WRITE_TIMEOUT):
                    if any(r.pending_limit is not None for r in requests):
                        async with self._engine.begin() as conn:
                            return await write_batch(conn, requests)
                    async with self._autocommit.connect() as conn:
                        return await write_batch(conn, requests)
            except Exception as exc:
                if attempt == TRANSIENT_TRIES or not _transient(exc):
                    raise
                log.info("create batch conflicted; retrying", attempt=attempt, size=len(requests))
        raise AssertionError("unreachable")
