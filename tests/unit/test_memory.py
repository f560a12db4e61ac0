"""The memory model (graphir/memory.py, issue 15 item 1): golden cases worked by hand.

The graph: four nodes on two devices, link latency 0 and 1 MB/s (100,000 B take 0.1 s):

    a  (g0, 1 s)  -> x  f32[25000] = 100,000 B  -> b (g0) and c (g1, a remote copy)
    b  (g0, 2 s)  -> y  f32[250]   =   1,000 B  -> d (g1, a remote copy); temporary 50,000 B
    c  (g1, 1 s)  -> z  f32[2500]  =  10,000 B  -> d
    d  (g1, 1 s)  -> w  f32[1]     =       4 B     graph output

Times by hand (simulator, enforced order): a [0, 1); x to g1 [1, 1.1); b [1, 3); c [1.1, 2.1);
y to g1 [3, 3.001); d [3.001, 4.001). Makespan 4.001.

liveness, g0: x on [0, 3) (last local consumer b finishes at 3, its transfer ends at 1.1),
    y on [1, 3.001) (no local consumer: until its transfer ends), b's temporary on [1, 3).
    On [1, 3): 100,000 + 1,000 + 50,000 = 151,000 B (the peak); [0, 1): 100,000; [3, 3.001): 1,000.
liveness, g1: copy of x on [1, 2.1) (transfer start to c's finish), z on [1.1, 4.001), copy of y
    on [3, 4.001), w on [3.001, 4.001) (graph output: to the end).
    On [1.1, 2.1): 100,000 + 10,000 = 110,000 B (the peak); [3.001, 4.001): 10,000 + 1,000 + 4.
paper (whole step, persistent + activation per node, no copies, no temporaries):
    g0: a 100,000 + b 1,000 = 101,000 B; g1: c 10,000 + d 4 = 10,004 B.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphir.memory import MemoryLedger, ScheduleMemory, output_mask, peak_memory
from graphir.parser import parse_module
from graphir.simulator import simulate

CLUSTER = """
[default_link]
latency = 0.0
bandwidth = 1e6
[[device]]
name = "g0"
[[device]]
name = "g1"
"""

BODY = """
    %x = t.A(%in) : (f32[1]) -> f32[25000] [cost = 1s, device = "g0", order = 0]
    %y = t.B(%x) : (f32[25000]) -> f32[250] [cost = 2s, mem = {activation = 1000B, temporary = 50000B}, \
device = "g0", order = 1]
    %z = t.C(%x) : (f32[25000]) -> f32[2500] [cost = 1s, device = "g1", order = 0]
    %w = t.D(%y, %z) : (f32[250], f32[2500]) -> f32[1] [cost = 1s, device = "g1", order = 1]
    return %w
"""


def _module(tmp_path: Path):
    return _small(tmp_path, BODY)


def _small(tmp_path: Path, body: str):
    """A module of ``body`` (node lines and the return line) on the two-device ``CLUSTER``, input ``%in : f32[1]``."""
    path = tmp_path / "cluster.toml"
    path.write_text(CLUSTER)
    return parse_module(f'module @m {{cluster = "{path}"}} {{\n  graph @g(%in : f32[1]) {{{body}  }}\n}}\n')


def test_simulator_times_are_the_hand_worked_ones(tmp_path: Path) -> None:
    result = simulate(_module(tmp_path))
    assert result.start.tolist() == pytest.approx([0.0, 1.0, 1.1, 3.001])
    assert result.finish.tolist() == pytest.approx([1.0, 3.0, 2.1, 4.001])


def test_liveness_through_the_simulator(tmp_path: Path) -> None:
    result = simulate(_module(tmp_path))
    assert result.peak_memory.tolist() == [151_000, 110_000]


def test_paper_rule_on_the_simulated_placement(tmp_path: Path) -> None:
    module = _module(tmp_path)
    result = simulate(module)
    index = module.graph.index()
    device = np.asarray([0, 0, 1, 1])
    outputs = output_mask(module.graph, index)
    args = (index, outputs, device, result.start, result.finish, {}, result.makespan, 2)
    assert peak_memory(*args, model="paper").tolist() == [101_000, 10_004]
    with pytest.raises(ValueError, match="unknown memory model"):
        peak_memory(*args, model="whole")


def _schedule(tmp_path: Path, model: str, capacity: tuple[int, int] = (10**9, 10**9)):
    module = _module(tmp_path)
    index = module.graph.index()
    names = [node.name for node in index.nodes]
    a, b, c, d = (names.index(k) for k in "xyzw")  # nodes are named after their result
    memory = ScheduleMemory(index, module.graph, capacity, model)
    return memory, (a, b, c, d), index


def test_liveness_through_the_schedule_ledgers(tmp_path: Path) -> None:
    memory, (a, b, c, d), index = _schedule(tmp_path, "liveness")
    x, y = (index.values.index(node.outputs[0]) for node in (index.nodes[a], index.nodes[b]))
    memory.place(a, 0, 0.0, 1.0)
    # x is open on g0 until its consumers are placed: [0, inf).
    assert memory.ledgers[0].usage_at(50.0) == 100_000
    memory.place(b, 0, 1.0, 3.0)
    memory.place(c, 1, 1.1, 2.1, received=[(x, 1.0, 1.1)])
    # Every consumer of x is placed: g0's copy ends at 3, g1's at 2.1.
    assert memory.ledgers[0].usage_at(3.0) == 1_000
    assert memory.ledgers[1].usage_at(2.1) == 10_000
    memory.place(d, 1, 3.001, 4.001, received=[(y, 3.0, 3.001)])
    assert memory.peaks() == [151_000, 110_000]
    assert memory.ledgers[0].usage_at(3.0005) == 1_000  # y until its transfer ends
    assert memory.ledgers[0].usage_at(3.001) == 0
    assert memory.ledgers[1].usage_at(3.5) == 11_004


def test_fits_refuses_one_byte_over_capacity(tmp_path: Path) -> None:
    memory, (a, b, c, d), index = _schedule(tmp_path, "liveness", capacity=(150_999, 110_000))
    memory.place(a, 0, 0.0, 1.0)
    # b on g0 would need x + y + temporary = 151,000 B on [1, 3).
    assert not memory.fits(b, 0, 1.0, 3.0)
    memory.capacity[0] = 151_000
    assert memory.fits(b, 0, 1.0, 3.0)
    memory.place(b, 0, 1.0, 3.0)
    x = index.values.index(index.nodes[a].outputs[0])
    # c on g1: the copy of x (from 1) and z (from 1.1): 110,000 B, exactly the capacity.
    assert memory.fits(c, 1, 1.1, 2.1, received=[(x, 1.0, 1.1)])
    memory.capacity[1] = 109_999
    assert not memory.fits(c, 1, 1.1, 2.1, received=[(x, 1.0, 1.1)])


def test_paper_rule_through_the_schedule_ledgers(tmp_path: Path) -> None:
    memory, (a, b, c, d), index = _schedule(tmp_path, "paper", capacity=(101_000, 10_003))
    x, y = (index.values.index(node.outputs[0]) for node in (index.nodes[a], index.nodes[b]))
    for node, device, begin, end, received in [
        (a, 0, 0.0, 1.0, []),
        (b, 0, 1.0, 3.0, []),
        (c, 1, 1.1, 2.1, [(x, 1.0, 1.1)]),
    ]:
        assert memory.fits(node, device, begin, end, received)
        memory.place(node, device, begin, end, received)
    assert not memory.fits(d, 1, 3.001, 4.001, [(y, 3.0, 3.001)])  # 10,004 > 10,003
    memory.place(d, 1, 3.001, 4.001, [(y, 3.0, 3.001)])
    assert memory.peaks() == [101_000, 10_004]


def test_place_needs_the_transfer_of_a_remote_input(tmp_path: Path) -> None:
    memory, (a, b, c, d), index = _schedule(tmp_path, "liveness")
    memory.place(a, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match="no copy on device 1"):
        memory.place(c, 1, 1.1, 2.1)


def test_a_graph_output_lives_until_the_end_of_the_step(tmp_path: Path) -> None:
    # o (1,000 B) is a graph output no node reads, made by the first node; q (10,000 B) by the
    # second, on the same device: o stays until the makespan 3 s, so on [1, 3) both are held.
    # Were o freed when its producer finishes (a result no node reads), the peak would be 10,000 B.
    module = _small(
        tmp_path,
        """
    %o = t.A(%in) : (f32[1]) -> f32[250] [cost = 1s, device = "g0", order = 0]
    %q = t.B(%in) : (f32[1]) -> f32[2500] [cost = 2s, device = "g0", order = 1]
    return %o, %q
""",
    )
    result = simulate(module)
    assert result.makespan == pytest.approx(3.0)
    assert result.peak_memory.tolist() == [11_000, 0]
    assert output_mask(module.graph, module.graph.index()).tolist() == [True, True]


def test_paper_rule_adds_persistent_and_activation(tmp_path: Path) -> None:
    # One node with mem = {persistent = 12 B, activation = 4 B}: the whole step holds 16 B on g0;
    # peak_memory leaves the persistent bytes out (4 B); ScheduleMemory's ledger holds all 16 B.
    module = _small(
        tmp_path,
        "\n    %v = t.V(%in) : (f32[1]) -> f32[1]"
        ' [cost = 1s, mem = {persistent = 12B, activation = 4B}, device = "g0", order = 0]\n'
        "    return %v\n",
    )
    index = module.graph.index()
    result = simulate(module)
    args = (index, output_mask(module.graph, index), np.asarray([0]), result.start, result.finish, {}, 1.0, 2)
    assert peak_memory(*args, model="paper").tolist() == [4, 0]
    memory = ScheduleMemory(index, module.graph, (15, 10**9), "paper")
    assert not memory.fits(0, 0, 0.0, 1.0)
    memory.capacity[0] = 16
    assert memory.fits(0, 0, 0.0, 1.0)
    memory.place(0, 0, 0.0, 1.0)
    assert memory.peaks() == [16, 0]


def test_a_result_still_to_be_read_is_held_past_its_producer(tmp_path: Path) -> None:
    # x (100,000 B, read by no node) is placed first, at [5, 6) on g0. Then y (1,000 B) at [0, 1):
    # z still has to read y, so y is held from 0 on, through [5, 6): 101,000 B there. A capacity
    # of 100,500 B refuses it; had y been held only while its producer runs, it would fit.
    module = _small(
        tmp_path,
        """
    %x = t.A(%in) : (f32[1]) -> f32[25000] [cost = 1s]
    %y = t.B(%in) : (f32[1]) -> f32[250] [cost = 1s]
    %z = t.C(%y) : (f32[250]) -> f32[1] [cost = 1s]
    return %z
""",
    )
    index = module.graph.index()
    a, b, c = (index.position(module.graph.get_value(name).producer) for name in ("x", "y", "z"))
    memory = ScheduleMemory(index, module.graph, (100_500, 10**9), "liveness")
    memory.place(a, 0, 5.0, 6.0)
    assert memory.ledgers[0].usage_at(6.0) == 0  # x, read by nobody, only while A runs
    assert not memory.fits(b, 0, 0.0, 1.0)
    memory.capacity[0] = 101_000
    assert memory.fits(b, 0, 0.0, 1.0)
    memory.place(b, 0, 0.0, 1.0)
    assert memory.ledgers[0].usage_at(5.5) == 101_000
    memory.place(c, 0, 6.0, 7.0)
    assert memory.ledgers[0].usage_at(7.0) == 4  # y freed when z, its last reader, finishes; z is an output


def test_every_ledger_change_bumps_its_version() -> None:
    # Callers cache answers per version (baechi's per-device fit cache): each change must show.
    ledger = MemoryLedger()
    seen = [ledger.version]
    for change in (
        lambda: ledger.hold(5),
        lambda: ledger.allocate(10, 1.0, 2.0),
        lambda: ledger.allocate(3, 4.0),
        lambda: ledger.free(3, 6.0),
    ):
        change()
        assert ledger.version not in seen
        seen.append(ledger.version)
    assert ledger.peak() == 15


def test_ledger_frees_before_allocations_at_equal_times() -> None:
    ledger = MemoryLedger()
    ledger.hold(7)
    ledger.allocate(100, 0.0, 2.0)
    ledger.allocate(50, 2.0, 3.0)  # starts when the first ends: never both
    assert ledger.peak() == 107
    assert ledger.usage_at(2.0) == 57
    assert ledger.peak_between(1.0, 2.0) == 107
    assert ledger.peak_between(2.0, 2.5) == 57
    ledger.allocate(1, 5.0)  # open
    assert ledger.usage_at(1e9) == 8
    ledger.free(1, 6.0)
    assert ledger.usage_at(6.0) == 7
    ledger.allocate(10**6, 4.0, 4.0)  # empty: holds nothing
    assert ledger.peak() == 107
    assert ledger.fits(43, 1.0, 2.5, 150)  # 107 + 43 on [1, 2)
    assert not ledger.fits(44, 1.0, 2.5, 150)
    assert ledger.fits(93, 2.0, 3.0, 150)  # 57 + 93
    with pytest.raises(ValueError):
        ledger.peak_between(1.0, 1.0)


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([2, 3, 5]),
    st.lists(
        st.tuples(st.integers(-300, 1000), st.integers(0, 40), st.sampled_from([None, 0, 3, 7, 15, 40])),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 45), st.integers(0, 45)), max_size=5),
)
def test_ledger_blocks_agree_with_a_brute_force_sweep(
    block: int,
    steps: list[tuple[int, int, int | None]],
    extra: list[tuple[int, int, int]],
) -> None:
    # Blocks of 2 to 5 breakpoints (the real size is 512) so that every update and query spans
    # several blocks and cuts some; steps include negative amounts (frees) and open ends (None:
    # to infinity, as allocate(n, b) and free(n, t) make them).
    ledger = MemoryLedger()
    items: list[tuple[int, float, float]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("graphir.memory._BLOCK", block)
        for nbytes, begin, length in steps:
            end = math.inf if length is None else float(begin + length)
            ledger.allocate(nbytes, float(begin), end)
            if nbytes and end > begin:
                items.append((nbytes, float(begin), end))
    breakpoints = 1 + len({t for _, b, e in items for t in (b, e) if t < math.inf})  # -inf and the rest
    assert (len(ledger._blocks) > 1) == (breakpoints > block)  # cut into blocks when they overflow one

    def usage(t: float, spans: list[tuple[int, float, float]]) -> int:
        return sum(n for n, b, e in spans if b <= t < e)

    grid = [t / 2 for t in range(-2, 180)]  # every breakpoint (at most 80) and the spans between
    assert ledger.peak() == max(0, max(usage(t, items) for t in grid))
    assert all(ledger.usage_at(t) == usage(t, items) for t in grid)
    tentative = [(n, float(b), float(e)) for n, b, e in extra]
    assert ledger.peak_with(tentative) == max(0, max(usage(t, items + tentative) for t in grid))
    assert ledger.peak_between(3.0, 17.5) == max(usage(t, items) for t in grid if 3.0 <= t < 17.5)
    assert ledger.peak_between(-math.inf, math.inf) == max(usage(t, items) for t in grid)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 1000), st.integers(0, 20), st.integers(0, 20)),
        min_size=1,
        max_size=25,
    ),
    st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 20), st.integers(0, 20)), max_size=4),
)
def test_ledger_agrees_with_a_brute_force_sweep(
    intervals: list[tuple[int, int, int]], extra: list[tuple[int, int, int]]
) -> None:
    ledger = MemoryLedger()
    for nbytes, begin, end in intervals:
        ledger.allocate(nbytes, float(begin), float(end))

    def usage(t: float, items: list[tuple[int, int, int]]) -> int:
        return sum(n for n, b, e in items if b <= t < e)

    grid = [t / 2 for t in range(-2, 44)]
    assert ledger.peak() == max(usage(t, intervals) for t in grid)
    assert all(ledger.usage_at(t) == usage(t, intervals) for t in grid)
    assert ledger.peak_with([(n, float(b), float(e)) for n, b, e in extra]) == max(
        usage(t, intervals + extra) for t in grid
    )
    assert ledger.peak_between(3.0, 7.5) == max(usage(t, intervals) for t in grid if 3.0 <= t < 7.5)
    assert ledger.peak_between(-math.inf, math.inf) == ledger.peak()


def _random_placed_module(seed: int, num_nodes: int):
    from graphir.annotations import Mem
    from graphir.ir import Graph, Module
    from graphir.types import DType, TensorType

    rng = np.random.default_rng(seed)
    graph = Graph()
    values = [graph.add_input("x", TensorType(DType.F32, (16,)))]
    per_device: dict[int, int] = {}
    module = Module("r", graph, "3xV100")
    names = module.cluster.device_names
    for i in range(num_nodes):
        inputs = [values[int(rng.integers(max(0, len(values) - 20), len(values)))] for _ in range(rng.integers(0, 4))]
        outs = [TensorType(DType.F32, (int(rng.integers(1, 1 << 16)),)) for _ in range(int(rng.integers(1, 3)))]
        node = graph.add_node("t.Op", inputs, outs, name=f"n{i}")
        node.cost = float(rng.exponential(1e-4)) + 1e-6  # positive: see ScheduleMemory on graph outputs
        if rng.random() < 0.5:
            node.mem = Mem(int(rng.integers(0, 1 << 20)), 0, int(rng.integers(0, 1 << 18)))
        d = int(rng.integers(0, len(names)))
        node.device, node.order = names[d], per_device.get(d, 0)
        per_device[d] = node.order + 1
        values.extend(node.outputs)
    graph.set_outputs([values[-1], values[len(values) // 2]])
    return module


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 120))
def test_schedule_ledgers_replay_the_simulator_exactly(seed: int, num_nodes: int) -> None:
    # Fed the simulator's own times node by node, the incremental ledgers end with its peaks.
    module = _random_placed_module(seed, num_nodes)
    result = simulate(module, "port")
    index = module.graph.index()
    names = list(result.device_names)
    device = [names.index(node.device) for node in index.nodes]
    arrival = {(x, dst): (begin, end) for x, _, dst, begin, end in result.transfer_log}
    memory = ScheduleMemory(index, module.graph, [10**12] * len(names))
    copied: set[tuple[int, int]] = set()
    value_of = {id(value): x for x, value in enumerate(index.values)}
    for v, node in enumerate(index.nodes):
        received = []
        for value in node.inputs:
            x = value_of.get(id(value))
            key = (x, device[v])
            if x is not None and key in arrival and key not in copied:
                copied.add(key)
                received.append((x, *arrival[key]))
        start, finish = float(result.start[v]), float(result.finish[v])
        assert memory.fits(v, device[v], start, finish, received)
        memory.place(v, device[v], start, finish, received)
    assert memory.peaks() == result.peak_memory.tolist()
