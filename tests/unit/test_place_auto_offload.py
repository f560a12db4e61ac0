"""place{algo=auto}'s second refinement stage: offloading fine nodes off the busiest device (issue 15).

Golden case worked by hand, on two devices of 100,000 B joined by a link of latency 0 and 1 MB/s
(the cluster of tests/unit/test_place_auto.py), every result f32[1] = 4 B (4 us on the link):

    s (0 s) -> a (2 s) -> j (0 s)
    s       -> b (1 s) -> j

All four nodes are one coarse node (``group = 0``), so every portfolio member and every coarse move
puts them on one device: s, a, b, j in topological order, a [0, 2), b [2, 3), j at 3: 3 s.

The second stage splits the coarse node. Durations of the one-device simulation: s 0, a 2, b 1,
j 0. Critical path method (free transfers): EST s 0, a 0, b 0, j 2; length L = 2; LST j 2, a 0,
b 1, s 0; float a 0, b 1, s 0, j 0. On the busiest device the nodes with compute and float larger
than their transfer time (b: reads 4 B, writes 4 B: 8 us < 1 s) are [b]; the first chunk holds half
of their compute: b alone, sent to the other device (earliest finish, nothing there). Trial, in the
order the last simulation started the nodes (s 0, a 0, b 2, j 3): s's result reaches g1 at 4 us,
b runs [4 us, 1 s + 4 us), its result reaches g0 at 1 s + 8 us; a runs [0, 2) on g0 and j starts
at 2 s: makespan 2 s, a gain of 1/3 over the best portfolio candidate (3 s).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import auto_module

from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.place.refine_fine import fine_problem, slack_times
from graphir.simulator import simulate

GROUPED = """
    %s = t.S(%in) : (f32[1]) -> f32[1] [cost = 0s, group = 0]
    %a = t.A(%s) : (f32[1]) -> f32[1] [cost = 2s, group = 0]
    %b = t.B(%s) : (f32[1]) -> f32[1] [cost = 1s, group = 0]
    %j = t.J(%a, %b) : (f32[1], f32[1]) -> f32[1] [cost = 0s, group = 0]
    return %j
"""


def test_slack_of_the_fine_graph(tmp_path: Path) -> None:
    problem = PlacementProblem.from_module(auto_module(tmp_path, GROUPED))
    assert problem.num_nodes == 1
    fine = fine_problem(problem, np.array([0.0, 2.0, 1.0, 0.0]))
    assert fine.num_nodes == 4
    assert fine.times[:, 0].tolist() == [0.0, 2.0, 1.0, 0.0]  # the coarse 3 s apportioned by durations
    assert sorted(zip(fine.edge_src.tolist(), fine.edge_dst.tolist(), strict=True)) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert fine.edge_bytes.tolist() == [4.0, 4.0, 4.0, 4.0]
    slack, length = slack_times(fine, np.array([0.0, 2.0, 1.0, 0.0]))
    assert length == 2.0
    assert slack.tolist() == [0.0, 0.0, 1.0, 0.0]


def test_offload_splits_a_coarse_node(tmp_path: Path) -> None:
    module = auto_module(tmp_path, GROUPED)
    stats = Place.of("auto", mem_model="liveness").run(module, PassContext()).stats
    assert stats["auto.portfolio-ms"] == pytest.approx(3000.0)
    assert stats["auto.offload-moves"] == 1
    assert stats["auto.offload-nodes"] == 1
    assert stats["auto.refined-ms"] == pytest.approx(2000.0)
    assert stats["auto.refine-gain-pct"] == pytest.approx(33.33)
    devices = {node.name: node.device for node in module.graph.index().nodes}
    assert devices["a"] == devices["s"] == devices["j"] != devices["b"]
    assert stats["coarse-nodes"] == 1
    sim = simulate(module)
    assert sim.makespan == pytest.approx(2.0)
    assert not sim.oom_devices
