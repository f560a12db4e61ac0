"""place{algo=ilp}: CP-SAT proves optimality, a brute force over the simulator agrees, constraints hold.

The brute force enumerates every placement and every set of per-device orders that does not
deadlock (each is the restriction of a topological order of the graph, so enumerating
placements x topological orders and de-duplicating covers them all) and calls
:func:`graphir.simulator.simulate` on each.

Tolerance: CP-SAT works in integer time units (stat ``time-unit-s``, the power of ten that puts the
horizon in ``[1e6, 1e7)`` units). Each task's duration is rounded by at most half a unit, and a
critical chain of an ``n``-node graph has at most ``2n`` tasks (nodes and transfers) plus the
makespan itself, so objective, simulated makespan and brute-force optimum agree within
``(2n + 1)`` units (about ``1e-5`` relative for ``n = 6``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import comm_heavy_module, random_module, run_ilp

from graphir.annotations import Mem
from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import PassContext
from graphir.passes.place.problem import PlacementProblem
from graphir.printer import print_module
from graphir.simulator import simulate

GiB = 1 << 30
HETERO_2 = """
[[device]]
name = "gpu0"
kind = "V100-32GB"
[[device]]
name = "gpu1"
kind = "P100"
"""
HETERO_3 = (
    HETERO_2
    + """
[[device]]
name = "gpu2"
kind = "P100"
[[link]]
src = "gpu0"
dst = "gpu2"
latency = 5e-6
bandwidth = 4e9
"""
)


def brute_force(module: Module) -> float:
    """The best simulated makespan over all placements and deadlock-free per-device orders.

    Judged under ``congestion=pair``, the ILP's default rule (the simulator's default is ``topology``).
    """
    index = module.graph.index()
    n = index.num_nodes
    names = module.cluster.device_names
    preds = [set(index.predecessors(u).tolist()) for u in range(n)]
    topological: list[tuple[int, ...]] = []

    def extend(order: list[int], done: set[int]) -> None:
        if len(order) == n:
            topological.append(tuple(order))
            return
        for u in range(n):
            if u not in done and preds[u] <= done:
                order.append(u)
                done.add(u)
                extend(order, done)
                order.pop()
                done.discard(u)

    extend([], set())
    best = np.inf
    seen: set[tuple[object, ...]] = set()
    for device in itertools.product(range(len(names)), repeat=n):
        for order in topological:
            key = (device, tuple(tuple(u for u in order if device[u] == d) for d in range(len(names))))
            if key in seen:
                continue
            seen.add(key)
            position = {u: i for i, u in enumerate(order)}
            for u, node in enumerate(index.nodes):
                node.device = names[device[u]]
                node.order = position[u]
            best = min(best, simulate(module, congestion="pair").makespan)
    return float(best)


@pytest.fixture
def hetero(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "h2.toml").write_text(HETERO_2)
    (tmp_path / "h3.toml").write_text(HETERO_3)
    return {"2xV100": "2xV100", "3xV100": "3xV100", "h2": str(tmp_path / "h2.toml"), "h3": str(tmp_path / "h3.toml")}


CASES = [(seed, 6, cluster) for seed in range(3) for cluster in ("2xV100", "h2")] + [
    (seed, 5, cluster) for seed in range(3) for cluster in ("3xV100", "h3")
]


@pytest.mark.parametrize(("seed", "num_nodes", "cluster"), CASES)
def test_ilp_is_optimal_against_brute_force(seed: int, num_nodes: int, cluster: str, hetero: dict[str, str]) -> None:
    module = comm_heavy_module(seed, num_nodes, hetero[cluster])
    stats = run_ilp(module)
    assert stats["status"] == "optimal" and stats["gap"] == 0.0
    simulated = simulate(module, congestion="pair").makespan
    tolerance = (2 * num_nodes + 1) * float(stats["time-unit-s"])
    assert simulated == pytest.approx(float(stats["objective-s"]), abs=tolerance)
    assert simulated <= float(stats["warm-start-makespan-s"]) + 1e-15
    assert brute_force(module) == pytest.approx(simulated, abs=tolerance)


def test_ilp_beats_the_heuristics_somewhere(hetero: dict[str, str]) -> None:
    """On communication-heavy graphs the exact schedule is strictly better than every list scheduler."""
    wins = 0
    for seed in range(6):
        module = comm_heavy_module(seed, 8, hetero["h2" if seed % 2 else "2xV100"])
        stats = run_ilp(module)
        assert stats["status"] == "optimal"
        simulated = simulate(module, congestion="pair").makespan
        assert simulated == pytest.approx(float(stats["objective-s"]), abs=17 * float(stats["time-unit-s"]))
        wins += simulated < float(stats["warm-start-makespan-s"]) * (1 - 1e-6)
    assert wins >= 1


@pytest.mark.parametrize("seed", range(4))
def test_ilp_ten_nodes_optimal_and_simulated(seed: int, hetero: dict[str, str]) -> None:
    module = random_module(seed, 10, "moirai-intra")
    module.cluster_spec = hetero["h3" if seed % 2 else "h2"]
    stats = run_ilp(module)
    assert stats["status"] == "optimal"
    assert simulate(module, congestion="pair").makespan == pytest.approx(
        float(stats["objective-s"]), abs=21 * float(stats["time-unit-s"])
    )


@pytest.mark.parametrize("seed", range(4))
def test_ilp_respects_colocation_affinity_and_memory(seed: int) -> None:
    module = random_module(seed, 9, "moirai-intra", colocate_fraction=0.3, affinity_fraction=0.3, heavy_fraction=0.3)
    problem = PlacementProblem.from_module(module)
    stats = run_ilp(module, mem_model="paper")  # the sum checked below is the paper rule
    assert stats["status"] in ("optimal", "feasible")
    index = module.graph.index()
    names = module.cluster.device_names
    device = np.asarray([names.index(node.device) for node in index.nodes])
    coarse = np.zeros(problem.num_nodes, dtype=np.int64)
    coarse[problem.node_group] = device
    assert problem.allowed[np.arange(problem.num_nodes), coarse].all()
    for root in set(problem.colocation.tolist()) - {-1}:
        assert len(set(coarse[problem.colocation == root].tolist())) == 1
    used = np.bincount(coarse, weights=problem.memory, minlength=problem.num_devices)
    assert (used <= problem.capacity).all()


def test_ilp_memory_forces_a_split() -> None:
    """Two 10 GiB nodes on 2x V100 (16 GB each) cannot share a device, although one device is faster."""
    module = comm_heavy_module(1, 4, "2xV100")
    for node in module.graph.index().nodes[:2]:
        node.mem = Mem(persistent=10 * GiB, activation=0)
    stats = run_ilp(module, mem_model="paper")
    assert stats["status"] == "optimal" and stats["memory-constraint"] == "activations"
    nodes = module.graph.index().nodes
    assert nodes[0].device != nodes[1].device


def test_ilp_memory_rule_follows_the_warm_start() -> None:
    """Persistent bytes beyond every device: no memory rule is satisfiable, as for the heuristics."""
    module = comm_heavy_module(2, 3, "2xV100")
    for node in module.graph.index().nodes:
        node.mem = Mem(persistent=10 * GiB, activation=0)
    stats = run_ilp(module)
    assert stats["memory-constraint"] == "none" and stats["status"] == "optimal"
    assert simulate(module).oom_devices


def test_ilp_colocation_with_no_allowed_device_is_one_line_error() -> None:
    module = comm_heavy_module(2, 3, "moirai-intra")
    nodes = module.graph.index().nodes
    nodes[0].affinity = ("V100-32GB",)
    nodes[1].affinity = ("P100",)
    nodes[0].colocate = nodes[1].colocate = "c"
    with pytest.raises(PassError) as info:
        run_ilp(module)
    assert "\n" not in str(info.value)


def test_ilp_on_groups_no_worse_than_warm_start() -> None:
    module = random_module(7, 40, "3xV100", group_fraction=0.7)
    stats = run_ilp(module, time_limit=5.0)
    assert stats["status"] in ("optimal", "feasible")
    assert 0.0 <= float(stats["gap"]) <= 1.0
    assert float(stats["bound-s"]) <= float(stats["objective-s"]) + 1e-12
    assert simulate(module, congestion="pair").makespan <= float(stats["warm-start-makespan-s"]) + 1e-15


def test_ilp_is_deterministic() -> None:
    runs = []
    for _ in range(2):
        module = comm_heavy_module(3, 8, "3xV100")
        run_ilp(module)
        runs.append([(node.device, node.order) for node in module.graph.index().nodes])
    assert runs[0] == runs[1]


_IN_PROCESS_RUN = """
import json, sys
sys.path.insert(0, {tests!r})
from helpers import comm_heavy_module, run_ilp
assert "tensorflow" not in sys.modules
module = comm_heavy_module(4, 6, "2xV100")
stats = run_ilp(module, isolate="no")
print(json.dumps([stats["isolated"], stats["status"], stats["objective-s"],
                  [[node.device, node.order] for node in module.graph.index().nodes]]))
"""


def test_ilp_isolated_solver_process_gives_the_same_schedule(fresh_ilp_subprocess: None) -> None:
    """The subprocess path (used when TensorFlow is loaded) returns what the in-process solve does.

    CP-SAT crashes in a process that has loaded TensorFlow, which the test session may have done,
    so the in-process reference solve runs in a fresh interpreter without TensorFlow.
    """
    script = _IN_PROCESS_RUN.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    isolated, status, objective, schedule = json.loads(done.stdout.strip().splitlines()[-1])
    assert isolated == 0 and status == "optimal"
    module = comm_heavy_module(4, 6, "2xV100")
    stats = run_ilp(module, isolate="yes")
    assert stats["isolated"] == 1 and stats["status"] == "optimal"
    assert stats["objective-s"] == objective
    assert [[node.device, node.order] for node in module.graph.index().nodes] == schedule


_SEED_SPY = """
import sys
sys.path.insert(0, {tests!r})
from ortools.sat.python import cp_model
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from helpers import comm_heavy_module
assert "tensorflow" not in sys.modules
seen = []
original = cp_model.CpSolver.Solve
def spy(self, model, *args):
    params = self.parameters
    seen.append((params.random_seed, params.num_workers, params.max_time_in_seconds))
    return original(self, model, *args)
cp_model.CpSolver.Solve = spy
Place.of("ilp", time_limit=20.0, workers=2, isolate="no").run(comm_heavy_module(1, 5, "2xV100"), PassContext(seed=7))
print(seen)
"""


def test_the_pipeline_seed_and_the_options_reach_cp_sat() -> None:
    """--seed becomes CP-SAT's random_seed; workers and time-limit reach its parameters.

    CP-SAT runs in a fresh interpreter: the test session may have loaded TensorFlow (see below).
    """
    pytest.importorskip("ortools.sat.python.cp_model")
    script = _SEED_SPY.format(tests=str(Path(__file__).parent))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    ((seed, workers, limit),) = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own repr
    assert (seed, workers) == (7, 2) and 0 < limit <= 20.0


def test_ilp_writes_no_annotation_before_place_does() -> None:
    """The placer is pure: the warm start and the final comparison simulate on a copy of the graph."""
    from graphir.passes.place import PLACERS, placement_context

    module = comm_heavy_module(2, 5, "2xV100")
    before = print_module(module)
    problem = PlacementProblem.from_module(module)
    placement = PLACERS["ilp"](time_limit=20.0).place(problem, placement_context(module, PassContext()))
    assert print_module(module) == before
    assert placement.device.shape == (problem.num_nodes,) and placement.start is not None
