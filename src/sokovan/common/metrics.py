"""Prometheus metrics, module-level objects in the default registry (served by `GET /metrics`).

Increment them where the thing happens, e.g.::

    from sokovan.common import metrics
    metrics.SESSION_TRANSITIONS.labels(from_status="PENDING", to_status="SCHEDULED").inc()
    with metrics.CYCLE_SECONDS.labels(lane="schedule").time():
        ...
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest

# The text format `generate_latest()` writes (spelled out: CONTENT_TYPE_LATEST moved to 1.0.0 in 0.22+).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SLOT_DRIFT = Counter(
    "sokovan_slot_drift_total",
    "Agents whose occupied slots disagreed with the sum of their live kernels and were corrected",
)
SESSION_TRANSITIONS = Counter(
    "sokovan_session_transitions_total",
    "Session status transitions applied",
    ["from_status", "to_status"],
)
HANDLER_RUNS = Counter(
    "sokovan_handler_runs_total",
    "Scheduling handler runs, by handler and result",
    ["handler", "result"],
)
CYCLE_SECONDS = Histogram(
    "sokovan_cycle_seconds",
    "Duration of one coordinator cycle, by lane",
    ["lane"],
)
LANE_CYCLES = Counter(
    "sokovan_lane_cycles_total",
    "Coordinator cycles, by lane, kind (short: hinted; long: the safety net) and outcome "
    "(moved, fruitless: nothing to move, failed)",
    ["lane", "kind", "outcome"],
)
LANE_HINTS = Counter(
    "sokovan_lane_hints_total",
    "Hints a coordinator loop received where it holds its lane, by lane and kind (demand: more "
    "work that waits out the spacing after a fruitless cycle; news: anything else)",
    ["lane", "kind"],
)
EVENTS_CONSUMED = Counter(
    "sokovan_agent_events_total",
    "Agent events consumed from the event bus, by event name",
    ["name"],
)


def exposition() -> bytes:
    """The default registry in the Prometheus text format (`CONTENT_TYPE`)."""
    return generate_latest(REGISTRY)


SESSIONS_BY_STATUS = Gauge(
    "sokovan_sessions", "Sessions by status (the live ones: terminal statuses are left out)", ["status"]
)
SESSION_PENDING_OLDEST = Gauge(
    "sokovan_session_pending_oldest_seconds",
    "How long the longest-waiting PENDING session has been PENDING (0 when none is)",
)

RETRY_SCHEDULED = Counter(
    "sokovan_session_retry_scheduled_total", "Retries scheduled for failed sessions.", ["cause"]
)
RETRY_EXHAUSTED = Counter(
    "sokovan_session_retry_exhausted_total", "Failed sessions whose retries were all used.", ["cause"]
)
RETRY_SUCCEEDED = Counter("sokovan_session_retry_succeeded_total", "Retried sessions that ended in success.")


DEPLOYMENT_TRANSITIONS = Counter(
    "sokovan_deployment_transitions_total",
    "Deployment status transitions applied",
    ["from_status", "to_status"],
)
ROUTE_TRANSITIONS = Counter(
    "sokovan_route_transitions_total", "Route status transitions applied", ["from_status", "to_status"]
)
ROUTE_REPLICAS = Gauge("sokovan_route_replicas", "Replicas (routes) by route status", ["status"])
DEPLOYMENTS_BY_STATUS = Gauge(
    "sokovan_deployments", "Deployments by lifecycle status (DESTROYED ones left out)", ["status"]
)
ROUTE_EVICTIONS = Counter("sokovan_route_evictions_total", "Unhealthy routes evicted")
REPLICA_REPLACEMENTS = Counter(
    "sokovan_replica_replacements_total", "Replicas created to replace ones that were lost"
)


AGENT_TRANSITIONS = Counter(
    "sokovan_agent_transitions_total", "Agent status transitions applied", ["from_status", "to_status"]
)
AGENTS_BY_STATUS = Gauge("sokovan_agents", "Agents by status (node lifecycle)", ["status"])
# GPUs (CONTRACT section 15), from the agents' last heartbeats (`node.handlers.publish_devices`).
GPU_DEVICE_HEALTHY = Gauge(
    "sokovan_gpu_device_healthy", "1 while a GPU is healthy, 0 while unhealthy", ["agent", "device", "uuid"]
)
GPU_DEVICE_TEMPERATURE = Gauge(
    "sokovan_gpu_device_temperature_celsius", "A GPU's temperature", ["agent", "device"]
)
GPU_DEVICE_UTILIZATION = Gauge(
    "sokovan_gpu_device_utilization_percent", "A GPU's utilization over its last sample", ["agent", "device"]
)
GPU_DEVICE_MEMORY_USED = Gauge(
    "sokovan_gpu_device_memory_used_bytes", "A GPU's memory in use", ["agent", "device"]
)
GPU_DEVICE_ECC = Gauge(
    "sokovan_gpu_device_ecc_uncorrected", "A GPU's uncorrectable ECC errors (volatile)", ["agent", "device"]
)
GPU_KERNEL_DEVICES = Gauge(
    "sokovan_gpu_kernel_devices", "GPUs held by a live kernel", ["agent", "kernel", "session"]
)
HEARTBEATS_REPLAYED = Counter(
    "sokovan_heartbeats_replayed_total",
    "Heartbeats refused because their sequence did not grow within their boot (replays)",
)
MASS_SILENCE_HOLDS = Counter(
    "sokovan_agents_mass_silence_total",
    "Times more than half of a scaling group fell silent at once and DEGRADED -> DOWN was held",
    ["scaling_group"],
)
MASS_SILENCE = Gauge(
    "sokovan_agents_mass_silence_held",
    "1 while DEGRADED -> DOWN is held in a scaling group because most of it fell silent at once",
    ["scaling_group"],
)
AGENT_DRAINS = Counter("sokovan_agent_drains_total", "Operator drains of agents", ["urgent"])
RPC_REPLAYS_REFUSED = Counter(
    "sokovan_rpc_replays_refused_total", "Agent RPC requests refused as replays (nonce seen)"
)
BUS_REFUSED = Counter("sokovan_bus_messages_refused_total", "Bus messages refused, by reason", ["reason"])
RETENTION_REMOVED = Counter("sokovan_retention_removed_total", "Rows removed by retention, by kind", ["kind"])
PREEMPTIONS = Counter("sokovan_preemptions_total", "Sessions chosen as victims of preemption")
