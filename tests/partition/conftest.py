"""The partition tests start real daemons from the fault tests' clean state (empty tables, no
leftover streams, fast timings in etcd): `fresh_cluster_state` for a cluster of their own, or the
node lifecycle tests' module manager (`cluster`) and per-test scaling group and agents (`node`)."""

from tests.fault.conftest import fresh_cluster_state
from tests.fault.test_node_lifecycle import cluster, node

__all__ = ["cluster", "fresh_cluster_state", "node"]
