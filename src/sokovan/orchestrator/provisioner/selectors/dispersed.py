"""Spreading: the fitting agent with the most room left (by the group's resource priority), so
that load is even and one agent's loss hurts few sessions. Ties go to the larger agent id."""

from __future__ import annotations

from sokovan.orchestrator.provisioner.selectors.scoring import IndexedSelector


class DispersedSelector(IndexedSelector):
    name = "dispersed"
    descending = True
