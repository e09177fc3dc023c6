"""`sokovan simulate` and `sokovan trace export` as a user runs them: refusals exit 2 with a
message (no traceback), the same trace and seed give the same JSON, one row per combination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sokovan.cli.main import cli
from sokovan.sim.synthetic import synthetic_trace
from sokovan.sim.trace import write_trace


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "trace.jsonl"
    write_trace(synthetic_trace(300, 24, seed=11, load=1.1, burst=1.8), path)
    return path


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("option", "value", "known"),
    [
        ("--policy", "fifo,nosuch", "unknown scheduler 'nosuch' (known: drf, fair_share, fifo, lifo)"),
        ("--queue-policy", "later", "unknown queue policy 'later' (known: backfill, block, reserve)"),
        (
            "--selector",
            "random",
            "unknown agent selection 'random' (known: concentrated, dispersed, roundrobin)",
        ),
    ],
)
def test_an_unknown_name_exits_2_listing_the_known_ones(
    trace_file: Path, option: str, value: str, known: str
) -> None:
    args = ["simulate", "--trace", str(trace_file), "--policy", "fifo", option, value]
    code, out = _run(*args)
    assert code == 2
    assert option in out
    assert known in out


def test_a_trace_that_is_not_one_exits_2_saying_where(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "trace"}\n{"kind": "agent"}\n')
    code, out = _run("simulate", "--trace", str(bad), "--policy", "fifo")
    assert code == 2 and "bad.jsonl:2:" in out
    code, out = _run("simulate", "--trace", str(tmp_path / "missing.jsonl"), "--policy", "fifo")
    assert code == 2 and "No such file" in out


@pytest.mark.parametrize("since", ["7x", "-3d", "", "d"])
def test_a_bad_since_exits_2_without_a_traceback(tmp_path: Path, since: str) -> None:
    code, out = _run("trace", "export", "--since", since, "--out", str(tmp_path / "t.jsonl"))
    assert code == 2
    assert "--since" in out and "is not a span" in out


def test_the_same_trace_and_seed_give_the_same_json(trace_file: Path, tmp_path: Path) -> None:
    outs = []
    for n, jobs in enumerate(["1", "2"]):
        path = tmp_path / f"run{n}.json"
        code, printed = _run(
            "simulate", "--trace", str(trace_file), "--policy", "fifo,drf",
            "--queue-policy", "backfill,block", "--seed", "7", "--json", str(path), "--jobs", jobs,
        )  # fmt: skip
        assert code == 0, printed
        outs.append(path.read_bytes())
    assert outs[0] == outs[1]
    runs = json.loads(outs[0])["runs"]
    assert [(r["policy"], r["queue_policy"], r["selector"]) for r in runs] == [
        ("fifo", "backfill", "concentrated"),
        ("fifo", "block", "concentrated"),
        ("drf", "backfill", "concentrated"),
        ("drf", "block", "concentrated"),
    ]
    for r in runs:
        assert set(r) >= {
            "policy", "queue_policy", "selector", "wait_p50", "wait_p95", "wait_p99", "utilization",
            "started", "fairness", "longest_wait_large", "placements",
        }  # fmt: skip
        assert set(r["utilization"]) == {"cpu", "mem", "cuda.device"}
        assert len(r["placements"]) == r["started"] > 0
        assert set(r["placements"][0]) >= {"session", "agent", "start"}


def test_one_aligned_row_per_combination(trace_file: Path) -> None:
    code, out = _run(
        "simulate", "--trace", str(trace_file), "--policy", "fifo,lifo", "--selector", "dispersed"
    )
    assert code == 0, out
    lines = out.rstrip("\n").splitlines()
    assert lines[0].split()[:4] == ["policy", "queue", "selector", "started"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["fifo", "backfill", "dispersed"],
        ["lifo", "backfill", "dispersed"],
    ]
    assert len({len(line) for line in lines}) == 1  # aligned: every row as wide as the header
