"""`GET /metrics`: Prometheus text format, no token needed."""

from __future__ import annotations

from sokovan.common import metrics
from tests.api.conftest import Api


async def test_metrics_without_a_token(api: Api) -> None:
    metrics.SESSION_TRANSITIONS.labels(from_status="PENDING", to_status="SCHEDULED").inc()
    metrics.CYCLE_SECONDS.labels(lane="schedule").observe(0.01)
    resp = await api.client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = await resp.text()
    assert "sokovan_slot_drift_total" in text
    for name in (
        "sokovan_session_transitions_total",
        "sokovan_handler_runs_total",
        "sokovan_cycle_seconds",
        "sokovan_agent_events_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name
    assert 'sokovan_session_transitions_total{from_status="PENDING",to_status="SCHEDULED"}' in text
    assert 'sokovan_cycle_seconds_count{lane="schedule"}' in text


async def test_metrics_ignores_a_bad_token(api: Api) -> None:
    resp = await api.client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert resp.status == 200
