"""The placement reasons render byte for byte as users read them in `status_info.pending_reason`."""

from __future__ import annotations

import uuid
from collections import Counter

from sokovan.orchestrator.provisioner import reasons
from sokovan.orchestrator.provisioner.reasons import AgentRefusal

SID = uuid.UUID("00000000-0000-0000-0000-000000000001")


def test_agent_refusals_read_as_before() -> None:
    assert {r.name: str(r) for r in AgentRefusal} == {
        "NOT_READY": "not READY",
        "UNSCHEDULABLE": "not schedulable",
        "IMAGE_NOT_OFFERED": "image not offered",
        "AT_KERNEL_LIMIT": "at kernel limit",
        "HELD": "room held for a preempting session",
        "RESERVED": "room reserved for a session queued ahead",
    }
    assert reasons.insufficient("cuda.device") == "insufficient cuda.device"


def test_preemption_messages() -> None:
    other = uuid.UUID(int=2)
    assert reasons.no_victims("0/1 agents fit: 1 insufficient cpu") == (
        "0/1 agents fit: 1 insufficient cpu; no lower-priority preemptible sessions would free enough room"
    )
    assert reasons.waiting_for_victims([SID, other], ["a", "a"]) == (
        f"waiting for preempted sessions {SID}, {other} to end on agent a"
    )
    assert (
        reasons.waiting_for_victims([SID], ["b", "a"])
        == f"waiting for preempted sessions {SID} to end on agents a, b"
    )
    assert reasons.preempted_by(SID, 50) == f"preempted by session {SID} (priority 50)"


def test_agents_fit_counts_the_most_frequent_first_and_ties_by_name() -> None:
    counted: Counter[str] = Counter(
        {reasons.insufficient("mem"): 1, AgentRefusal.NOT_READY: 1, reasons.insufficient("cpu"): 2}
    )
    assert (
        reasons.agents_fit(5, 1, counted)
        == "1/5 agents fit: 2 insufficient cpu, 1 insufficient mem, 1 not READY"
    )
    assert reasons.agents_fit(0, 0, Counter()) == "0/0 agents fit"
    assert reasons.multi_node_needs(3, "1/2 agents fit") == "multi-node needs 3 agents: 1/2 agents fit"
    assert reasons.queued_behind(SID) == f"queued behind session {SID} (queue policy: block)"


def test_validator_messages_read_as_before() -> None:
    assert reasons.at_concurrency_limit(2, 2) == "keypair at its concurrency limit (2/2 sessions)"
    assert reasons.over_pending_limit(3) == "keypair has more than 3 pending sessions; older ones go first"
    violation = reasons.quota_violation("project 'p'", ["cpu 6 > 4", "mem 8g > 4g"])
    assert violation == "project 'p': cpu 6 > 4, mem 8g > 4g"
    assert reasons.quota_exceeded([violation, "domain 'd': cpu 6 > 5"]) == (
        "quota exceeded: project 'p': cpu 6 > 4, mem 8g > 4g; domain 'd': cpu 6 > 5"
    )
    assert reasons.dependency_ended(SID, "ERROR", "FAILURE") == f"dependency {SID} ended ERROR/FAILURE"
    assert (
        reasons.dependency_ended(SID, reasons.MISSING_DEPENDENCY, None) == f"dependency {SID} ended missing"
    )
    assert reasons.waiting_for_dependencies([(SID, "RUNNING"), (SID, "PENDING")]) == (
        f"waiting for dependencies: {SID} (RUNNING), {SID} (PENDING)"
    )
    assert reasons.type_not_allowed("gpu", "batch", {"interactive", "inference"}) == (
        "scaling group 'gpu' no longer allows batch sessions (allows: inference, interactive)"
    )
    assert reasons.type_not_allowed("gpu", "batch", set()) == (
        "scaling group 'gpu' no longer allows batch sessions (allows: none)"
    )


def test_dry_run_and_allocator_messages_read_as_before() -> None:
    assert reasons.unknown_scaling_group("nope") == "scaling group 'nope' does not exist"
    assert reasons.rejected("dependency x ended ERROR", "DEPENDENCY_FAILED") == (
        "dependency x ended ERROR (DEPENDENCY_FAILED)"
    )
    assert reasons.WAITING == "waiting"
    assert reasons.filled_up(["a1", "a2"]) == "agent a1, a2 filled up meanwhile; retrying"
    assert reasons.PLACED_MEANWHILE == "placed meanwhile by another scheduler"
