"""The partition tests start real daemons from the fault tests' clean state (empty tables, no
leftover streams, fast timings in etcd)."""

from tests.fault.conftest import fresh_cluster_state

__all__ = ["fresh_cluster_state"]
