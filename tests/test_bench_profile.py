"""The bench's profile summary: each sample charged to the project's innermost frame on its stack,
the threads py-spy counts as busy while they wait left out."""

from __future__ import annotations

from pathlib import Path

from scripts.bench.profile import PhaseProfile, profile_summary

LOOP = "run (sokovan/common/eventloop.py:41)"
MOVES = "apply_moves (sokovan/state/session_moves.py:{})"
STACKS = f"""\
{LOOP};{MOVES.format(200)};execute (sqlalchemy/engine/base.py:10) 6
{LOOP};{MOVES.format(201)} 2
{LOOP} 2
Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982) 50
"""


def test_samples_go_to_the_innermost_project_frame(tmp_path: Path) -> None:
    path = tmp_path / "profile.txt"
    path.write_text(STACKS)
    assert profile_summary([path], "release") == {
        "profile_release_apply_moves (sokovan/state/session_moves.py)": 80.0,
        "profile_release_run (sokovan/common/eventloop.py)": 20.0,
    }
    assert profile_summary([tmp_path / "missing.txt"], "release") == {}


def test_nothing_is_recorded_unless_asked() -> None:
    profile = PhaseProfile("release")
    profile.wanted = False
    profile.start([1])  # no py-spy is started for a phase not asked for
    assert profile.stop() == {}
