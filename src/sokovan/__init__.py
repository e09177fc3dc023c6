"""Sokovan: a cluster session orchestrator."""

__version__ = "0.1.0"
