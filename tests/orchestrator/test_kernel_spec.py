"""What the manager sends an agent for each kernel (`agent_calls.kernel_spec`): every kernel of a
session learns the session's cluster size (a container agent derives the cluster's hostnames and
launcher variables from it), and an agent of before that reads no such field still reads the spec."""

from __future__ import annotations

import pytest

from sokovan.common.rpc import KernelSpec
from sokovan.orchestrator.schedule.agent_calls import kernel_spec
from tests.orchestrator.factories import session


@pytest.mark.parametrize(("size", "mode"), [(1, "single-node"), (3, "single-node"), (4, "multi-node")])
def test_every_kernel_learns_the_cluster_size(size: int, mode: str) -> None:
    s = session(size=size, mode=mode)
    specs = [kernel_spec(s, k) for k in s.kernels]
    assert [(spec.cluster_idx, spec.cluster_size) for spec in specs] == [(i, size) for i in range(size)]
    assert all(spec.image == "python:3" and spec.session_id == str(s.id) for spec in specs)


def test_a_spec_without_the_field_reads_as_a_single_kernel() -> None:
    spec = KernelSpec.model_validate({"kernel_id": "k", "session_id": "s", "image": "python:3"})
    assert spec.cluster_size == 1
    assert KernelSpec.model_validate_json(spec.model_dump_json()) == spec
