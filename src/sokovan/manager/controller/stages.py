"""The placement stages an operator may name on a scaling group, as the API checks them.

The API reaches the orchestrator only through its controllers: this is the controller's view of
the provisioner's registry (the names it knows), so the request models never import it directly.
"""

from __future__ import annotations

from sokovan.orchestrator.provisioner import registry


def check_scheduler(value: str | None) -> str | None:
    """`value` if the provisioner knows a sequencer by that name (or None), else ValueError."""
    if value is not None and value not in registry.SEQUENCERS:
        raise ValueError(f"unknown scheduler {value!r} (known: {', '.join(sorted(registry.SEQUENCERS))})")
    return value


def check_selector(value: str | None) -> str | None:
    """`value` if the provisioner knows a selector by that name (or None), else ValueError."""
    if value is not None and value not in registry.SELECTORS:
        known = ", ".join(sorted(registry.SELECTORS))
        raise ValueError(f"unknown agent selection {value!r} (known: {known})")
    return value
