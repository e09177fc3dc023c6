"""Bin-packing: the fitting agent with the least room left (by the group's resource priority),
so that whole agents stay free for big sessions. Ties go to the smaller agent id."""

from __future__ import annotations

from sokovan.orchestrator.provisioner.selectors.scoring import IndexedSelector


class ConcentratedSelector(IndexedSelector):
    name = "concentrated"
    descending = False
