"""The trace format (docs/trace-format.md): what is written reads back the same, and a wrong
line is refused with its file and line number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sokovan.common.slots import ResourceSlots
from sokovan.sim.synthetic import synthetic_trace
from sokovan.sim.trace import (
    TraceDomain,
    TraceError,
    TraceFairShare,
    TraceProject,
    parse_lines,
    read_trace,
    write_trace,
)
from tests.sim.handmade import at, session, trace


def test_a_trace_with_every_kind_of_line_reads_back_the_same(tmp_path: Path) -> None:
    t = trace(
        [
            session("s1", 0, 2, 10, max_duration=60, agents=["a0"], started_at=at(1), terminated_at=at(11)),
            session("s2", 1, 1, 5, user="bob", depends_on=["s1"], status="TERMINATED", result="SUCCESS"),
        ]
    )
    t.fair_share = TraceFairShare(half_life_hours=2.5, weights={"cpu": 1.0})
    t.domains = [TraceDomain(name="default", fair_share_weight=2.0)]
    t.projects = [TraceProject(id="research", name="Research", domain="default", fair_share_weight=0.5)]
    path = tmp_path / "t.jsonl"
    write_trace(t, path)
    again = read_trace(path)
    assert again == t
    assert path.read_text() == again.dumps()
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds == [
        "trace",
        "fair_share",
        "domain",
        "project",
        "scaling_group",
        "agent",
        "session",
        "session",
    ]


def test_a_synthetic_trace_reads_back_the_same(tmp_path: Path) -> None:
    t = synthetic_trace(300, 30, seed=3)
    path = tmp_path / "s.jsonl"
    write_trace(t, path)
    assert read_trace(path) == t


def test_slots_take_units_and_are_written_as_strings_of_decimals() -> None:
    lines = [
        '{"kind": "trace"}',
        '{"kind": "scaling_group", "name": "g"}',
        '{"kind": "agent", "id": "a", "scaling_group": "g", "available": {"cpu": 8, "mem": "16g"},'
        ' "images": ["python:3"]}',
    ]
    t = parse_lines(lines)
    assert t.agents[0].available == ResourceSlots.parse({"cpu": 8, "mem": 16 * 2**30})
    written = json.loads(t.dumps().splitlines()[2])
    assert written["available"] == {"cpu": "8", "mem": str(16 * 2**30)}


def test_a_time_without_a_zone_is_utc() -> None:
    t = parse_lines(
        [
            '{"kind": "trace"}',
            '{"kind": "scaling_group", "name": "g"}',
            '{"kind": "session", "id": "s", "scaling_group": "g", "access_key": "AK", "user": "u",'
            ' "project": "p", "image": "python:3", "resources": {"cpu": 1},'
            ' "created_at": "2025-03-01T12:00:00"}',
        ]
    )
    assert t.sessions[0].created_at == at(0)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"kind": "scaling_group", "name": "g"}'], "t.jsonl:1: the first line must be the header"),
        (['{"kind": "trace"}', "{not json"], "t.jsonl:2: not JSON"),
        (['{"kind": "trace"}', '{"kind": "nope"}'], "t.jsonl:2:"),
        (['{"kind": "trace", "version": 2}'], "t.jsonl:1: trace.version"),
        (
            [
                '{"kind": "trace"}',
                '{"kind": "agent", "id": "a", "scaling_group": "g", "available": {"cpu": -1}, "images": []}',
            ],
            "t.jsonl:2: agent.available",
        ),
        (
            [
                '{"kind": "trace"}',
                '{"kind": "agent", "id": "a", "scaling_group": "g", "available": {}, "images": []}',
            ],
            "names scaling group 'g', which no scaling_group line defines",
        ),
        (
            [
                '{"kind": "trace"}',
                '{"kind": "scaling_group", "name": "g"}',
                '{"kind": "scaling_group", "name": "g"}',
            ],
            "scaling group 'g' appears twice",
        ),
        ([], "empty"),
    ],
)
def test_a_wrong_trace_is_refused_saying_where(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(path)


def test_the_example_in_the_format_document_reads() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "trace-format.md").read_text()
    example = doc.split("```json\n", 1)[1].split("```", 1)[0]
    t = parse_lines(example.splitlines(), "docs/trace-format.md")
    assert [s.id for s in t.sessions] == ["s1", "s2"]
    assert t.agents[0].available == ResourceSlots.parse({"cpu": 4, "mem": "4g"})
