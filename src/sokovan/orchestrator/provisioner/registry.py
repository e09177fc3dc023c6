"""Stages by name. An unknown name is an error, never a silent fallback."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sokovan.orchestrator.provisioner.selectors.concentrated import ConcentratedSelector
from sokovan.orchestrator.provisioner.selectors.dispersed import DispersedSelector
from sokovan.orchestrator.provisioner.selectors.roundrobin import RoundRobinSelector
from sokovan.orchestrator.provisioner.sequencers.drf import DRFSequencer
from sokovan.orchestrator.provisioner.sequencers.fair_share import FairShareSequencer
from sokovan.orchestrator.provisioner.sequencers.fifo import FIFOSequencer
from sokovan.orchestrator.provisioner.sequencers.lifo import LIFOSequencer
from sokovan.orchestrator.provisioner.stages import Selector, Sequencer, Validator
from sokovan.orchestrator.provisioner.validators.concurrency import ConcurrencyValidator
from sokovan.orchestrator.provisioner.validators.dependencies import DependencyValidator
from sokovan.orchestrator.provisioner.validators.pending_limit import PendingLimitValidator
from sokovan.orchestrator.provisioner.validators.quota import QuotaValidator
from sokovan.orchestrator.provisioner.validators.session_type import SessionTypeValidator

SEQUENCERS: dict[str, Callable[[], Sequencer]] = {
    "fifo": FIFOSequencer,
    "lifo": LIFOSequencer,
    "drf": DRFSequencer,
    "fair_share": FairShareSequencer,
}
SELECTORS: dict[str, Callable[[], Selector]] = {
    "concentrated": ConcentratedSelector,
    "dispersed": DispersedSelector,
    "roundrobin": RoundRobinSelector,
}
VALIDATORS: dict[str, Callable[[], Validator]] = {
    "session_type": SessionTypeValidator,
    "dependencies": DependencyValidator,
    "pending_limit": PendingLimitValidator,
    "concurrency": ConcurrencyValidator,
    "quota": QuotaValidator,
}
DEFAULT_VALIDATORS = ("session_type", "dependencies", "pending_limit", "concurrency", "quota")
QUEUE_POLICIES = ("backfill", "block", "reserve")

T = TypeVar("T")


class UnknownStage(LookupError):
    """A scheduler, selector, validator or queue policy name that nothing answers to."""


def _lookup(kind: str, table: dict[str, Callable[[], T]], name: str) -> T:
    try:
        return table[name]()
    except KeyError:
        raise UnknownStage(f"unknown {kind} {name!r} (known: {', '.join(sorted(table))})") from None


def sequencer(name: str) -> Sequencer:
    return _lookup("scheduler", SEQUENCERS, name)


def selector(name: str) -> Selector:
    return _lookup("agent selection", SELECTORS, name)


def validators(names: tuple[str, ...] = DEFAULT_VALIDATORS) -> list[Validator]:
    return [_lookup("validator", VALIDATORS, n) for n in names]


def queue_policy(name: str) -> str:
    if name not in QUEUE_POLICIES:
        raise UnknownStage(f"unknown queue policy {name!r} (known: {', '.join(QUEUE_POLICIES)})")
    return name
