"""Status enums and value types shared by the manager, the agents and the CLI.

The names and values are part of the external contract: clients read and send them as they are.
"""

from __future__ import annotations

import enum


class SessionStatus(enum.StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"

    @classmethod
    def terminal(cls) -> frozenset[SessionStatus]:
        return frozenset({cls.TERMINATED, cls.ERROR, cls.CANCELLED})

    @classmethod
    def non_terminal(cls) -> frozenset[SessionStatus]:
        return frozenset(cls) - cls.terminal()

    @property
    def is_terminal(self) -> bool:
        return self in SessionStatus.terminal()


class KernelStatus(enum.StrEnum):
    PENDING = "PENDING"
    SCHEDULED = "SCHEDULED"
    PREPARING = "PREPARING"
    PULLING = "PULLING"
    PREPARED = "PREPARED"
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    ERROR = "ERROR"
    CANCELLED = "CANCELLED"

    @classmethod
    def terminal(cls) -> frozenset[KernelStatus]:
        return frozenset({cls.TERMINATED, cls.ERROR, cls.CANCELLED})

    @classmethod
    def non_terminal(cls) -> frozenset[KernelStatus]:
        return frozenset(cls) - cls.terminal()

    @classmethod
    def slot_holding(cls) -> frozenset[KernelStatus]:
        """Statuses in which a kernel placed on an agent (agent_id set) holds slots there: from the
        moment the allocator binds it — still PENDING until its session's move commits — until it
        ends."""
        return cls.non_terminal()

    @property
    def is_terminal(self) -> bool:
        return self in KernelStatus.terminal()


class AgentStatus(enum.StrEnum):
    UNKNOWN = "UNKNOWN"
    BOOTING = "BOOTING"
    READY = "READY"
    DEGRADED = "DEGRADED"
    DOWN = "DOWN"
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    FAILED = "FAILED"

    @classmethod
    def reporting(cls) -> frozenset[AgentStatus]:
        """Statuses of an agent that beats and answers: the manager reconciles kernels with it
        and destroys what it still runs for kernels that ended."""
        return frozenset({cls.READY, cls.BOOTING, cls.DRAINING, cls.DRAINED})


class AgentClass(enum.StrEnum):
    """How long a silent agent is given before it is DOWN (its grace period; seed 002)."""

    STANDARD = "standard"
    SENSITIVE = "sensitive"
    BORROWED = "borrowed"


class EndpointLifecycle(enum.StrEnum):
    """A deployment's status (model serving)."""

    PENDING = "PENDING"
    SCALING = "SCALING"
    READY = "READY"  # the live routes match the target and every one is HEALTHY
    DEGRADED = "DEGRADED"  # the live routes match the target, fewer of them HEALTHY
    DEPLOYING = "DEPLOYING"  # an update (a new revision) is rolling out
    DESTROYING = "DESTROYING"
    DESTROYED = "DESTROYED"


class RouteStatus(enum.StrEnum):
    """A replica's route: its entry in the routing table and its health."""

    PROVISIONING = "PROVISIONING"
    HEALTHY = "HEALTHY"
    UNHEALTHY = "UNHEALTHY"
    DEGRADED = "DEGRADED"
    TERMINATING = "TERMINATING"
    TERMINATED = "TERMINATED"
    FAILED_TO_START = "FAILED_TO_START"

    @classmethod
    def live(cls) -> frozenset[RouteStatus]:
        """A route that counts as a replica: it has not been given up."""
        return frozenset({cls.PROVISIONING, cls.HEALTHY, cls.UNHEALTHY, cls.DEGRADED})

    @classmethod
    def probed(cls) -> frozenset[RouteStatus]:
        """Routes whose replica runs: the proxy probes their health."""
        return frozenset({cls.HEALTHY, cls.UNHEALTHY, cls.DEGRADED})


class HandlerOutcome(enum.StrEnum):
    """What a deployment or route handler run came to (their history's `result`)."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    STALE = "STALE"


class DeploymentType(enum.StrEnum):
    CUSTOM = "custom"
    VLLM = "vllm"
    TGI = "tgi"
    SGLANG = "sglang"


class SchedulingResult(enum.StrEnum):
    SUCCESS = "SUCCESS"
    NEED_RETRY = "NEED_RETRY"
    EXPIRED = "EXPIRED"
    GIVE_UP = "GIVE_UP"
    SKIPPED = "SKIPPED"


class SessionResult(enum.StrEnum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class FailureCause(enum.StrEnum):
    AGENT_TRANSIENT = "AGENT_TRANSIENT"
    SCHEDULER_TIMEOUT = "SCHEDULER_TIMEOUT"
    IMAGE_PULL_FAILURE = "IMAGE_PULL_FAILURE"
    KERNEL_NONZERO_EXIT = "KERNEL_NONZERO_EXIT"
    OOM_KILLED = "OOM_KILLED"
    UNKNOWN = "UNKNOWN"
    USER_CANCELLED = "USER_CANCELLED"
    VALIDATION_ERROR = "VALIDATION_ERROR"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"
    NODE_DRAINED = "NODE_DRAINED"
    LIFETIME_EXCEEDED = "LIFETIME_EXCEEDED"
    PREEMPTED = "PREEMPTED"


class SessionType(enum.StrEnum):
    BATCH = "batch"
    INTERACTIVE = "interactive"
    INFERENCE = "inference"


class ClusterMode(enum.StrEnum):
    SINGLE_NODE = "single-node"
    MULTI_NODE = "multi-node"


class Role(enum.StrEnum):
    USER = "user"
    ADMIN = "admin"
