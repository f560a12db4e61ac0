"""auto's refinement (passes/place/refine.py), worked by hand on the fork-join of test_place_auto.py.

Two devices g0, g1 of 100,000 B, link latency 0 and 1 MB/s: a 4 B result takes 4e-6 s to cross.
s (0 s) -> a (2 s) and b (2 s) -> j (0 s); coarse nodes (no groups) numbered s=0, a=1, b=2, j=3.

Start: everything on g0 in the order s, a, b, j: s [0, 0], a [0, 2], b [2, 4], j [4, 4]; 4 s.

* Critical chain, walked back from j (finishes last at 4): its producers a (finish 2) and b
  (finish 4), and b is also the node before it on g0: b. From b: producer s (0), the node before
  it a (2): a. From a: s. Weights (compute on the chain): s 0, a 2, b 2, j 0.
* Trial 1 re-orders by rank_u (the same devices): the same order, 4 s, not better.
* Sweep at block size 1 (n = 4): blocks a, b (weight 2, by number), then s, j (weight 0). Targets
  by busy time: g1 (0 s) before g0 (4 s), the source excluded.
* Trial 2 moves a to g1 (keys: the single run's starts s 0, a 0, b 2, j 4): s's result to g1
  [0, 4e-6]; a [4e-6, 2 + 4e-6] on g1; b [0, 2] on g0; a's result to g0 [2 + 4e-6, 2 + 8e-6];
  j at 2 + 8e-6. Makespan **2.000008 s**: taken.
* Trial 3 moves b to g1 too (g0 now has busy 0 s: s and j; g1 2 s; so g0 first, but g0 is b's
  source, so g1): a and b share g1, 4 s and more: rejected.
* Trial 4 moves s to g1: s, a on g1, b, j on g0. s's result to g0 [0, 4e-6]; b [4e-6, 2 + 4e-6];
  a [0, 2] on g1; a's result to g0 [2, 2 + 4e-6]; j at 2 + 4e-6. Makespan **2.000004 s**: taken.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import FORK_JOIN, auto_module, random_memory_dag, write_cluster

from graphir.driver import run
from graphir.pass_infra import PassContext
from graphir.passes.place import placement_context
from graphir.passes.place.auto import restarts
from graphir.passes.place.problem import PlacementProblem, expand_placement, write_placement
from graphir.passes.place.refine import (
    block_sizes,
    blocks,
    candidate,
    critical_path_bound,
    critical_weight,
    refine,
)
from graphir.printer import print_module
from graphir.simulator import simulate


def _setup(tmp_path: Path):  # noqa: ANN202
    module = auto_module(tmp_path, FORK_JOIN)
    problem = PlacementProblem.from_module(module)
    simulate = placement_context(module, PassContext()).simulator()

    def judge(device: np.ndarray, start: np.ndarray):  # noqa: ANN202
        return candidate(problem, "trial", device, start, simulate(problem, device, start, "pair"))

    single = judge(np.zeros(4, dtype=np.int64), np.arange(4, dtype=np.float64))
    return problem, judge, single


def test_critical_chain_by_hand(tmp_path: Path) -> None:
    problem, _, single = _setup(tmp_path)
    assert single.makespan == pytest.approx(4.0)
    assert critical_weight(problem, single).tolist() == [0.0, 2.0, 2.0, 0.0]
    assert block_sizes(4) == [1]
    assert [b.tolist() for b in blocks(problem, single.device, 2)] == [[0, 1], [2, 3]]


@pytest.mark.parametrize(
    ("allowance", "makespan", "moves", "devices"),
    [
        (1, 4.0, 0, [0, 0, 0, 0]),  # the re-ordering trial only
        (2, 2.000008, 1, [0, 1, 0, 0]),  # a to g1
        (3, 2.000008, 1, [0, 1, 0, 0]),  # b to g1 rejected
        (4, 2.000004, 2, [1, 1, 0, 0]),  # s to g1
    ],
)
def test_moves_by_hand(tmp_path: Path, allowance: int, makespan: float, moves: int, devices: list[int]) -> None:
    problem, judge, single = _setup(tmp_path)
    out = refine(problem, single, judge, allowance)
    assert out.simulations == allowance
    assert out.moves == moves
    assert out.best.makespan == pytest.approx(makespan, abs=1e-12)
    assert out.best.device.tolist() == devices


def test_local_optimum_stops_early(tmp_path: Path) -> None:
    """From 2.000004 s no single-node move helps: the search ends with budget left."""
    problem, judge, single = _setup(tmp_path)
    out = refine(problem, single, judge, 1000)
    assert out.best.makespan == pytest.approx(2.000004, abs=1e-12)
    assert out.simulations < 1000


def test_graphir_opt_deterministic(tmp_path: Path) -> None:
    """Two runs with one seed print byte-identical modules; another seed also gives a placed module."""
    cluster = write_cluster(tmp_path, "three.toml", 3, memory=1 << 26, latency=1e-5, bandwidth=1e9)
    source = tmp_path / "random.gir"
    source.write_text(print_module(random_memory_dag(5, 80, cluster)))
    outputs = []
    for seed in (3, 3, 4):
        out = tmp_path / f"out{len(outputs)}.gir"
        passes = "--passes=fuse{algo=cpd-topo window=4},place{algo=auto mem-model=liveness},simulate"
        assert run([str(source), passes, f"--seed={seed}", "-o", str(out)]) == 0
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[2].count(b"device = ") == 80


@pytest.mark.parametrize("congestion", ["pair", "topology"])
def test_candidate_simulator_is_the_simulator(tmp_path: Path, congestion: str) -> None:
    """ctx.simulate on arrays == simulate() on the module annotated by write_placement (random placements)."""
    cluster = write_cluster(tmp_path, "three.toml", 3, memory=1 << 40, latency=1e-5, bandwidth=1e9)
    module = random_memory_dag(2, 60, cluster)
    problem = PlacementProblem.from_module(module)
    simulate_candidate = placement_context(module, PassContext()).simulator()
    rng = np.random.default_rng(0)
    for _ in range(5):
        device = rng.integers(0, 3, problem.num_nodes)
        start = rng.random(problem.num_nodes).round(1)  # ties: the topological number decides
        start = np.maximum.accumulate(start)  # a topological order of the keys
        fine_device, position = expand_placement(problem, device, start)
        write_placement(module, problem, device, start)
        index = module.graph.index()
        assert [n.device for n in index.nodes] == [f"d{d}" for d in fine_device.tolist()]
        assert [n.order for n in index.nodes] == position.tolist()
        expected = simulate(module, congestion)
        got = simulate_candidate(problem, device, start, congestion)
        assert got.makespan == expected.makespan
        assert got.peak_memory.tolist() == expected.peak_memory.tolist()
        assert got.start.tolist() == expected.start.tolist()


def test_critical_path_bound_by_hand(tmp_path: Path) -> None:
    """The fork-join's longest path with free transfers: s 0 + max(a, b) + j 0.

    With the one-device durations (0, 2, 2, 0): 2 s, the best spread's 2.000004 s minus its one
    transfer. With b made 3 s: 3 s (the path through b).
    """
    problem, _, _ = _setup(tmp_path)
    assert critical_path_bound(problem, np.array([0.0, 2.0, 2.0, 0.0])) == pytest.approx(2.0)
    assert critical_path_bound(problem, np.array([0.0, 2.0, 3.0, 0.0])) == pytest.approx(3.0)
    assert critical_path_bound(problem, np.array([1.0, 2.0, 3.0, 0.5])) == pytest.approx(4.5)


def test_restarts_fitting_distinct_best_first(tmp_path: Path) -> None:
    """Restarts: fitting candidates by makespan, a placement already listed skipped; none fits: the best only."""
    problem, judge, single = _setup(tmp_path)
    spread = judge(np.array([0, 1, 0, 0]), np.arange(4, dtype=np.float64))  # 2.000008 s (module docstring)
    again = dataclasses.replace(single, name="again")  # the same placement as single
    assert [c.name for c in restarts([single, again, spread])] == ["trial", "trial"]
    assert [c.makespan for c in restarts([single, again, spread])] == pytest.approx([2.000008, 4.0])
    full = dataclasses.replace(single, overflow=10)
    fuller = dataclasses.replace(spread, overflow=20)
    assert restarts([fuller, full]) == [full]


@pytest.mark.parametrize("seed", range(3))
def test_blocks_join_whole_colocation_classes(seed: int) -> None:
    """Blocks are device runs cut into pieces, each joined with every member of the classes it touches."""
    import types

    rng = np.random.default_rng(seed)
    for _ in range(200):
        n = int(rng.integers(0, 50))
        device = rng.integers(0, 3, n)
        colocation = np.full(n, -1, dtype=np.int64)
        if n:
            marked = rng.integers(0, n, int(rng.integers(0, n)))
            colocation[marked] = rng.integers(0, max(1, n // 3), len(marked))
        problem = types.SimpleNamespace(num_nodes=n, colocation=colocation)
        for size in (1, 3, 64):
            expected = []  # the definition, written out: runs, pieces, np.union1d with each class
            cuts = np.flatnonzero(np.diff(device) != 0) + 1
            for stretch in np.split(np.arange(n), cuts):
                for k in range(0, len(stretch), size):
                    block = stretch[k : k + size]
                    for c in set(colocation[block].tolist()) - {-1}:
                        block = np.union1d(block, np.flatnonzero(colocation == c))
                    expected.append(block.tolist())
            assert [b.tolist() for b in blocks(problem, device, size)] == expected  # type: ignore[arg-type]
