"""The CP-SAT model builder of ``place{algo=ilp}`` (:mod:`graphir.passes.place.ilp_model`) on hand-worked instances.

Each case is small enough to work out by hand: the crossing values of a graph, the integer time
scale, the model's own replay of a placement, and the optimum CP-SAT proves for a fork, a pinned
pair of transfers under each congestion rule, a FIFO channel, a control edge, a colocation class
and the paper memory rule. The optimum is checked in seconds against the hand-worked value (all
durations are whole multiples of the time unit here, so the integer model is exact).

The cluster (``MESH``): gpu0 (kind V100) and gpu1 (kind P100), 1,000 B of memory each, every link
0.1 ms of latency and 1 GB/s: a 1e6 B value takes 1.1 ms to cross, a 5e6 B one 5.1 ms. An
``affinity`` of one kind pins a node to that device.

CP-SAT crashes in a process that has loaded TensorFlow (see ``Ilp.isolate``), which the test
session may have done: the model is then built and solved in the session's solver process
(``helpers.SolverProcess``, a Python without TensorFlow).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import SOLVER_PROCESS, f32, solve_ilp_model

from graphir.annotations import Cost
from graphir.ir import Graph, Module, Node, Value
from graphir.passes.place.ilp_model import IlpModel, Transfers, ancestors
from graphir.passes.place.problem import PlacementProblem

pytest.importorskip("ortools.sat.python.cp_model")

MS = 1e-3
MESH = """
[default_link]
latency = 1e-4
bandwidth = 1e9
[[device]]
name = "gpu0"
kind = "V100"
memory = 1000
[[device]]
name = "gpu1"
kind = "P100"
memory = 1000
"""
MB = 250_000  # f32 elements of 1e6 B: 1.1 ms across a link


class Builder:
    """A graph on ``MESH`` whose nodes take the same time on both kinds unless told otherwise."""

    def __init__(self, tmp_path: Path, cluster: str = MESH) -> None:
        self.cluster = tmp_path / "mesh.toml"
        self.cluster.write_text(cluster)
        self.graph = Graph()
        self.x = self.graph.add_input("x", f32(4))

    def node(
        self,
        name: str,
        inputs: list[Value],
        sizes: list[int],
        ms: float,
        pin: str | None = None,
        p100_ms: float | None = None,
    ) -> Node:
        op = "tf.Split" if len(sizes) > 1 else ("tf.AddV2" if len(inputs) > 1 else "tf.Relu")
        node = self.graph.add_node(op, inputs or [self.x], [f32(s) for s in sizes], name=name)
        node.cost = Cost({"V100": ms * MS, "P100": (ms if p100_ms is None else p100_ms) * MS})
        if pin is not None:
            node.affinity = (pin,)
        return node

    def problem(self, outputs: list[Value]) -> PlacementProblem:
        self.graph.set_outputs(outputs)
        return PlacementProblem.from_module(Module("m", self.graph, str(self.cluster)))


def coarse(problem: PlacementProblem, name: str) -> int:
    """The coarse node holding the fine node ``name``."""
    return int(problem.node_group[problem.fine.node_names.index(name)])


def solve(
    problem: PlacementProblem, hint: tuple[list[int], list[int]] | None = None, **options: object
) -> dict[str, object]:
    """Build the model with ``options`` and solve it to optimality (one worker, seed 0).

    With ``hint`` (device, sequence) every variable is fixed to the hinted value: the hint must be
    a complete feasible assignment.
    """
    if "tensorflow" not in sys.modules:
        return solve_ilp_model(problem, options, hint)
    return SOLVER_PROCESS.call("helpers", "solve_ilp_model", (problem, options, hint))


# --------------------------------------------------------------------------- crossing values and scale


def test_transfers_are_the_values_that_cross_groups(tmp_path: Path) -> None:
    """a (group 0 with b) splits x into a0 (1e6 B) and a1 (100 B); b reads a0 inside the group, c
    reads a0 and a1, d reads b's result and waits for c by a control edge, e reads c's result and
    also waits for it by control.

    Crossing values, by fine value number: a0 -> {c}, a1 -> {c}, b0 -> {d}, c0 -> {e}; a0's use by b
    stays inside the group. The only control pair is (c, d): (c, e) is joined by data as well.
    """
    build = Builder(tmp_path)
    a = build.node("a", [], [MB, 25], 1)
    b = build.node("b", [a.outputs[0]], [8], 1)
    c = build.node("c", [a.outputs[0], a.outputs[1]], [MB], 1)
    d = build.node("d", [b.outputs[0]], [4], 1)
    e = build.node("e", [c.outputs[0]], [4], 1)
    d.add_control_input(c)
    e.add_control_input(c)
    a.group = b.group = 0
    problem = build.problem([d.outputs[0], e.outputs[0]])
    transfers = Transfers(problem)
    ab, cc, dd, ee = (coarse(problem, name) for name in "acde")
    assert coarse(problem, "b") == ab and problem.num_nodes == 4
    assert transfers.values.tolist() == sorted(transfers.values.tolist()) and len(transfers.values) == 4
    assert transfers.producer == [ab, ab, ab, cc]
    assert transfers.nbytes == [1e6, 100.0, 32.0, 1e6]
    assert transfers.consumers == [[cc], [cc], [dd], [ee]]
    of_node = [[] for _ in range(4)]
    of_node[ab], of_node[cc] = [0, 1, 2], [3]
    assert transfers.of_node == of_node
    assert transfers.control == [(cc, dd)]


def test_ancestors_are_bitsets_of_every_node_above(tmp_path: Path) -> None:
    """A diamond a -> {b, c} -> d and a lone e: d's ancestors are a, b, c; e has none."""
    build = Builder(tmp_path)
    a = build.node("a", [], [4], 1)
    b = build.node("b", [a.outputs[0]], [4], 1)
    c = build.node("c", [a.outputs[0]], [4], 1)
    d = build.node("d", [b.outputs[0], c.outputs[0]], [4], 1)
    e = build.node("e", [], [4], 1)
    problem = build.problem([d.outputs[0], e.outputs[0]])
    bits = ancestors(problem)
    na, nb, nc, nd, ne = (coarse(problem, name) for name in "abcde")
    assert bits[na] == 0 and bits[ne] == 0
    assert bits[nb] == 1 << na and bits[nc] == 1 << na
    assert bits[nd] == (1 << na) | (1 << nb) | (1 << nc)


def test_time_scale_durations_transfers_and_horizon(tmp_path: Path) -> None:
    """a (1 ms on V100, 3 ms on P100) feeds b (2 ms) 1e6 B; c waits for b by a control edge.

    Horizon in seconds: the longest times 3 + 2 + 1 = 6 ms, plus (2 - 1) devices x 1.1 ms for the one
    crossing value: 7.1e-3 s. The unit is the power of ten putting it in [1e6, 1e7) units: 1e-9 s.
    In units: durations [1e6, 3e6], [2e6, 2e6], [1e6, 1e6]; the transfer 1.1e6 across, 0 in place;
    latency 1e5 across. The integer horizon adds each device's longest latency (1e5 + 1e5) per
    control pair: 6e6 + 1.1e6 + 2e5 = 7.3e6.
    """
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1, p100_ms=3)
    b = build.node("b", [a.outputs[0]], [4], 2)
    c = build.node("c", [], [4], 1)
    c.add_control_input(b)
    problem = build.problem([c.outputs[0]])
    ilp = IlpModel(problem, Transfers(problem), None)
    assert ilp.unit == pytest.approx(1e-9, rel=1e-12)
    order = [coarse(problem, name) for name in "abc"]
    assert [ilp.dur[g] for g in order] == [[1_000_000, 3_000_000], [2_000_000, 2_000_000], [1_000_000, 1_000_000]]
    assert ilp.comm == [[[0, 1_100_000], [1_100_000, 0]]]
    assert ilp.occupancy == ilp.comm  # pair: the latency holds the channel too
    assert ilp.latency == [[0, 100_000], [100_000, 0]]
    assert ilp.horizon == 7_300_000
    topology = IlpModel(problem, Transfers(problem), None, congestion="topology")
    assert topology.comm == ilp.comm
    assert topology.occupancy == [[[0, 1_000_000], [1_000_000, 0]]]  # bytes / bandwidth only


def test_the_horizon_charges_every_other_device_per_transfer(tmp_path: Path) -> None:
    """On three devices a value may be sent to both others: the horizon counts (3 - 1) transfers of
    it. a (1 ms) feeds b (2 ms) 1e6 B (1.1 ms): 3 ms + 2 x 1.1 ms = 5.2e-3 s, unit 1e-9 s,
    horizon 5.2e6 units."""
    build = Builder(tmp_path, MESH + '[[device]]\nname = "gpu2"\nkind = "P100"\nmemory = 1000\n')
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 2)
    problem = build.problem([b.outputs[0]])
    ilp = IlpModel(problem, Transfers(problem), None)
    assert ilp.unit == pytest.approx(1e-9, rel=1e-12)
    assert ilp.horizon == 5_200_000


def test_a_zero_cost_node_gets_one_unit(tmp_path: Path) -> None:
    """A node of no time lasts one unit; a 0-byte value across still takes its latency."""
    build = Builder(tmp_path)
    a = build.node("a", [], [0], 0)
    b = build.node("b", [a.outputs[0]], [4], 1)
    problem = build.problem([b.outputs[0]])
    ilp = IlpModel(problem, Transfers(problem), None)
    assert ilp.dur[coarse(problem, "a")] == [1, 1]
    # horizon 1 ms + 0.1 ms (the empty value's latency): 1.1e-3 s, unit 1e-9 s; the transfer 1e5 units
    assert ilp.unit == pytest.approx(1e-9, rel=1e-12)
    assert ilp.comm == [[[0, 100_000], [100_000, 0]]]


# --------------------------------------------------------------------------- the model's replay


def test_replay_of_a_split_fork(tmp_path: Path) -> None:
    """a (1 ms) feeds b (2 ms) and c (2 ms) 1e6 B. a, b on gpu0 and c on gpu1, sequence a, b, c:
    a 0..1, b 1..3, the transfer to gpu1 1..2.1, c 2.1..4.1 (units of 1e-9 s)."""
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 2)
    c = build.node("c", [a.outputs[0]], [4], 2)
    problem = build.problem([b.outputs[0], c.outputs[0]])
    na, nb, nc = (coarse(problem, name) for name in "abc")
    ilp = IlpModel(problem, Transfers(problem), None)
    device = [0] * 3
    device[nc] = 1
    schedule = ilp.replay(device, [na, nb, nc])
    us = 1000  # units per microsecond
    assert [schedule["start"][g] for g in (na, nb, nc)] == [0, 1000 * us, 2100 * us]
    assert [schedule["end"][g] for g in (na, nb, nc)] == [1000 * us, 3000 * us, 4100 * us]
    assert schedule["arrival"] == {(0, 1): (1000 * us, 2100 * us)}
    assert ilp.hint(device, [na, nb, nc]) == 4100 * us


def test_replay_queues_two_transfers_on_one_channel_and_a_control_latency(tmp_path: Path) -> None:
    """a (gpu0, 1 ms) sends a0 and a1 (1e6 B each) to b and c on gpu1 (1 ms each); d (gpu1, 1 ms)
    waits for a by a control edge; e (gpu0, 1 ms) is independent. Sequence a, e, d, b, c.

    pair: a0 on the channel 1..2.1, a1 queued behind it 2.1..3.2; e 1..2; d starts at 1 + 0.1
    latency = 1.1, ends 2.1; b 2.1..3.1; c 3.2..4.2.
    task: a transfer also holds both devices' compute, and the replay books a's transfers when a
    finishes (before e and d, next in the sequence): a0 1..2.1, a1 2.1..3.2, so both devices' compute
    is free at 3.2: e 3.2..4.2 on gpu0, d 3.2..4.2, b 4.2..5.2, c 5.2..6.2 on gpu1.
    topology: only 1 ms of bytes holds the route: a0 1..2 (lands 2.1), a1 2..3 (lands 3.1); e 1..2;
    b 2.1..3.1, c 3.1..4.1.
    """
    build = Builder(tmp_path)
    a = build.node("a", [], [MB, MB], 1, pin="V100")
    b = build.node("b", [a.outputs[0]], [4], 1, pin="P100")
    c = build.node("c", [a.outputs[1]], [4], 1, pin="P100")
    d = build.node("d", [], [4], 1, pin="P100")
    d.add_control_input(a)
    e = build.node("e", [], [4], 1, pin="V100")
    problem = build.problem([b.outputs[0], c.outputs[0], d.outputs[0], e.outputs[0]])
    na, nb, nc, nd, ne = (coarse(problem, name) for name in "abcde")
    device = [1] * 5
    device[na] = device[ne] = 0
    sequence = [na, ne, nd, nb, nc]
    us = 1000
    expected = {
        "pair": ({na: 0, ne: 1000, nd: 1100, nb: 2100, nc: 3200}, [(1000, 2100), (2100, 3200)]),
        "task": ({na: 0, ne: 3200, nd: 3200, nb: 4200, nc: 5200}, [(1000, 2100), (2100, 3200)]),
        "topology": ({na: 0, ne: 1000, nd: 1100, nb: 2100, nc: 3100}, [(1000, 2100), (2000, 3100)]),
    }
    for rule, (starts, arrivals) in expected.items():
        ilp = IlpModel(problem, Transfers(problem), None, congestion=rule)
        schedule = ilp.replay(device, sequence)
        assert {g: schedule["start"][g] // us for g in starts} == starts, rule
        assert [schedule["arrival"][(k, 1)] for k in (0, 1)] == [(s * us, e * us) for s, e in arrivals], rule


# --------------------------------------------------------------------------- optima by hand


def test_a_fork_splits_when_the_transfer_is_cheaper_than_waiting(tmp_path: Path) -> None:
    """a (1 ms) feeds b and c (2 ms each). One device: 5 ms. a, b on one device and c on the other:
    c waits for the 1.1 ms transfer, 1 + 1.1 + 2 = 4.1 ms, the optimum. With a 5e6 B value the
    transfer (5.1 ms) costs more than waiting: 5 ms on one device."""
    for size, best, split in ((MB, 4.1, True), (5 * MB, 5.0, False)):
        build = Builder(tmp_path)
        a = build.node("a", [], [size], 1)
        b = build.node("b", [a.outputs[0]], [4], 2)
        c = build.node("c", [a.outputs[0]], [4], 2)
        problem = build.problem([b.outputs[0], c.outputs[0]])
        result = solve(problem)
        assert result["status"] == "OPTIMAL"
        assert result["makespan"] == pytest.approx(best * MS, rel=1e-9)
        device = result["device"]
        na, nb, nc = (coarse(problem, name) for name in "abc")
        assert (device[nb] != device[nc]) == split and device[na] in (device[nb], device[nc])


def test_a_colocation_class_keeps_the_fork_together(tmp_path: Path) -> None:
    """The fork above with b and c colocated: they share one device, and a goes with them (a
    transfer to both would cost 1 + 1.1 + 4 = 6.1 ms): 5 ms."""
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 2)
    c = build.node("c", [a.outputs[0]], [4], 2)
    b.colocate = c.colocate = "bc"
    problem = build.problem([b.outputs[0], c.outputs[0]])
    result = solve(problem)
    assert result["makespan"] == pytest.approx(5 * MS, rel=1e-9)
    assert len(set(result["device"])) == 1


def test_an_affinity_pins_a_node_and_each_node_runs_once(tmp_path: Path) -> None:
    """b (2 ms on V100, 1 ms on P100) may run only on the V100 (gpu0); a (1 ms) feeds it 1e6 B, c
    (1 ms) is independent. Best: a, b on gpu0 (0..1, 1..3), c on gpu1 (0..1): 3 ms."""
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 2, pin="V100", p100_ms=1)
    c = build.node("c", [], [4], 1)
    problem = build.problem([b.outputs[0], c.outputs[0]])
    result = solve(problem)
    assert result["makespan"] == pytest.approx(3 * MS, rel=1e-9)
    na, nb, nc = (coarse(problem, name) for name in "abc")
    assert [result["device"][g] for g in (na, nb, nc)] == [0, 0, 1]
    assert [result["start"][g] for g in (na, nb, nc)] == pytest.approx([0, 1 * MS, 0], abs=1e-12)


@pytest.mark.parametrize(("rule", "best"), [("pair", 4.2), ("port", 4.2), ("task", 5.2), ("topology", 4.1)])
def test_two_transfers_share_the_route_under_each_congestion_rule(tmp_path: Path, rule: str, best: float) -> None:
    """a (gpu0, 1 ms) sends a0 and a1 (1e6 B each) to b and c, both pinned to gpu1 (1 ms each).

    pair and port: the channel carries one transfer at a time: 1..2.1 and 2.1..3.2, b 2.1..3.1,
    c 3.2..4.2: 4.2 ms (both at once would give 4.1). task: the transfers also hold gpu1's compute,
    so b cannot run beside the second one: 1..2.1, 2.1..3.2, then b and c 3.2..5.2 (or b between
    the transfers, c after the second: the same 5.2 ms). topology: the route is held only for the
    1 ms of bytes: 1..2 (lands 2.1) and 2..3 (lands 3.1), b 2.1..3.1, c 3.1..4.1: 4.1 ms.
    """
    build = Builder(tmp_path)
    a = build.node("a", [], [MB, MB], 1, pin="V100")
    b = build.node("b", [a.outputs[0]], [4], 1, pin="P100")
    c = build.node("c", [a.outputs[1]], [4], 1, pin="P100")
    problem = build.problem([b.outputs[0], c.outputs[0]])
    result = solve(problem, congestion=rule)
    assert result["status"] == "OPTIMAL"
    assert result["makespan"] == pytest.approx(best * MS, rel=1e-9)


def test_the_channel_serves_transfers_in_the_order_of_their_producers(tmp_path: Path) -> None:
    """p then q on gpu0 (1 ms each; p feeds q an empty value, so p runs first); p sends P (5e6 B,
    5.1 ms) to cp (1 ms), q sends Q (1e6 B, 1.1 ms) to cq (10 ms), cp and cq on gpu1.

    FIFO (the simulator's channel): P is sent first, 1..6.1, then Q 6.1..7.2; cp 6.1..7.1, cq
    7.2..17.2: 17.2 ms. Without the FIFO constraints (fifo-limit 0) Q may overtake: Q 2..3.1, P
    3.1..8.2, cq 3.1..13.1, cp 13.1..14.1: 14.1 ms.
    """
    build = Builder(tmp_path)
    p = build.node("p", [], [5 * MB, 0], 1, pin="V100")
    q = build.node("q", [p.outputs[1]], [MB], 1, pin="V100")
    cp = build.node("cp", [p.outputs[0]], [4], 1, pin="P100")
    cq = build.node("cq", [q.outputs[0]], [4], 10, pin="P100")
    problem = build.problem([cp.outputs[0], cq.outputs[0]])
    fifo = solve(problem)
    assert fifo["fifo"] is True and fifo["makespan"] == pytest.approx(17.2 * MS, rel=1e-9)
    free = solve(problem, fifo_limit=0)
    assert free["fifo"] is False and free["makespan"] == pytest.approx(14.1 * MS, rel=1e-9)


@pytest.mark.parametrize("q_first", [False, True])
def test_independent_producers_keep_the_channel_in_their_device_order(tmp_path: Path, q_first: bool) -> None:
    """p (2 ms) and q (1 ms) on gpu0, independent; p sends P (5e6 B, 5.1 ms) to cp (1 ms), q sends Q
    (1e6 B, 1.1 ms) to cq (7 ms), cp and cq on gpu1. Built in both orders, so that q is once the
    lower- and once the higher-numbered producer of the pair's order literal.

    By hand: q first: q 0..1, p 1..3; Q 1..2.1, P 3..8.1 (Q's transfer ends well before P's starts);
    cq 2.1..9.1, cp 9.1..10.1: 10.1 ms. p first: P 2..7.1, then Q 7.1..8.2 (FIFO), cq to 15.2: worse.
    """
    build = Builder(tmp_path)
    nodes = {}
    for name in ("q", "p") if q_first else ("p", "q"):
        nodes[name] = build.node(name, [], [MB if name == "q" else 5 * MB], 1 if name == "q" else 2, pin="V100")
    cp = build.node("cp", [nodes["p"].outputs[0]], [4], 1, pin="P100")
    cq = build.node("cq", [nodes["q"].outputs[0]], [4], 7, pin="P100")
    problem = build.problem([cp.outputs[0], cq.outputs[0]])
    result = solve(problem)
    assert result["fifo"] is True and result["makespan"] == pytest.approx(10.1 * MS, rel=1e-9)
    start = result["start"]
    assert start[coarse(problem, "q")] == 0 and start[coarse(problem, "p")] == pytest.approx(1 * MS, rel=1e-9)


def test_a_control_edge_across_devices_waits_the_latency(tmp_path: Path) -> None:
    """b (pinned to gpu1) waits for a (pinned to gpu0) by a control edge only: 1 + 0.1 + 1 = 2.1 ms;
    unpinned, both run on one device: 2 ms."""
    for pinned, best in ((True, 2.1), (False, 2.0)):
        build = Builder(tmp_path)
        a = build.node("a", [], [4], 1, pin="V100" if pinned else None)
        b = build.node("b", [], [4], 1, pin="P100" if pinned else None)
        b.add_control_input(a)
        problem = build.problem([a.outputs[0], b.outputs[0]])
        result = solve(problem)
        assert result["makespan"] == pytest.approx(best * MS, rel=1e-9)


def test_a_control_edge_orders_two_nodes_on_one_device(tmp_path: Path) -> None:
    """a (2 ms) and b (1 ms) both on gpu0, b after a by a control edge only; b feeds d (gpu1, 1 ms)
    an empty value (0.1 ms of latency). a 0..2, b 2..3, d 3.1..4.1: 4.1 ms. Without the control
    precedence b could run first (b 0..1, a 1..3, d 1.1..2.1: 3 ms)."""
    build = Builder(tmp_path)
    a = build.node("a", [], [4], 2, pin="V100")
    b = build.node("b", [], [0], 1, pin="V100")
    d = build.node("d", [b.outputs[0]], [4], 1, pin="P100")
    b.add_control_input(a)
    problem = build.problem([a.outputs[0], d.outputs[0]])
    result = solve(problem)
    assert result["makespan"] == pytest.approx(4.1 * MS, rel=1e-9)
    assert result["start"][coarse(problem, "b")] == pytest.approx(2 * MS, rel=1e-9)


def test_the_paper_memory_rule_forces_a_chain_apart(tmp_path: Path) -> None:
    """a -> b (1 ms each, 1e6 B between) with 600 B each against 1,000 B per device: they cannot
    share a device, so b waits for the transfer: 1 + 1.1 + 1 = 3.1 ms (2 ms without the rule)."""
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 1)
    problem = build.problem([b.outputs[0]])
    together = solve(problem, memory=None)
    assert together["makespan"] == pytest.approx(2 * MS, rel=1e-9)
    apart = solve(problem, memory=np.asarray([600.0, 600.0]))
    assert apart["makespan"] == pytest.approx(3.1 * MS, rel=1e-9)
    assert apart["device"][0] != apart["device"][1]
    fits = solve(problem, memory=np.asarray([500.0, 500.0]))  # exactly the capacity: allowed
    assert fits["makespan"] == pytest.approx(2 * MS, rel=1e-9)


def test_the_hint_is_a_complete_feasible_assignment(tmp_path: Path) -> None:
    """Every variable fixed to the hint of a replayed placement: the model accepts it and its
    objective is the replay's makespan (the fork split a, b | c: 4.1 ms; the pinned pair under
    each rule: 4.2, 5.2 and 4.1 ms; the FIFO channel: 17.2 ms)."""
    build = Builder(tmp_path)
    a = build.node("a", [], [MB], 1)
    b = build.node("b", [a.outputs[0]], [4], 2)
    c = build.node("c", [a.outputs[0]], [4], 2)
    problem = build.problem([b.outputs[0], c.outputs[0]])
    na, nb, nc = (coarse(problem, name) for name in "abc")
    device = [0] * 3
    device[nc] = 1
    fixed = solve(problem, hint=(device, [na, nb, nc]))
    assert fixed["status"] == "OPTIMAL" and fixed["hinted"] == 4_100_000
    assert fixed["makespan"] == pytest.approx(4.1 * MS, rel=1e-9)
    assert fixed["device"] == device

    build = Builder(tmp_path)
    a = build.node("a", [], [MB, MB], 1, pin="V100")
    b = build.node("b", [a.outputs[0]], [4], 1, pin="P100")
    c = build.node("c", [a.outputs[1]], [4], 1, pin="P100")
    problem = build.problem([b.outputs[0], c.outputs[0]])
    na, nb, nc = (coarse(problem, name) for name in "abc")
    for rule, best in (("pair", 4.2), ("task", 5.2), ("topology", 4.1)):
        fixed = solve(problem, hint=([0, 1, 1], [na, nb, nc]), congestion=rule)
        assert fixed["status"] == "OPTIMAL", rule
        assert fixed["makespan"] == pytest.approx(best * MS, rel=1e-9), rule

    build = Builder(tmp_path)
    p = build.node("p", [], [5 * MB, 0], 1, pin="V100")
    q = build.node("q", [p.outputs[1]], [MB], 1, pin="V100")
    cp = build.node("cp", [p.outputs[0]], [4], 1, pin="P100")
    cq = build.node("cq", [q.outputs[0]], [4], 10, pin="P100")
    problem = build.problem([cp.outputs[0], cq.outputs[0]])
    names = ("p", "q", "cp", "cq")
    sequence = [coarse(problem, name) for name in names]
    device = [0] * 4
    for name in ("cp", "cq"):
        device[coarse(problem, name)] = 1
    fixed = solve(problem, hint=(device, sequence))
    assert fixed["status"] == "OPTIMAL" and fixed["makespan"] == pytest.approx(17.2 * MS, rel=1e-9)
