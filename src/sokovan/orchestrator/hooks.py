"""Hooks per session type: what differs between batch, interactive and inference sessions.

`admit` runs with the validators before placement; `kernel_environ` adds to a kernel's
environment when it starts (the session's own `environ` wins over it).
"""

from __future__ import annotations

from typing import Protocol

from sokovan.common.types import FailureCause, SessionType
from sokovan.orchestrator.provisioner.stages import Reject, Verdict
from sokovan.state.session_reads import SessionWithKernels


class SessionHook(Protocol):
    session_type: SessionType

    def admit(self, session: SessionWithKernels) -> Verdict: ...

    def kernel_environ(self, session: SessionWithKernels) -> dict[str, str]: ...


class BatchHook:
    """A batch session is a command that runs to its end; without one there is nothing to run."""

    session_type = SessionType.BATCH

    def admit(self, session: SessionWithKernels) -> Verdict:
        if not (session.command or "").strip():
            return Reject(FailureCause.VALIDATION_ERROR.value, "a batch session needs a command")
        return None

    def kernel_environ(self, session: SessionWithKernels) -> dict[str, str]:
        return {"SOKOVAN_SESSION_TYPE": "batch"}


class InteractiveHook:
    """An interactive session lives until terminated; without a command it idles."""

    session_type = SessionType.INTERACTIVE

    def admit(self, session: SessionWithKernels) -> Verdict:
        return None

    def kernel_environ(self, session: SessionWithKernels) -> dict[str, str]:
        return {"SOKOVAN_SESSION_TYPE": "interactive"}


class InferenceHook:
    """An inference session serves a model; it is told its role so a server can bind accordingly."""

    session_type = SessionType.INFERENCE

    def admit(self, session: SessionWithKernels) -> Verdict:
        return None

    def kernel_environ(self, session: SessionWithKernels) -> dict[str, str]:
        return {"SOKOVAN_SESSION_TYPE": "inference"}  # its port comes from the agent, as PORT


HOOKS: dict[str, SessionHook] = {
    h.session_type.value: h for h in (BatchHook(), InteractiveHook(), InferenceHook())
}


def hook_for(session: SessionWithKernels) -> SessionHook | None:
    return HOOKS.get(session.type)
