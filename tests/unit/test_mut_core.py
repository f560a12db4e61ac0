"""Hand-worked checks of the algorithmic core, written to kill mutants that survived ``make mutation``.

Each test states a behaviour with an expected value worked out by hand in its comments; none reads
the answer back from the code under test.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import f32

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor
from graphir.cluster import resolve_cluster
from graphir.cluster_model import TransferCpu
from graphir.cluster_toml import load_cluster_toml
from graphir.errors import PassError
from graphir.ir import Graph, Module
from graphir.links import LinkModel
from graphir.memory import Allocations, MemoryLedger
from graphir.parser import parse_module
from graphir.passes.fuse.batch import batch_round
from graphir.passes.fuse.common import CoarseGraph
from graphir.passes.fuse.cpd import fuse_cpd_topo, optimal_breakpoints
from graphir.passes.place import PLACERS, PlacementContext
from graphir.passes.place.fastt import critical_path, fastt_rank
from graphir.passes.place.heft import Heft
from graphir.passes.place.ilp_model import IlpModel, Transfers
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.place.sct_lp import favourite_children, solve_favourite_lp
from graphir.passes.profile.roofline import analyze_graph, kind_times, roofline
from graphir.simulator import SimResult, simulate
from graphir.types import DType, TensorType

GiB = 1 << 30


# --------------------------------------------------------------------------- the roofline cost model


def test_roofline_takes_the_slower_of_compute_and_memory_plus_the_launch() -> None:
    # node 0: 1e9 FLOP / 1e12 FLOP/s = 1 ms beats 1e6 B / 1e11 B/s = 10 us -> 1 ms + 1 us
    # node 1: 1e6 FLOP -> 1 us; 1e9 B / 1e11 B/s = 10 ms -> 10 ms + 1 us
    times = roofline(np.array([1e9, 1e6]), np.array([1e6, 1e9]), 1e12, 1e11, 1e-6)
    assert times.tolist() == pytest.approx([1.001e-3, 10.001e-3], rel=1e-12)


def test_roofline_with_asynchronous_dispatch_takes_the_slower_of_kernel_and_dispatch() -> None:
    # P = 1e12 FLOP/s, B = 1e11 B/s, launch overhead 1 us, kernel dispatch 10 us:
    # node 0: 1e9 FLOP -> a 1 ms kernel, longer than the 10 us dispatch: 1 ms (the launch is hidden)
    # node 1: 1e6 FLOP -> 1 us, 1e5 B -> 1 us: a 1 us kernel waits for its 10 us dispatch: 10 us
    # node 2: no work (a reshape): the 1 us launch overhead, as without dispatch
    flops, nbytes = np.array([1e9, 1e6, 0.0]), np.array([1e6, 1e5, 0.0])
    times = roofline(flops, nbytes, 1e12, 1e11, 1e-6, 10e-6)
    assert times.tolist() == pytest.approx([1e-3, 10e-6, 1e-6], rel=1e-12)
    # dispatch 0 (the default) is the additive rule: 1.001 ms, 2 us, 1 us
    assert roofline(flops, nbytes, 1e12, 1e11, 1e-6).tolist() == pytest.approx([1.001e-3, 2e-6, 1e-6], rel=1e-12)


def _weights_graph() -> Graph:
    """x, a weight w shared by two Muls, a variable of 10x20 f32 and a Const of 5 f32."""
    graph = Graph()
    x = graph.add_input("x", f32(1000))
    w = graph.add_constant("w", f32(1000))
    a = graph.add_node("tf.Mul", [x, w], [f32(1000)], name="a")
    b = graph.add_node("tf.Mul", [a.outputs[0], w], [f32(1000)], name="b")
    graph.add_node(
        "tf.VarHandleOp", [], [TensorType(DType.RESOURCE, ())], name="v", params={"dtype": "f32", "shape": (10, 20)}
    )
    c = graph.add_node("tf.Const", [], [f32(5)], name="c")
    graph.add_node("tf.AddV2", [b.outputs[0], c.outputs[0]], [f32(1000)], name="d")
    return graph


def test_shared_weight_is_attributed_once_and_owned_values_are_persistent() -> None:
    graph = _weights_graph()
    nodes = [graph.node(name) for name in ("a", "b", "v", "c", "d")]
    work = analyze_graph(graph, nodes)
    # w (1000 x 4 B) belongs to its first user a only; the variable holds 10 x 20 x 4 = 800 B; the
    # Const its 5 x 4 = 20 B; neither the variable nor the Const has an activation.
    assert work.persistent.tolist() == [4000, 0, 800, 20, 0]
    assert work.activation.tolist() == [4000, 4000, 0, 0, 4000]
    # a pointwise Mul of two inputs: |out| = 1000 FLOP; bytes = 2 x 4000 read + 4000 written
    assert work.flops[:2].tolist() == [1000.0, 1000.0]
    assert work.bytes[:2].tolist() == [12000.0, 12000.0]


def test_kind_times_are_per_device_kind() -> None:
    graph = _weights_graph()
    cluster = resolve_cluster("moirai-intra")  # V100-32GB and P100
    times, temporaries = kind_times(cluster, [graph.node("a")])
    assert sorted(times) == ["P100", "V100-32GB"]
    # bytes dominate: 12000 B / 900 GB/s = 13.33 ns on the V100, / 732 GB/s = 16.39 ns on the P100,
    # each plus the kind's 5 us launch overhead (the catalogue's figures)
    v100, p100 = cluster.kind_device("V100-32GB"), cluster.kind_device("P100")
    assert times["V100-32GB"][0] == pytest.approx(12000 / v100.mem_bandwidth + v100.launch_overhead)
    assert times["P100"][0] == pytest.approx(12000 / p100.mem_bandwidth + p100.launch_overhead)
    assert times["P100"][0] > times["V100-32GB"][0]
    assert temporaries == [0]


def test_a_constant_of_unsized_type_counts_its_data() -> None:
    """A Const whose result type has a symbolic dimension: its persistent bytes are its value's 3 x 4 B."""
    graph = Graph()
    c = graph.add_node(
        "tf.Const",
        [],
        [TensorType(DType.F32, ("n",))],
        name="c",
        params={"value": DenseTensor.from_numpy(np.arange(3, dtype=np.float32))},
    )
    work = analyze_graph(graph, [c])
    assert work.persistent.tolist() == [12]
    assert work.activation.tolist() == [0]


def test_kind_times_of_a_compute_bound_node_and_a_fallback_one() -> None:
    """A 512 x 512 x 512 MatMul: 2 x 512^3 = 268,435,456 FLOP / 15.7 TFLOP/s = 17.1 us on the V100,
    more than its 3 x 1 MiB / 900 GB/s = 3.5 us of bytes; plus the 5 us launch. An op without a cost
    rule (the bytes fallback) has no scratch bytes, like the MatMul."""
    graph = Graph()
    a = graph.add_input("a", f32(512, 512))
    b = graph.add_input("b", f32(512, 512))
    matmul = graph.add_node("tf.MatMul", [a, b], [f32(512, 512)], name="mm")
    unknown = graph.add_node("tf.NoSuchOp", [a], [f32(512, 512)], name="u")
    cluster = resolve_cluster("moirai-intra")
    times, temporaries = kind_times(cluster, [matmul, unknown])
    v100 = cluster.kind_device("V100-32GB")
    assert times["V100-32GB"][0] == pytest.approx(2 * 512**3 / v100.peak_flops + v100.launch_overhead)
    assert temporaries == [0, 0]


# --------------------------------------------------------------------------- the liveness memory ledger


def _ledger() -> MemoryLedger:
    """100 B persistent; 10 B on [0, 4); 20 B on [2, 6); 40 B from 4 on, freed at 8.

    Levels (above the persistent 100): [0,2) 10, [2,4) 30, [4,6) 60 (the 10 ended at 4 as the 40
    began: frees before allocations), [6,8) 40, from 8 on 0.
    """
    ledger = MemoryLedger()
    ledger.hold(100)
    ledger.allocate(10, 0.0, 4.0)
    ledger.allocate(20, 2.0, 6.0)
    ledger.allocate(40, 4.0)
    ledger.free(40, 8.0)
    return ledger


def test_ledger_usage_is_right_continuous() -> None:
    ledger = _ledger()
    expected = {
        -1.0: 100,
        0.0: 110,
        1.9: 110,
        2.0: 130,
        3.99: 130,
        4.0: 160,
        5.0: 160,
        6.0: 140,
        7.5: 140,
        8.0: 100,
        50.0: 100,
    }
    assert {t: ledger.usage_at(t) for t in expected} == expected
    assert ledger.peak() == 160


def test_ledger_peak_between_is_half_open() -> None:
    ledger = _ledger()
    assert ledger.peak_between(0.0, 4.0) == 130  # [4, 6)'s 160 starts at the open end
    assert ledger.peak_between(4.0, 4.5) == 160
    assert ledger.peak_between(6.0, 8.0) == 140
    assert ledger.peak_between(8.0, 9.0) == 100
    assert ledger.peak_between(-5.0, 0.0) == 100
    with pytest.raises(ValueError, match="empty interval"):
        ledger.peak_between(3.0, 3.0)


def test_ledger_peak_with_adds_tentatively() -> None:
    ledger = _ledger()
    # 25 B on [6, 8) lands on the 40 level: 100 + 40 + 25 = 165 > 160
    assert ledger.peak_with([(25, 6.0, 8.0)]) == 165
    # 15 B on [6, 8): 155, below the existing 160, so the peak stays 160
    assert ledger.peak_with([(15, 6.0, 8.0)]) == 160
    # 50 B on [8, 9) (after the free at 8) and 5 B on [3, 4): max(100 + 50, 100 + 30 + 5, 160) = 160
    assert ledger.peak_with([(50, 8.0, 9.0), (5, 3.0, 4.0)]) == 160
    # two tentative allocations that meet at 7: [5, 7) and [7, 9) of 70 B never overlap:
    # at 5: 160 + 70 = 230; at 7: 140 + 70 = 210; so 230
    assert ledger.peak_with([(70, 5.0, 7.0), (70, 7.0, 9.0)]) == 230
    # overlapping ones add: [6, 8) 30 B and [7, 9) 30 B: at 7: 40 + 60 = 100 over the 100 persistent
    assert ledger.peak_with([(30, 6.0, 8.0), (30, 7.0, 9.0)]) == 200
    assert ledger.peak_with([(0, 1.0, 2.0), (9, 3.0, 3.0)]) == 160  # empty: the peak as it is
    assert ledger.peak() == 160  # unchanged
    assert ledger.fits(40, 6.0, 8.0, 180) and not ledger.fits(41, 6.0, 8.0, 180)


def test_ledger_peak_after_a_release_is_recomputed() -> None:
    ledger = MemoryLedger()
    ledger.allocate(50, 0.0)
    assert ledger.peak() == 50
    ledger.free(50, 1.0)
    ledger.allocate(30, 2.0, 3.0)
    assert ledger.peak() == 50
    ledger.allocate(-50, 0.0, 1.0)  # undo the first allocation entirely
    assert ledger.peak() == 30
    version = ledger.version
    ledger.allocate(7, 5.0, 5.0)  # empty interval: nothing changes
    assert ledger.version == version and ledger.usage_at(5.0) == 0


# --------------------------------------------------------------------------- the simulator

T = "f32[250000]"  # 1e6 B: 1 ms at 1 GB/s
MS = 1e-3
MESH2 = """
[default_link]
latency = 0.0
bandwidth = 1e9
[[device]]
name = "cpu0"
kind = "cpu"
tf_device = "/device:CPU:0"
[[device]]
name = "cpu1"
kind = "cpu"
tf_device = "/device:CPU:1"
"""


def _module(tmp_path: Path, lines: list[str], results: str, header: str = "") -> Module:
    cluster = tmp_path / "c.toml"
    cluster.write_text(MESH2)
    body = "\n".join([*lines, f"    return {results}"])
    return parse_module(f'module @m {{cluster = "{cluster}"{header}}} {{\n  graph @g(%x : {T}) {{\n{body}\n  }}\n}}\n')


def _times(module: Module, result: SimResult) -> dict[str, tuple[float, float]]:
    nodes = module.graph.index().nodes
    return {node.name: (float(result.start[i]), float(result.finish[i])) for i, node in enumerate(nodes)}


def test_dynamic_order_starts_a_freed_device_at_once(tmp_path: Path) -> None:
    """cpu0 runs a then b (independent, 1 ms each) while cpu1 runs c (5 ms): b runs 1..2, not after c."""
    module = _module(
        tmp_path,
        [
            f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]',
            f'    %b = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 1]',
            f'    %c = onnx.Relu(%x) : ({T}) -> {T} [cost = 5ms, device = "cpu1", order = 0]',
        ],
        "%a, %b, %c",
    )
    result = simulate(module, "pair", "dynamic")
    times = _times(module, result)
    assert times["a"] == pytest.approx((0.0, 1 * MS))
    assert times["b"] == pytest.approx((1 * MS, 2 * MS))
    assert times["c"] == pytest.approx((0.0, 5 * MS))
    assert result.makespan == pytest.approx(5 * MS)


@pytest.mark.parametrize("kind", ["GPU", "CPU"])
def test_dynamic_order_picks_after_every_event_of_the_instant(tmp_path: Path, kind: str) -> None:
    """a (cpu0) and c (cpu1) both finish at 1 ms; a readies q and c readies r (an empty tensor: no
    transfer time), both on cpu0. Both are ready at 1 ms. On GPUs (FIFO by readiness) cpu0 picks by
    ``order``: r (1) before q (2): r 1..2, q 2..3 -- not q first because a's finish was handled
    before c's. On CPUs (newest first) q, made ready by cpu0's own node, runs before r, made ready by
    an arrival: q 1..2, r 2..3 -- not r first because c's finish was handled before a's."""
    e = "f32[0]"
    module = _module(
        tmp_path,
        [
            f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]',
            f'    %c = onnx.Relu(%x) : ({T}) -> {e} [cost = 1ms, device = "cpu1", order = 0]',
            f'    %q = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 2]',
            f'    %r = onnx.Relu(%c) : ({e}) -> {e} [cost = 1ms, device = "cpu0", order = 1]',
        ],
        "%q, %r",
    )
    if kind == "GPU":
        gpus = tmp_path / "gpus.toml"
        gpus.write_text(MESH2.replace("/device:CPU:", "/device:GPU:"))
        module.set_cluster(load_cluster_toml(gpus))
    times = _times(module, simulate(module, "pair", "dynamic"))
    first, second = ("r", "q") if kind == "GPU" else ("q", "r")
    assert times[first] == pytest.approx((1 * MS, 2 * MS))
    assert times[second] == pytest.approx((2 * MS, 3 * MS))


@pytest.mark.parametrize("order", ["enforced", "dynamic"])
def test_a_long_chain_runs_to_the_end(tmp_path: Path, order: str) -> None:
    """300 nodes of 1 ms in a chain on cpu0 (more than Python's cached small ints): 300 ms, no deadlock."""
    lines = [f'    %n0 = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]']
    lines += [
        f'    %n{i} = onnx.Relu(%n{i - 1}) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = {i}]'
        for i in range(1, 300)
    ]
    module = _module(tmp_path, lines, "%n299")
    result = simulate(module, "pair", order)
    assert result.makespan == pytest.approx(300 * MS)
    assert _times(module, result)["n299"] == pytest.approx((299 * MS, 300 * MS))


def test_a_transfer_is_counted_once_on_its_pair(tmp_path: Path) -> None:
    """a (cpu0, 0..1 ms) feeds c and d on cpu1: one 1e6 B transfer at 1 GB/s (1..2 ms), c 2..3, d 3..4."""
    module = _module(
        tmp_path,
        [
            f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]',
            f'    %c = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu1", order = 0]',
            f'    %d = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu1", order = 1]',
        ],
        "%c, %d",
    )
    result = simulate(module, "pair", "enforced")
    assert result.transfers == 1
    assert result.link_bytes == {("cpu0", "cpu1"): 1_000_000}
    assert result.link_busy == pytest.approx({("cpu0", "cpu1"): 1 * MS})
    times = _times(module, result)
    assert times["c"] == pytest.approx((2 * MS, 3 * MS)) and times["d"] == pytest.approx((3 * MS, 4 * MS))
    assert result.busy.tolist() == pytest.approx([1 * MS, 2 * MS])


def test_an_unplaced_node_is_named(tmp_path: Path) -> None:
    placed = f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]'
    unplaced = _module(tmp_path, [placed, f"    %b = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, order = 1]"], "%b")
    with pytest.raises(PassError, match="node 'b' has no 'device'"):
        simulate(unplaced, "pair")
    unordered = _module(
        tmp_path, [placed, f'    %b = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu0"]'], "%b"
    )
    with pytest.raises(PassError, match="node 'b' has no 'order'"):
        simulate(unordered, "pair")


# --------------------------------------------------------------------------- HEFT's options


def test_heft_takes_its_options_and_is_frozen() -> None:
    heft = Heft(mem_model="paper", plan_congestion="port")
    assert (heft.mem_model, heft.plan_congestion) == ("paper", "port")
    assert Heft() == Heft(mem_model="liveness", plan_congestion="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        heft.mem_model = "liveness"  # type: ignore[misc]


def test_a_device_over_its_memory_is_reported(tmp_path: Path) -> None:
    """cpu0 holds 1.5 MB: a's 1e6 B result lives 0..2 ms (until b ends), b's from 1 ms to the end: 2e6 B peak."""
    module = _module(
        tmp_path,
        [
            f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]',
            f'    %b = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 1]',
            f'    %c = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu1", order = 0]',
        ],
        "%b, %c",
    )
    small = tmp_path / "small.toml"
    small.write_text(MESH2.replace('tf_device = "/device:CPU:0"', 'tf_device = "/device:CPU:0"\nmemory = 1500000'))
    module.set_cluster(load_cluster_toml(small))
    result = simulate(module, "pair", "enforced")
    assert result.peak_memory.tolist() == [2_000_000, 1_000_000]
    assert result.oom_devices == ["cpu0"]


# --------------------------------------------------------------------------- m-SCT's LP


def test_lp_favourite_constraints_bind_on_a_fork_after_a_chain() -> None:
    """p -> a, then a forks to b (5 ms) and c, which join at d; every other node 1 ms.

    Worked by hand: the critical path p, a, b, d is 8 ms when none of its edges pays a transfer
    (x = 0). "At most one favourite child of a" (x_ab + x_ac >= 1) and "of parents of d"
    (x_bd + x_cd >= 1) then force x_ac = x_cd = 1; c's path (s_c = 2 ms + t, s_d >= 3 ms + 2t for a
    transfer time t of microseconds) has room under s_d = 7 ms, so w = 8 ms. The fork is not the
    first node, so the constraint rows must find a's edges in the middle of the edge arrays.
    """
    module = _baechi_module({"p": [], "a": ["p"], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"b": 5e-3})
    problem = PlacementProblem.from_module(module)
    names = {node.name: k for k, node in enumerate(module.graph.index().nodes)}
    x, w = solve_favourite_lp(problem)
    assert w == pytest.approx(8e-3)
    group = {name: int(problem.node_group[names[name]]) for name in "pabcd"}
    by_edge = {(int(s), int(d)): float(v) for s, d, v in zip(problem.edge_src, problem.edge_dst, x, strict=True)}
    expected = {"pa": 0.0, "ab": 0.0, "bd": 0.0, "ac": 1.0, "cd": 1.0}
    assert {e: by_edge[(group[e[0]], group[e[1]])] for e in expected} == pytest.approx(expected, abs=1e-9)
    favourite = favourite_children(problem, x)
    assert favourite[group["p"]] == group["a"] and favourite[group["a"]] == group["b"]
    assert favourite[group["b"]] == group["d"] and favourite[group["c"]] == -1


def test_lp_charges_a_fork_of_two_critical_branches() -> None:
    """p -> a, a forks to b and c (5 ms each, 1 MB tensors), which join at d; p, a, d 1 ms.

    Worked by hand, with t = 10 us + 1e6 B / 12 GB/s (the 2xV100 PCIe link) for one transfer:
    both branches are critical, a may keep one favourite child and d one favourite parent, so
    x_ab + x_ac >= 1 and x_bd + x_cd >= 1, and each branch's s_d >= 7 ms + t (x_a. + x_.d). The
    two branches' x add up to at least 2, so the longer branch pays at least t: w = 8 ms + t
    (reached with x = 1/2 everywhere). Had a's row been written on other edges, less would bind
    (x_ac + x_bd >= 1 alone allows w = 8 ms + 2t/3).
    """
    t = 10e-6 + 1e6 / 12e9
    module = _baechi_module(
        {"p": [], "a": ["p"], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"b": 5e-3, "c": 5e-3}, elements=250_000
    )
    cluster = module.cluster
    assert cluster is not None and {(link.latency, link.bandwidth) for link in cluster.links} == {(10e-6, 12e9)}
    _, w = solve_favourite_lp(PlacementProblem.from_module(module))
    assert w == pytest.approx(8e-3 + t, rel=1e-9)


def _baechi_module(edges: dict[str, list[str]], costs: dict[str, float], elements: int = 4) -> Module:
    """Nodes in the given (topological) order, 1 ms unless ``costs`` says otherwise, f32 tensors."""
    graph = Graph()
    x = graph.add_input("x", f32(elements))
    nodes = {}
    for name, inputs in edges.items():
        node = graph.add_node("tf.AddN", [nodes[i].outputs[0] for i in inputs] or [x], [f32(elements)], name=name)
        node.cost = costs.get(name, 1e-3)
        nodes[name] = node
    graph.set_outputs([nodes[name].outputs[0] for name in edges if not any(name in v for v in edges.values())])
    return Module("m", graph, "2xV100")


# --------------------------------------------------------------------------- Celeritas's Adjusting placement


def _two_pairs(elements: int, sources_first: bool) -> Module:
    """Two independent pairs s_i -> t_i of 1 ms nodes on 2xV100 (PCIe: 10 us + bytes / 12 GB/s).

    ``sources_first`` creates s0, s1, t0, t1 (else s0, t0, s1, t1), which changes the nodes' numbers.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    sources = {}
    outputs = []
    order = ["s0", "s1", "t0", "t1"] if sources_first else ["s0", "t0", "s1", "t1"]
    for name in order:
        if name.startswith("s"):
            node = graph.add_node("tf.Relu", [x], [f32(elements)], name=name)
            sources[name[1]] = node
        else:
            node = graph.add_node("tf.Relu", [sources[name[1]].outputs[0]], [f32(4)], name=name)
            outputs.append(node.outputs[0])
        node.cost = 1e-3
    graph.set_outputs(outputs)
    return Module("m", graph, "2xV100")


@pytest.mark.parametrize(
    ("elements", "spreads"),
    [
        # 24 MB results: sending one back costs 10 us + 2 ms > the 1-2 ms a second source waits on
        # the first device, so eq. (9) keeps every node where the first went (gpu0).
        (6_000_000, False),
        # 4 MB: 10 us + 0.33 ms < the wait, so the second source moves to the idle device.
        (1_000_000, True),
    ],
)
@pytest.mark.parametrize("sources_first", [False, True])
def test_adjusting_moves_only_when_waiting_costs_more_than_sending_back(
    elements: int, spreads: bool, sources_first: bool
) -> None:
    module = _two_pairs(elements, sources_first)
    problem = PlacementProblem.from_module(module)
    placement = PLACERS["adjusting"]().place(problem, PlacementContext())
    devices = set(placement.device.tolist())
    if spreads:
        assert devices == {0, 1} and placement.stats["moved"] >= 1
    else:
        assert devices == {0} and placement.stats["moved"] == 0


# --------------------------------------------------------------------------- FastT's DPOS


def test_fastt_rank_and_critical_path_by_hand() -> None:
    """p -> a -> {b (5 ms), c} -> d, 1 ms elsewhere, 16 B tensors on 2xV100: t = 10 us + 16 B / 12 GB/s.

    rank_u(d) = 1 ms; rank_u(b) = 5 ms + t + 1 ms = 6 ms + t; rank_u(c) = 1 ms + t + 1 ms = 2 ms + t;
    rank_u(a) = 1 ms + t + rank_u(b) = 7 ms + 2t; rank_u(p) = 1 ms + t + rank_u(a) = 8 ms + 3t.
    The critical path follows the largest rank from the entry: p, a, b, d.
    """
    module = _baechi_module({"p": [], "a": ["p"], "b": ["a"], "c": ["a"], "d": ["b", "c"]}, {"b": 5e-3})
    problem = PlacementProblem.from_module(module)
    names = {node.name: k for k, node in enumerate(module.graph.index().nodes)}
    group = {name: int(problem.node_group[names[name]]) for name in "pabcd"}
    t = 10e-6 + 16 / 12e9
    rank = fastt_rank(problem)
    expected = {"d": 1e-3, "b": 6e-3 + t, "c": 2e-3 + t, "a": 7e-3 + 2 * t, "p": 8e-3 + 3 * t}
    assert {name: float(rank[group[name]]) for name in expected} == pytest.approx(expected, rel=1e-12)
    assert critical_path(problem, rank) == [group[name] for name in "pabd"]


# --------------------------------------------------------------------------- Pesto's batch merging


def _coarse_dag(num_nodes: int, edges: list[tuple[int, int, int]]) -> CoarseGraph:
    """A coarse DAG from ``(src, dst, bytes)`` edges, 1 s per node, transfer times of 2xV100 (bigger: slower)."""
    from graphir.passes.fuse.common import _pairs  # noqa: PLC0415 (the coarse-graph constructor)

    src, dst, size = (np.asarray(column, dtype=np.int64) for column in zip(*edges, strict=True))
    comm = LinkModel.from_cluster(resolve_cluster("2xV100"))
    return _pairs(
        num_nodes, src, dst, size, np.ones(len(edges), dtype=bool), np.ones(num_nodes), np.zeros(num_nodes), comm
    )


@pytest.mark.parametrize(
    ("edges", "pairs"),
    [
        # A=0, B=1 (height 1), C=2, D=3 (height 2); edges A->C, A->D, B->D. Heaviest first:
        # (A, C) is taken; (B, D) would pair with it at the same height while A -> D joins the
        # first pair's u to the second's v: condition (iii) rejects it; (A, D): A is matched.
        ([(0, 2, 3_000_000), (1, 3, 2_000_000), (0, 3, 1_000_000)], [(0, 2)]),
        # (B, D) first; then (A, C) would have the edge A -> D from its u to the first pair's v:
        # rejected too; (A, D): D is matched.
        ([(1, 3, 3_000_000), (0, 2, 2_000_000), (0, 3, 1_000_000)], [(1, 3)]),
    ],
)
def test_batch_round_rejects_same_height_pairs_joined_by_an_edge(
    edges: list[tuple[int, int, int]], pairs: list[tuple[int, int]]
) -> None:
    us, vs = batch_round(_coarse_dag(4, edges), 10)
    assert list(zip(us.tolist(), vs.tolist(), strict=True)) == pairs


def test_batch_round_compares_heights_by_value_in_deep_graphs() -> None:
    """The first case above behind a 300-node chain of 1-byte edges: A and B sit at height 301.

    Heights past 256 are distinct int objects in Python, so only a comparison by value still sees
    that (B, D) would pair with (A, C) at one height across the edge A -> D.
    """
    chain = [(k, k + 1, 1) for k in range(299)]
    a, b, c, d = 300, 301, 302, 303
    edges = [*chain, (299, a, 1), (299, b, 1), (a, c, 3_000_000), (b, d, 2_000_000), (a, d, 1_000_000)]
    us, vs = batch_round(_coarse_dag(304, edges), 1000)
    pairs = set(zip(us.tolist(), vs.tolist(), strict=True))
    assert (a, c) in pairs and (b, d) not in pairs


def test_adjusting_keeps_the_previous_device_on_a_tie() -> None:
    """Three independent 1 ms sinks on 2xV100: the first goes to gpu0, the second waits 1 ms there and
    0 on gpu1 (moves, back_cost 0 for a sink), the third has EST 1 ms on both: eq. (9) needs the wait
    to exceed back_cost = 0 strictly, so it stays on the second's device (gpu1)."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    for i in range(3):
        graph.add_node("tf.Relu", [x], [f32(4)], name=f"n{i}").cost = 1e-3
    graph.set_outputs([node.outputs[0] for node in graph.nodes])
    placement = PLACERS["adjusting"]().place(
        PlacementProblem.from_module(Module("m", graph, "2xV100")), PlacementContext()
    )
    assert sorted(placement.device.tolist()) == [0, 1, 1]
    assert placement.stats["moved"] == 1


def test_adjusting_back_cost_is_the_largest_out_edge() -> None:
    """Two independent triangles s_i -> u_i -> t_i, s_i -> t_i, all 1 ms; s_i sends 48 MB to u_i, 16 B to t_i.

    Visited s0, u0, t0 (all on gpu0), then s1 waits 3 ms on gpu0 and 0 on gpu1, but sending its
    48 MB back costs 10 us + 4 ms: it stays on gpu0, and so does the rest. Judged by its last
    out-edge (16 B, 10 us) instead of the largest, it would move.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    outputs = []
    for i in range(2):
        s = graph.add_node("tf.Split", [x], [f32(12_000_000), f32(4)], name=f"s{i}")
        u = graph.add_node("tf.Relu", [s.outputs[0]], [f32(4)], name=f"u{i}")
        t = graph.add_node("tf.Tile", [u.outputs[0], s.outputs[1]], [f32(4)], name=f"t{i}")
        s.cost = u.cost = t.cost = 1e-3
        outputs.append(t.outputs[0])
    graph.set_outputs(outputs)
    placement = PLACERS["adjusting"]().place(
        PlacementProblem.from_module(Module("m", graph, "2xV100")), PlacementContext()
    )
    assert placement.device.tolist() == [0] * 6 and placement.stats["moved"] == 0


def test_an_empty_graph_simulates_to_nothing() -> None:
    """No node, no value: a zero makespan and no memory on either device."""
    result = simulate(Module("m", Graph(), "2xV100"), "pair", "enforced")
    assert result.makespan == 0.0
    assert result.peak_memory.tolist() == [0, 0]
    assert result.transfers == 0 and result.oom_devices == []


def test_order_place_keeps_a_colocated_node_with_its_class_after_moving_on() -> None:
    """Chain a -> b -> c on 2xV100 (16 GiB each): a and b hold 10 GiB each, so b moves the current
    device on to gpu1; c (16 B) is colocated with a, so it goes to gpu0, not to the current gpu1."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    nodes = {}
    previous = x
    for name, gib in (("a", 10), ("b", 10), ("c", 0)):
        node = graph.add_node("tf.Relu", [previous], [f32(4)], name=name)
        node.cost = 1e-3
        node.mem = Mem(persistent=gib * GiB)
        nodes[name] = node
        previous = node.outputs[0]
    nodes["a"].colocate = nodes["c"].colocate = "k"
    graph.set_outputs([previous])
    module = Module("m", graph, "2xV100")
    problem = PlacementProblem.from_module(module)
    placement = PLACERS["order-place"]().place(problem, PlacementContext())
    names = {node.name: k for k, node in enumerate(module.graph.index().nodes)}
    devices = {name: int(placement.device[problem.node_group[names[name]]]) for name in "abc"}
    assert devices == {"a": 0, "b": 1, "c": 0}


def test_order_place_wraps_round_to_the_first_device_with_room() -> None:
    """Chain a, b, c, d on 3xV100 (16 GiB each) holding 12, 8, 13 and 3.5 GiB.

    a: gpu0 (4 GiB left). b: not on gpu0, so gpu1 becomes current (8 left). c: not on gpu1, so
    gpu2 (3 left). d: not on gpu2; from gpu2 on, wrapping round, gpu0 is the first with room (4 >=
    3.5), although gpu1 has more free memory.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    previous = x
    for name, gib in (("a", 12), ("b", 8), ("c", 13), ("d", 3.5)):
        node = graph.add_node("tf.Relu", [previous], [f32(4)], name=name)
        node.cost = 1e-3
        node.mem = Mem(persistent=int(gib * GiB))
        previous = node.outputs[0]
    graph.set_outputs([previous])
    module = Module("m", graph, "3xV100")
    problem = PlacementProblem.from_module(module)
    placement = PLACERS["order-place"]().place(problem, PlacementContext())
    names = {node.name: k for k, node in enumerate(module.graph.index().nodes)}
    devices = {name: int(placement.device[problem.node_group[names[name]]]) for name in "abcd"}
    assert devices == {"a": 0, "b": 1, "c": 2, "d": 0}


def test_ledger_one_byte_release_lowers_the_peak() -> None:
    ledger = MemoryLedger()
    ledger.allocate(1, 0.0, 2.0)
    assert ledger.peak() == 1
    ledger.allocate(-1, 0.0, 2.0)  # a one-byte release over the same span: nothing left
    assert ledger.peak() == 0


def test_allocations_are_frozen_values() -> None:
    allocations = Allocations(np.zeros(1, dtype=np.int64), np.zeros(1), np.ones(1), np.ones(1, dtype=np.int64))
    with pytest.raises(dataclasses.FrozenInstanceError):
        allocations.nbytes = np.zeros(1, dtype=np.int64)  # type: ignore[misc]


def test_dpos_puts_the_whole_critical_path_on_its_device() -> None:
    """A chain c0 -> c1 -> c2 on moirai-intra (gpu0-1 V100-32GB, gpu2-3 P100).

    c0 takes 2 ms on a V100 and 1 ms on a P100, c1 and c2 1 ms on a V100 and 5 ms on a P100. The
    chain is the critical path; its mean time per node is 4/3 ms on a V100 and 11/3 ms on a P100, so
    its device is gpu0 (Algorithm 1 line 5), and c0 runs there although a P100 would finish it first.
    """
    graph = Graph()
    previous = graph.add_input("x", f32(4))
    for name, v100, p100 in (("c0", 2e-3, 1e-3), ("c1", 1e-3, 5e-3), ("c2", 1e-3, 5e-3)):
        node = graph.add_node("tf.Relu", [previous], [f32(4)], name=name)
        node.cost = Cost({"V100-32GB": v100, "P100": p100})
        previous = node.outputs[0]
    graph.set_outputs([previous])
    problem = PlacementProblem.from_module(Module("m", graph, "moirai-intra"))
    placement = PLACERS["dpos"]().place(problem, PlacementContext())
    assert placement.device.tolist() == [0, 0, 0]
    assert placement.stats["critical-path-nodes"] == 3


def test_dpos_on_one_node_and_on_none() -> None:
    one = PlacementProblem.from_module(_baechi_module({"a": []}, {}))
    placement = PLACERS["dpos"]().place(one, PlacementContext())
    assert placement.device.tolist() == [0] and placement.stats["critical-path-nodes"] == 1
    empty = PlacementProblem.from_module(Module("m", Graph(), "2xV100"))
    assert critical_path(empty, fastt_rank(empty)) == []


# --------------------------------------------------------------------------- CPD-TOPO and Optimal_BP


def _direct_dp(n: int, edges: list[tuple[int, int, float]], mem: np.ndarray, window: int, cap: float) -> float:
    """Eq. (6) with eq. (4)'s cost summed edge by edge (no incremental eq. (5)): O(n R E)-free enough for R = 3."""
    out_edges: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for u, v, c in edges:
        out_edges[u].append((v, c))
    best = [0.0] + [np.inf] * n
    for j in range(1, n + 1):
        for i in range(max(0, j - window), j):
            if j - i > 1 and mem[i:j].sum() > cap:
                continue
            cost = sum(c for k in range(i, j) for v, c in out_edges[k] if v >= j)
            best[j] = min(best[j], best[i] + cost)
    return best[n]


def test_optimal_bp_past_one_block_of_positions() -> None:
    """2,500 positions (more than the 2,048 the programme handles at a time), random short edges."""
    rng = np.random.default_rng(7)
    n = 2500
    edges = [
        (u, u + int(d), float(rng.integers(1, 10))) for u in range(n) for d in rng.integers(1, 5, size=2) if u + d < n
    ]
    mem = rng.integers(0, 4, size=n).astype(float)
    starts, cut = optimal_breakpoints(
        n,
        np.asarray([e[0] for e in edges]),
        np.asarray([e[1] for e in edges]),
        np.asarray([e[2] for e in edges]),
        mem,
        3,
        5.0,
    )
    assert cut == pytest.approx(_direct_dp(n, edges, mem, 3, 5.0))
    assert starts[0] == 0 and np.all(np.diff(np.append(starts, n)) <= 3)


def test_optimal_bp_of_nothing() -> None:
    starts, cut = optimal_breakpoints(0, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0), 4, 1.0)
    assert starts.tolist() == [] and cut == 0.0


def test_cpd_topo_labels_clusters_from_zero() -> None:
    """A chain 0 -> 1 -> 2 -> 3 of equal edges, clusters of at most 2: [0, 1] and [2, 3] cut one edge
    (any other split cuts two), labelled 0 and 1 in order."""
    graph = _coarse_dag(4, [(0, 1, 1000), (1, 2, 1000), (2, 3, 1000)])
    labels, stats = fuse_cpd_topo(graph, 2, np.inf)
    assert labels.tolist() == [0, 0, 1, 1]
    assert stats["clusters"] == 2


# --------------------------------------------------------------------------- the ILP's liveness memory rule


def test_ilp_liveness_peaks_of_a_replayed_split() -> None:
    """a (1,000 B persistent, a 4e6 B result) on gpu0 feeds b on gpu1 (a 16 B graph output).

    gpu0 holds the persistent bytes and a's result until its transfer ends: 4,001,000 B. gpu1 holds
    the received copy until b ends, and b's output (to the end of the step) from b's start on:
    4,000,016 B at once while b runs.
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    a = graph.add_node("tf.Relu", [x], [f32(1_000_000)], name="a")
    b = graph.add_node("tf.Relu", [a.outputs[0]], [f32(4)], name="b")
    a.cost = b.cost = 1e-3
    a.mem = Mem(persistent=1000, activation=4_000_000)
    b.mem = Mem(activation=16)
    graph.set_outputs([b.outputs[0]])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    ilp = IlpModel(problem, Transfers(problem), None, liveness=True)
    schedule = ilp.replay([0, 1], [0, 1])
    assert ilp.memory_model.peaks(schedule) == [4_001_000, 4_000_016]
    together = ilp.replay([0, 0], [0, 1])  # no transfer: a's result lives until b ends, beside b's output
    assert ilp.memory_model.peaks(together) == [4_001_016, 0]


def test_ilp_liveness_peaks_of_a_replayed_chain() -> None:
    """a -> b -> c, 1 ms each. a: 1,000 B persistent, results a0 (4e6 B, read by b) and a1 (400 B,
    read by nobody); b: result b0 (2e6 B, read by c); c: 100 B of scratch, result c0 (8e6 B, a
    graph output, held to the end of the step).

    Split a | b, c: gpu0 holds 1,000 + a0 + a1 while a runs = 4,001,400; gpu1 holds b0 + c's
    scratch + c0 while c runs (a0's copy is gone when b ends) = 10,000,100.
    All on gpu0: a0 lives until b ends, b0 until c ends; while c runs 1,000 + b0 + 100 + c0 =
    10,001,100, the peak (while b runs: 1,000 + a0 + b0 = 6,001,000).
    """
    graph = Graph()
    x = graph.add_input("x", f32(4))
    a = graph.add_node("tf.Split", [x], [f32(1_000_000), f32(100)], name="a")
    b = graph.add_node("tf.Relu", [a.outputs[0]], [f32(500_000)], name="b")
    c = graph.add_node("tf.Relu", [b.outputs[0]], [f32(2_000_000)], name="c")
    a.cost = b.cost = c.cost = 1e-3
    a.mem = Mem(persistent=1000)
    c.mem = Mem(temporary=100)
    graph.set_outputs([c.outputs[0]])
    problem = PlacementProblem.from_module(Module("m", graph, "2xV100"))
    ilp = IlpModel(problem, Transfers(problem), None, liveness=True)
    assert ilp.memory_model.peaks(ilp.replay([0, 1, 1], [0, 1, 2])) == [4_001_400, 10_000_100]
    assert ilp.memory_model.peaks(ilp.replay([0, 0, 0], [0, 1, 2])) == [10_001_100, 0]


# --------------------------------------------------------------------------- the link model


def _two_devices(congestion: str, cpu: TransferCpu | None = None) -> LinkModel:
    """a <-> b: 0.1 ms of latency, 1 GB/s (1e6 B: 1 ms of bytes)."""
    latency = np.array([[0.0, 1e-4], [1e-4, 0.0]])
    bandwidth = np.array([[np.inf, 1e9], [1e9, np.inf]])
    return LinkModel(("a", "b"), latency, bandwidth, congestion=congestion, transfer_cpu=cpu)


def test_arrivals_from_add_latency_and_bytes() -> None:
    """1e6 B ready on a at 1 ms: on a at once, on b 0.1 ms + 1 ms later."""
    links = _two_devices("pair")
    assert links.arrivals_from(1e-3, 1e6, 0) == pytest.approx([1e-3, 2.1e-3], abs=1e-15)
    assert links.arrivals_from(0.0, 0.0, 1) == pytest.approx([1e-4, 0.0], abs=1e-15)


def test_booking_with_a_per_transfer_cpu_cost() -> None:
    """topology with a calibrated transfer CPU: sending takes 2 ms of a's compute, unpacking 0.5 ms of
    b's, 1e6 B hold the route 1 ms and land 0.1 ms later.

    First transfer, requested at 0: begin 0; delivered 0 + max(1, 2) + 0.1 = 2.1 ms; b unpacks from
    0.1 (the latency) to 0.6 ms; arrival max(2.1, 0.6) = 2.1 ms; route held until 1 ms, a's compute
    until 2 ms. Second one, also requested at 0, waits for a's compute: begin 2 ms, delivered 4.1 ms,
    unpacked 2.1..2.6 ms: arrival 4.1 ms. With 3 ms of unpacking instead, the receiver decides: the
    first arrives at 0.1 + 3 = 3.1 ms.
    """
    links = _two_devices("topology", TransferCpu(send=2e-3, recv=5e-4))
    free = [0.0] * links.num_resources
    assert links.book(free, 0.0, 1e6, 0, 1) == pytest.approx((0.0, 2.1e-3, 1e-3), abs=1e-15)
    assert free[links.compute_resource[0]] == pytest.approx(2e-3) and free[links.compute_resource[1]] == pytest.approx(
        6e-4
    )
    assert links.book(free, 0.0, 1e6, 0, 1) == pytest.approx((2e-3, 4.1e-3, 1e-3), abs=1e-15)
    slow = _two_devices("topology", TransferCpu(send=2e-3, recv=3e-3))
    assert slow.book([0.0] * slow.num_resources, 0.0, 1e6, 0, 1)[1] == pytest.approx(3.1e-3, abs=1e-15)
    # b's compute busy until 0.05 ms: the value is there only at 0.1 ms, so unpacking still starts then
    busy = [0.0] * slow.num_resources
    busy[slow.compute_resource[1]] = 5e-5
    assert slow.book(busy, 0.0, 1e6, 0, 1)[1] == pytest.approx(3.1e-3, abs=1e-15)
    # b busy until 0.3 ms: unpacking waits for it, 0.3 + 3 = 3.3 ms
    busy = [0.0] * slow.num_resources
    busy[slow.compute_resource[1]] = 3e-4
    assert slow.book(busy, 0.0, 1e6, 0, 1)[1] == pytest.approx(3.3e-3, abs=1e-15)


def test_vectorised_arrivals_match_the_scalar_rule() -> None:
    """arrivals(): 1e6 B ready at 1 ms, a -> b: 2.1 ms; b -> b: 1 ms; 0 B a -> b at 0: the latency."""
    links = _two_devices("pair")
    ready, nbytes = np.array([1e-3, 1e-3, 0.0]), np.array([1e6, 1e6, 0.0])
    got = links.arrivals(ready, nbytes, np.array([0, 1, 0]), np.array([1, 1, 1]))
    assert got.tolist() == pytest.approx([2.1e-3, 1e-3, 1e-4], abs=1e-15)


def test_occupancy_is_the_bytes_alone_under_topology() -> None:
    """1e6 B hold a route 1 ms under topology (the latency is in flight), 1.1 ms under pair; 0 in place."""
    assert _two_devices("topology").occupancy_time(1e6, 0, 1) == pytest.approx(1e-3, abs=1e-15)
    assert _two_devices("pair").occupancy_time(1e6, 0, 1) == pytest.approx(1.1e-3, abs=1e-15)
    assert _two_devices("topology").occupancy_time(1e6, 1, 1) == 0.0
    assert _two_devices("pair").transfer_time(1e6, 1, 1) == 0.0  # nothing moves on one device
