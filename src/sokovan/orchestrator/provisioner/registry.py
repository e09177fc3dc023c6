"""Stages by name. An unknown name is an error, never a silent fallback."""

from __future__ import annotations

from collections.abc import Callable

from sokovan.orchestrator.provisioner.selectors.concentrated import ConcentratedSelector
from sokovan.orchestrator.provisioner.sequencers.fifo import FIFOSequencer
from sokovan.orchestrator.provisioner.stages import Selector, Sequencer, Validator
from sokovan.orchestrator.provisioner.validators.concurrency import ConcurrencyValidator

SEQUENCERS: dict[str, Callable[[], Sequencer]] = {"fifo": FIFOSequencer}
SELECTORS: dict[str, Callable[[], Selector]] = {"concentrated": ConcentratedSelector}
VALIDATORS: dict[str, Callable[[], Validator]] = {"concurrency": ConcurrencyValidator}
DEFAULT_VALIDATORS = ("concurrency",)


class UnknownStage(LookupError):
    """A scheduler, selector or validator name that no stage answers to."""


def _lookup(kind: str, table: dict[str, Callable[[], object]], name: str) -> object:
    try:
        return table[name]()
    except KeyError:
        raise UnknownStage(f"unknown {kind} {name!r} (known: {', '.join(sorted(table))})") from None


def sequencer(name: str) -> Sequencer:
    stage: Sequencer = _lookup("scheduler", dict(SEQUENCERS), name)  # type: ignore[assignment]
    return stage


def selector(name: str) -> Selector:
    stage: Selector = _lookup("agent selection", dict(SELECTORS), name)  # type: ignore[assignment]
    return stage


def validators(names: tuple[str, ...] = DEFAULT_VALIDATORS) -> list[Validator]:
    return [_lookup("validator", dict(VALIDATORS), n) for n in names]  # type: ignore[misc]
