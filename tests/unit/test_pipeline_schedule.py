"""Pipeline schedules (passes/place/pipeline_schedule.py): orders and event times worked by hand."""

from __future__ import annotations

import pytest

from graphir.passes.place.pipeline_schedule import (
    BACKWARD,
    FORWARD,
    activation_copies,
    pipeline_timeline,
    stage_sequence,
)


def spelled(schedule: str, stage: int, stages: int, microbatches: int) -> str:
    return " ".join(
        ("F" if p == FORWARD else "B") + str(m) for p, m in stage_sequence(schedule, stage, stages, microbatches)
    )


def test_gpipe_runs_all_forwards_then_all_backwards() -> None:
    assert spelled("gpipe", 0, 2, 3) == "F0 F1 F2 B0 B1 B2"
    assert spelled("gpipe", 1, 2, 3) == "F0 F1 F2 B0 B1 B2"


def test_1f1b_warms_up_then_alternates() -> None:
    # S=2, M=3: stage 0 warms up with one forward (S-1-0), the last stage with none.
    assert spelled("1f1b", 0, 2, 3) == "F0 F1 B0 F2 B1 B2"
    assert spelled("1f1b", 1, 2, 3) == "F0 B0 F1 B1 F2 B2"
    # S=4, M=2: warm-up is capped by M.
    assert spelled("1f1b", 0, 4, 2) == "F0 F1 B0 B1"
    assert spelled("1f1b", 2, 4, 2) == "F0 F1 B0 B1"
    assert spelled("1f1b", 3, 4, 2) == "F0 B0 F1 B1"
    # S=4, M=6, stage 1: two warm-up forwards, then F2 B0 F3 B1 F4 B2 F5 B3, then B4 B5.
    assert spelled("1f1b", 1, 4, 6) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5"


def test_activation_copies() -> None:
    assert [activation_copies("gpipe", s, 4, 8) for s in range(4)] == [8, 8, 8, 8]
    assert [activation_copies("1f1b", s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [activation_copies("1f1b", s, 4, 2) for s in range(4)] == [2, 2, 2, 1]


def test_timeline_two_stages_by_hand() -> None:
    # forward 1 s, backward 2 s per stage; no transfers. Both schedules: (M + S - 1)(f + b) = 9 s.
    gpipe = pipeline_timeline("gpipe", 2, [1.0, 1.0], [2.0, 2.0])
    assert gpipe.start[1] == {(FORWARD, 0): 1.0, (FORWARD, 1): 2.0, (BACKWARD, 0): 3.0, (BACKWARD, 1): 5.0}
    assert gpipe.start[0] == {(FORWARD, 0): 0.0, (FORWARD, 1): 1.0, (BACKWARD, 0): 5.0, (BACKWARD, 1): 7.0}
    assert gpipe.makespan == 9.0
    one = pipeline_timeline("1f1b", 2, [1.0, 1.0], [2.0, 2.0])
    assert one.start[1] == {(FORWARD, 0): 1.0, (BACKWARD, 0): 2.0, (FORWARD, 1): 4.0, (BACKWARD, 1): 5.0}
    assert one.start[0][(BACKWARD, 0)] == 4.0 and one.start[0][(BACKWARD, 1)] == 7.0
    assert one.makespan == 9.0
    assert one.busy == [6.0, 6.0]


def test_timeline_transfers_and_update() -> None:
    # One micro-batch, two stages: F0 [0,1], send 0.5, F1 [1.5,2.5], B1 [2.5,4.5], back 0.25,
    # B0 [4.75,6.75], then stage 0's update of 1 s ends at 7.75.
    t = pipeline_timeline("1f1b", 1, [1.0, 1.0], [2.0, 2.0], send=[0.5], send_back=[0.25], update=[1.0, 0.1])
    assert t.start[1][(FORWARD, 0)] == 1.5
    assert t.start[0][(BACKWARD, 0)] == 4.75
    assert t.makespan == 7.75


def test_more_microbatches_shrink_the_bubble() -> None:
    stages = 4
    times = [1.0] * stages
    spans = [pipeline_timeline("1f1b", m, times, times).makespan / m for m in (1, 4, 16)]
    assert spans[0] > spans[1] > spans[2]
    # (M + S - 1)(f + b) per step: per micro-batch 2 (M + 3) / M.
    assert spans[2] == pytest.approx(2 * (16 + 3) / 16)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown pipeline schedule 'zigzag'"):
        stage_sequence("zigzag", 0, 2, 2)
    with pytest.raises(ValueError, match="stage 2 is not in 0..1"):
        stage_sequence("gpipe", 2, 2, 2)
