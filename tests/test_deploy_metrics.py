"""The dashboard and the alerting rules under deploy/ query only metrics Sokovan exposes.

Every PromQL expression of deploy/grafana/sokovan.json and deploy/prometheus/sokovan-rules.yml is
reduced to the series names it reads (functions, aggregations, keywords, label matchers, grouping
labels, ranges, strings and Grafana variables taken out; an unknown function is an error, so a
misspelt one fails too), and each name must be a series that a real manager's (or, for
`sokovan_proxy_*`, a real app proxy's) `GET /metrics` exposes: a counter as `<name>_total`, a
histogram as `<name>_bucket`/`_sum`/`_count`, a gauge as its name, declared by its `# TYPE` line
even before it has a sample. The rules file is also checked for shape (alert, expr, for, severity,
summary on every rule).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sokovan.common import metrics
from sokovan.harness import truncate_tables
from sokovan.harness.process import wait_until
from sokovan.proxy import metrics as proxy_metrics
from tests.e2e.cluster import Cluster

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "sokovan.json"
RULES = DEPLOY / "prometheus" / "sokovan-rules.yml"
PROXY_PREFIX = "sokovan_proxy_"

# PromQL's functions (called with parentheses) and aggregation operators.
FUNCTIONS = frozenset(
    """abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp
    clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month
    deg delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
    histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate
    label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time
    minute month pi predict_linear present_over_time quantile_over_time rad rate resets round scalar
    sgn sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
    stdvar_over_time sum_over_time tan tanh time timestamp vector year start end""".split()
)
AGGREGATIONS = frozenset(
    "sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio".split()
)
KEYWORDS = frozenset(
    "by without on ignoring group_left group_right bool and or unless offset atan2 inf nan".split()
)

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE)
_TOKENS = re.compile(r"\d[\w.]*|[A-Za-z_:][\w:]*")
_CALL = re.compile(r"\s*\(")


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads. ValueError for a call of an unknown function."""
    text = _STRINGS.sub('""', expr)
    text = _VARIABLES.sub("", text)
    text = _MATCHERS.sub("", text)
    text = _RANGES.sub("", text)
    text = _GROUPING.sub(r"\1", text)
    names: set[str] = set()
    for token in _TOKENS.finditer(text):
        word = token.group()
        if word[0].isdigit() or word.lower() in KEYWORDS:
            continue
        if _CALL.match(text, token.end()):
            if word not in FUNCTIONS and word.lower() not in AGGREGATIONS:
                raise ValueError(f"unknown PromQL function {word!r} in {expr!r}")
        elif word.lower() not in AGGREGATIONS:
            names.add(word)
    return names


def exposed_series(exposition: str) -> set[str]:
    """Every series name a Prometheus text exposition offers, including the families declared by
    `# TYPE` that have no sample yet (a labelled metric before its first use)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names |= _series_of(name, kind)
        elif line and not line.startswith("#"):
            first = _TOKENS.match(line)
            assert first is not None, line
            names.add(first.group())
    return names


def _series_of(name: str, kind: str) -> set[str]:
    if kind == "counter":
        base = name.removesuffix("_total")
        return {f"{base}_total", f"{base}_created"}
    if kind == "histogram":
        return {f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count", "_created")}
    if kind == "summary":
        return {name} | {f"{name}{suffix}" for suffix in ("_sum", "_count", "_created")}
    return {name}


def dashboard_exprs(node: Any) -> Iterator[str]:
    """Every `expr` in a Grafana dashboard (panels, rows' nested panels, any depth)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from dashboard_exprs(item)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def all_exprs() -> list[str]:
    return [*dashboard_exprs(json.loads(DASHBOARD.read_text())), *(str(r["expr"]) for r in rules())]


def missing(exprs: list[str], manager: str, proxy: str) -> set[str]:
    """Names the expressions read that the manager's (or, for the proxy's metrics, the proxy's)
    exposition does not offer."""
    wanted = {name for expr in exprs for name in metric_names(expr)}
    offered = {"manager": exposed_series(manager), "proxy": exposed_series(proxy)}
    return {n for n in wanted if n not in offered["proxy" if n.startswith(PROXY_PREFIX) else "manager"]}


# --- the extractor, on its own ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ("max by (status) (sokovan_agents)", {"sokovan_agents"}),
        (
            "histogram_quantile(0.95, sum by (le, lane) (rate(sokovan_cycle_seconds_bucket[$__interval])))",
            {"sokovan_cycle_seconds_bucket"},
        ),
        ('sum(rate(a_total{result!~"SUCCESS|SKIPPED", x="{y}"}[5m])) by (le)', {"a_total"}),
        ("a / on (x) group_left (y, z) b offset 1h > bool 0.5e3", {"a", "b"}),
        ('label_replace(up, "dst", "$1", "src", "(.*)")', {"up"}),
        (
            'count_values("version", build_info) unless ignoring(job) x or y AND z',
            {"build_info", "x", "y", "z"},
        ),
        ("sum without (instance) (rate(c_total[${interval}])) * 60", {"c_total"}),
        ("max_over_time(g[1h:5m]) >= Inf", {"g"}),
        ("SUM BY (x) (h) + Max(i)", {"h", "i"}),
    ],
)
def test_metric_names(expr: str, want: set[str]) -> None:
    assert metric_names(expr) == want


@pytest.mark.parametrize(
    "expr", ["histogram_quantil(0.9, x_bucket)", "sum by (le) (rates(x_total[5m]))", "mx(sokovan_agents)"]
)
def test_an_unknown_function_is_an_error(expr: str) -> None:
    with pytest.raises(ValueError, match="unknown PromQL function"):
        metric_names(expr)


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("max by (status) (sokovan_agnets)", "misspelt"),
        ("sum(rate(sokovan_slot_drift[5m]))", "a counter is read as <name>_total"),
        ("sum(rate(sokovan_cycle_seconds[5m]))", "a histogram is read through _bucket/_sum/_count"),
        ("max(sokovan_agents_total)", "a gauge has no _total"),
        ("sum(rate(sokovan_proxy_requests_total[5m]))", "the proxy's metric is not the manager's"),
        ("sum(rate(sokovan_handler_runs_total[5m]))", "the manager's metric is not the proxy's"),
    ],
)
def test_a_name_not_exposed_is_missing(expr: str, why: str) -> None:
    """Against the in-process registries, with the proxy's offered as the manager's and the
    other way round for the last two rows."""
    manager, proxy = metrics.exposition().decode(), proxy_metrics.exposition().decode()
    if "proxy" in why:
        manager, proxy = proxy, manager
    assert missing([expr], manager, proxy) == metric_names(expr), why


def test_the_files_parse_and_read_metrics() -> None:
    exprs = all_exprs()
    assert len(exprs) >= 20
    assert all(metric_names(e) for e in exprs), "every expression reads some metric"


# --- the files' shape ------------------------------------------------------------------------


def test_every_rule_is_complete() -> None:
    found = rules()
    assert found
    for rule in found:
        assert set(rule) >= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]), rule["alert"]
        assert re.fullmatch(r"\d+[smhd]", str(rule["for"])), rule
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}, rule
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule
    assert len({r["alert"] for r in found}) == len(found), "alert names are unique"


def test_promtool_accepts_the_rules_the_config_and_the_dashboard_queries(tmp_path: Path) -> None:
    """The dashboard's queries go through promtool as recording rules, Grafana's variables
    replaced by a duration. `make test` installs promtool (scripts/test-tools.sh)."""
    assert shutil.which("promtool"), "promtool is missing: run scripts/test-tools.sh (make test does)"
    dash = json.loads(DASHBOARD.read_text())
    recorded = [
        {"record": f"dashboard:query_{i}", "expr": _VARIABLES.sub("5m", expr)}
        for i, expr in enumerate(dashboard_exprs(dash))
    ]
    queries = tmp_path / "dashboard-queries.yml"
    queries.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recorded}]}))
    for args in (
        ["check", "rules", str(RULES), str(queries)],
        ["check", "config", str(RULES.with_name("prometheus.yml"))],
    ):
        done = subprocess.run(["promtool", *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_alert_rules_pass_their_unit_tests() -> None:
    """`promtool test rules` on deploy/prometheus/sokovan-rules.test.yml: the GPU alert fires for a
    device unhealthy for a minute, not for a blip."""
    assert shutil.which("promtool"), "promtool is missing: run scripts/test-tools.sh (make test does)"
    tests = RULES.with_name("sokovan-rules.test.yml")
    done = subprocess.run(
        ["promtool", "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_the_dashboard_takes_its_datasource_as_a_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dash["templating"]["list"] if v["name"] == "datasource"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"]), panel["title"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]), "panel ids are unique"


# --- against real daemons --------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(
    service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory, db_url: str
) -> Iterator[Cluster]:
    """A manager, one process agent and an app proxy."""
    asyncio.run(truncate_tables(db_url))
    c = Cluster(service_env, tmp_path_factory.mktemp("metrics-cluster"))
    try:
        c.bootstrap()
        c.start_manager()
        c.start_agent("metrics-agent-1", "cpu=2,mem=2g")
        asyncio.run(c.wait_ready(1))
        c.start_proxy()
        yield c
    finally:
        c.stop()


def scrape(base_url: str) -> str:
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(resp.read().decode())


def test_every_metric_the_files_read_is_exposed(cluster: Cluster) -> None:
    assert cluster.proxy is not None
    # The orchestrator's gauges have samples once its lanes have cycled: the census and the node lane.
    wait_until(
        lambda: (
            'sokovan_agents{status="READY"} 1.0' in scrape(cluster.api)
            and 'sokovan_sessions{status="PENDING"}' in scrape(cluster.api)
        ),
        "the manager's gauges",
        30,
        watch=cluster.daemons,
    )
    assert missing(all_exprs(), scrape(cluster.api), scrape(cluster.proxy.url)) == set()
