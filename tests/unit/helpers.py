"""The unit tests' one shared helper module: tensor types, clusters, graphs, placer checks, TF models.

Not a test module. Test modules import what they share from here (``from helpers import ...``;
pytest puts tests/unit on ``sys.path``) and never from one another (test_suite_layout.py checks);
fixtures built from these live in conftest.py. Sections:

* types and clusters: :func:`f32`, :func:`mesh_cluster` (a cluster file of ``n`` identical links),
  :func:`write_cluster`, :func:`tight_cluster`, :func:`module_on_cluster`;
* small graphs worked by hand: the fork of the congestion goldens (:func:`fork`), the liveness chain
  (:func:`liveness_chain`), the fork-join of place{algo=auto} (:data:`FORK_JOIN`), the heterogeneous
  fork of HEFT, Baechi's hand-built DAGs (:func:`build`), the congestion goldens' node lines;
* random graphs and the placer check: :func:`random_module`, :func:`random_case`,
  :func:`random_memory_dag`, :func:`comm_heavy_module`, :func:`check_placer` (verify, simulate,
  lower bounds, the hand-worked makespan);
* training steps: the hand-built MLP step (:data:`MLP`, :func:`mlp_train`,
  :func:`mlp_training_step`) and tiny zoo models traced by TensorFlow (:func:`build_train`);
* hypothesis strategies of random modules (:func:`random_modules`) and the rig's calibration.
"""

from __future__ import annotations

import pickle
import random
import string
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor, Opaque
from graphir.backends.tf.rig import RigCalibration
from graphir.fastline import LineScanner
from graphir.ir import ExternalTensor, Graph, Module, Node
from graphir.parser import _Parser, parse_module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.ilp_model import IlpModel, Transfers
from graphir.passes.place.problem import PlacementProblem
from graphir.simulator import simulate
from graphir.types import DType, TensorType
from graphir.verifier import verify

F32 = DType.F32


# `make test` runs the modules on two workers (pytest-xdist, --dist loadfile: a module stays on one
# worker) in the order of the collection (--no-loadscope-reorder: xdist's own order puts the modules
# with the most tests first, i.e. the few-test TensorFlow modules last, where one of them runs alone
# for minutes while the other worker idles). The heaviest modules go first, heaviest first (longest
# processing time first), then the rest in file order, so the light modules fill the gaps at the end.
# Ordered by their time in a clean-clone `make test` (the 80 slowest tests of --durations=80 summed
# per module, 2026-11-29); a module missing here only starts later (test_suite_layout.py checks that
# each name is a test module).
HEAVY_MODULES = (
    # by CPU seconds in a clean-clone `make test` (dc3fb15: 51.6 for test_tf_lowering ... 6.8 for test_api_doc)
    "test_tf_lowering.py",
    "test_tune.py",
    "test_fuzz.py",
    "test_readme.py",
    "test_tf_training_step.py",
    "test_rig.py",
    "test_tf_onnx_node.py",
    "test_place_auto.py",
    "test_tf_multihost.py",
    "test_api.py",
    "test_tf_densenet_recovery.py",
    "test_microbatch.py",
    "test_runguard.py",
    "test_run_tf.py",
    "test_tutorial.py",
    "test_replicate_fastt.py",
    "test_place_ilp.py",
    "test_roundtrip_property.py",
    "test_tf_lowering_zoo.py",
    "test_parser_shapes.py",
    "test_place_memory_guard.py",
    "test_zoo.py",
    "test_tf_onnx_cases.py",
    "test_packaging.py",
    "test_tf_control_flow.py",
    "test_browser.py",
    "test_girtext_writer.py",
    "test_api_doc.py",
)
"""Test modules that `make test` starts first, heaviest first (conftest.py's collection hook)."""


def heavy_first(items: list) -> None:
    """Sort collected ``items`` in place: :data:`HEAVY_MODULES` first, in its order; the rest keep theirs."""
    rank = {name: index for index, name in enumerate(HEAVY_MODULES)}
    items.sort(key=lambda item: rank.get(Path(item.path).name, len(rank)))


def f32(*dims: int | str | None) -> TensorType:
    """``f32[dims]``."""
    return TensorType(DType.F32, dims)


# ---- clusters, and modules built from text


def mesh_cluster(
    devices: int, *, bandwidth: float = 1e9, latency: float = 0.0, memory: int | None = None, prefix: str = "g"
) -> str:
    """A cluster file: devices ``{prefix}0`` .. ``{prefix}{devices-1}`` (of ``memory`` bytes when given),
    every ordered pair joined by one default link."""
    head = f"[default_link]\nlatency = {latency}\nbandwidth = {bandwidth:g}\n"
    size = "" if memory is None else f"memory = {memory}\n"
    return head + "".join(f'[[device]]\nname = "{prefix}{k}"\n{size}' for k in range(devices))


def write_cluster(tmp_path: Path, name: str, devices: int, *, memory: int, latency: float, bandwidth: float) -> str:
    """:func:`mesh_cluster` of devices ``d0``.. of ``memory`` bytes, written to ``tmp_path / name``; its path."""
    path = tmp_path / name
    path.write_text(mesh_cluster(devices, bandwidth=bandwidth, latency=latency, memory=memory, prefix="d"))
    return str(path)


def module_on_cluster(tmp_path: Path, cluster_toml: str, body: str, inputs: str) -> Module:
    """Module ``@m`` whose graph ``@g(inputs)`` holds ``body``, on ``cluster_toml`` written to ``tmp_path``."""
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_toml)
    return parse_module(f'module @m {{cluster = "{path}"}} {{\n  graph @g({inputs}) {{\n{body}\n  }}\n}}\n')


# A fork: a (1 s) produces 1,000,000 B read by b, c and e (3 s each); on links of 1 MB/s a copy
# takes 1 s. The goldens of test_place_ilp_rules.py and test_place_plan_congestion.py work on it.
FORK_BODY = """\
    %a = t.N(%in) : (f32[1]) -> f32[250000] [cost = 1s]
    %b = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    %c = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    %e = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    return %b, %c, %e"""


def fork(tmp_path: Path, *, latency: float = 0.0) -> Module:
    """:data:`FORK_BODY` on three devices joined by links of 1 MB/s and ``latency`` seconds."""
    return module_on_cluster(tmp_path, mesh_cluster(3, bandwidth=1e6, latency=latency), FORK_BODY, "%in : f32[1]")


# ---- the liveness chain and random DAGs with memory (mem-model=liveness, place{algo=auto})


def tight_cluster(tmp_path: Path, devices: int, capacity: int) -> str:
    """Devices of ``capacity`` bytes joined by free links (latency 0, infinite bandwidth).

    Free links make the placers' times the simulator's (no transfer takes time, so none delays
    another): the condition of graphir/memory.py under which the scheduled ledgers are exact.
    """
    return write_cluster(
        tmp_path, f"tight{devices}_{capacity}.toml", devices, memory=capacity, latency=0.0, bandwidth=1e30
    )


CHAIN_CLUSTER = """
[default_link]
latency = 0.0
bandwidth = 1e6
[[device]]
name = "g0"
memory = 100000
[[device]]
name = "g1"
memory = 100000
"""


CHAIN_BODY = """
    %a = t.N(%in) : (f32[1]) -> f32[7500] [cost = 1s]
    %b = t.N(%a) : (f32[7500]) -> f32[7500] [cost = 1s]
    %c = t.N(%b) : (f32[7500]) -> f32[7500] [cost = 1s]
    %d = t.N(%c) : (f32[7500]) -> f32[7500] [cost = 1s]
    return %d
"""


def liveness_chain(tmp_path: Path) -> Module:
    path = tmp_path / "cluster.toml"
    path.write_text(CHAIN_CLUSTER)
    return parse_module(f'module @m {{cluster = "{path}"}} {{\n  graph @g(%in : f32[1]) {{{CHAIN_BODY}  }}\n}}\n')


def random_memory_dag(seed: int, num_nodes: int, cluster: str) -> Module:
    """A random DAG with wide results (up to 4 MB), some temporaries and some persistent bytes."""
    rng = np.random.default_rng(seed)
    graph = Graph()
    values = [graph.add_input("x", TensorType(DType.F32, (16,)))]
    for i in range(num_nodes):
        k = int(rng.integers(1, 4))
        local = max(0, len(values) - 10)
        inputs = list(dict.fromkeys(values[int(rng.integers(local, len(values)))] for _ in range(k)))
        size = int(rng.integers(1, 1 << 20))
        node = graph.add_node("t.Op", inputs, [TensorType(DType.F32, (size,))], name=f"n{i}")
        node.cost = float(rng.exponential(1e-3)) + 1e-6
        if rng.random() < 0.3:
            node.mem = Mem(
                persistent=int(rng.integers(0, 1 << 22)),
                activation=4 * size,
                temporary=int(rng.integers(0, 1 << 22)),
            )
        values.append(node.outputs[0])
    graph.set_outputs([values[-1]])
    return Module("random", graph, cluster)


# ---- place{algo=auto}'s cases


AUTO_CLUSTER = mesh_cluster(2, bandwidth=1e6, memory=100000)


FORK_JOIN = """
    %s = t.S(%in) : (f32[1]) -> f32[1] [cost = 0s]
    %a = t.A(%s) : (f32[1]) -> f32[1] [cost = 2s]
    %b = t.B(%s) : (f32[1]) -> f32[1] [cost = 2s]
    %j = t.J(%a, %b) : (f32[1], f32[1]) -> f32[1] [cost = 0s]
    return %j
"""


def auto_module(tmp_path: Path, body: str) -> Module:
    return module_on_cluster(tmp_path, AUTO_CLUSTER, body, "%in : f32[1]")


# ---- random DAGs and the placers' check


OPS = ["tf.Tile", "tf.Slice", "tf.AddV2", "tf.Conv2D", "tf.Mul"]  # no shape rule: random sizes are valid


GiB = 1 << 30


ALL_PLACERS = ["order-place", "adjusting", "dpos", "heft"]


def random_module(
    seed: int,
    num_nodes: int,
    cluster: str = "2xV100",
    *,
    group_fraction: float = 0.0,
    colocate_fraction: float = 0.0,
    affinity_fraction: float = 0.0,
    heavy_fraction: float = 0.0,
) -> Module:
    """A random DAG with costs, tensor bytes and optional groups, colocation, affinity and weights.

    Nodes are created in a topological order; groups are contiguous runs of that order, so their
    quotient is acyclic. On ``moirai-intra`` (V100-32GB and P100) costs are per kind and an
    affinity, when drawn, is ``["P100"]`` (never empty once intersected).
    """
    rng = np.random.default_rng(seed)
    hetero = cluster == "moirai-intra"
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (16,)))
    values = [x]
    nodes = []
    for i in range(num_nodes):
        k = int(rng.integers(0, 4))
        local = max(0, len(values) - 12)
        inputs = list(dict.fromkeys(values[int(rng.integers(local, len(values)))] for _ in range(k)))
        size = int(rng.integers(1, 1 << 20))
        node = graph.add_node(str(rng.choice(OPS)), inputs, [TensorType(DType.F32, (size,))], name=f"n{i}")
        seconds = float(rng.exponential(1e-4))
        node.cost = Cost({"V100-32GB": seconds, "P100": seconds * float(rng.uniform(1, 3))}) if hetero else seconds
        if rng.random() < heavy_fraction:
            node.mem = Mem(persistent=int(rng.integers(1, 12)) * GiB, activation=4 * size)
        if rng.random() < colocate_fraction:
            node.colocate = f"c{int(rng.integers(0, 3))}"
        elif hetero and rng.random() < affinity_fraction:
            node.affinity = ("P100",)
        values.append(node.outputs[0])
        nodes.append(node)
    group = 0
    i = 0
    while i < num_nodes:
        length = int(rng.integers(1, 6))
        if rng.random() < group_fraction and length > 1:
            for node in nodes[i : i + length]:
                node.group = group
            group += 1
        i += length
    graph.set_outputs([values[-1]])
    return Module("random", graph, cluster)


def lower_bounds(module: Module) -> tuple[float, float]:
    """(critical path with the fastest device's times and free communication, total work / devices)."""
    index = module.graph.index()
    kinds = sorted({d.kind for d in module.cluster.devices})
    fastest = np.min(np.stack([index.times(kind) for kind in kinds]), axis=0)
    longest = fastest.copy()
    for u in range(index.num_nodes):  # nodes are numbered topologically
        preds = index.predecessors(u)
        if len(preds):
            longest[u] = fastest[u] + longest[preds].max()
    return float(longest.max(initial=0.0)), float(fastest.sum()) / len(module.cluster.devices)


def check_placer(module: Module, algo: str, *, expected: float | None = None, fits: bool = False) -> Place:
    """Place with ``algo``, verify, simulate and check the lower bounds; return the pass.

    ``expected``: the makespan worked out by hand for this placer on this graph (see
    test_place_quality.py); the simulated makespan must equal it. ``fits``: the graph is under
    :func:`add_memory_pressure` (no device holds it all, any spread fits): the placement must fit,
    spread over several devices (:func:`assert_fits`).
    """
    placer = Place(algo=algo)
    result = placer.run(module, PassContext())
    assert result.changed
    verify(module)
    sim = simulate(module)
    critical, work = lower_bounds(module)
    assert sim.makespan >= critical * (1 - 1e-9) - 1e-15
    assert sim.makespan >= work * (1 - 1e-9) - 1e-15
    if expected is not None:
        assert sim.makespan == pytest.approx(expected, rel=1e-9, abs=1e-15), (algo, sim.makespan, expected)
    if fits:
        assert_fits(module, algo)
    return placer


def placement_of(module: Module) -> list[tuple[str | None, int | None]]:
    return [(node.device, node.order) for node in module.graph.index().nodes]


@st.composite
def random_case(draw: st.DrawFn) -> tuple[Module, str, bool]:
    """``(module, cluster, pressure)``: a :func:`random_module`; with ``pressure``, under :func:`add_memory_pressure`.

    ``pressure`` is drawn on graphs without heavy nodes and holds when the pressure could be built:
    a memory-aware placer's answer must then fit (``check_placer(..., fits=pressure)``), which
    everything on one device never does.
    """
    seed = draw(st.integers(0, 2**31 - 1))
    num_nodes = draw(st.integers(1, 60))
    cluster = draw(st.sampled_from(["2xV100", "3xV100", "4xV100", "moirai-intra"]))
    heavy_fraction = draw(st.sampled_from([0.0, 0.3]))
    module = random_module(
        seed,
        num_nodes,
        cluster,
        group_fraction=draw(st.sampled_from([0.0, 0.3, 0.7])),
        colocate_fraction=draw(st.sampled_from([0.0, 0.1])),
        affinity_fraction=draw(st.sampled_from([0.0, 0.2])),
        heavy_fraction=heavy_fraction,
    )
    pressure = heavy_fraction == 0.0 and draw(st.booleans()) and add_memory_pressure(module, seed)
    return module, cluster, pressure


def heterogeneous_fork() -> Module:
    """a -> {b, c} on moirai-intra: b is 4x faster on a P100, c 4x faster on a V100."""
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    a = graph.add_node("tf.Relu", [x], [TensorType(DType.F32, (4,))], name="a")
    b = graph.add_node("tf.Relu", [a.outputs[0]], [TensorType(DType.F32, (4,))], name="b")
    c = graph.add_node("tf.Relu", [a.outputs[0]], [TensorType(DType.F32, (4,))], name="c")
    a.cost = 1e-3
    b.cost = Cost({"V100-32GB": 4e-3, "P100": 1e-3})
    c.cost = Cost({"V100-32GB": 1e-3, "P100": 4e-3})
    graph.set_outputs([b.outputs[0], c.outputs[0]])
    return Module("fork", graph, "moirai-intra")


# ---- hand-built DAGs (Baechi's and expert's tests)


def build(edges: dict[str, list[str]], costs: dict[str, float], cluster: str = "2xV100") -> Module:
    """Nodes in the given (topological) order; ``edges[name]`` lists its inputs (16 B tensors)."""
    graph = Graph()
    x = graph.add_input("x", f32(4))
    nodes = {}
    for name, inputs in edges.items():
        operands = [nodes[i].outputs[0] for i in inputs] or [x]
        node = graph.add_node("tf.AddN", operands, [f32(4)], name=name)
        node.cost = costs[name]
        nodes[name] = node
    graph.set_outputs([nodes[name].outputs[0] for name in edges if not any(name in v for v in edges.values())])
    return Module("m", graph, cluster)


def placed(module: Module) -> dict[str, str | None]:
    return {node.name: node.device for node in module.graph.nodes}


def run(module: Module, algo: str, **options: object) -> dict:
    return Place.of(algo, **options).run(module, PassContext()).stats


def chain_with_weights(weights_gib: list[int], cluster: str = "2xV100") -> Module:
    names = [f"n{i}" for i in range(len(weights_gib))]
    module = build({n: names[i - 1 : i] for i, n in enumerate(names)}, dict.fromkeys(names, 1e-3), cluster)
    for node, gib in zip(module.graph.index().nodes, weights_gib, strict=True):
        node.mem = Mem(persistent=gib * GiB)
    return module


# ---- place{algo=ilp}


def comm_heavy_module(seed: int, num_nodes: int, cluster: str) -> Module:
    """A random DAG whose transfers take about as long as its ops (congestion matters).

    Costs are per kind (V100-32GB and P100, the latter 1-3x slower), so the graph runs on the
    homogeneous shorthands and on the heterogeneous clusters above alike.
    """
    rng = np.random.default_rng(seed)
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (16,)))
    values = [x]
    for i in range(num_nodes):
        k = int(rng.integers(1, 3))
        inputs = list(dict.fromkeys(values[int(rng.integers(0, len(values)))] for _ in range(k)))
        size = int(rng.integers(1, 1 << 19))  # up to 2 MiB: up to ~175 us on PCIe
        node = graph.add_node("tf.AddV2", inputs, [TensorType(DType.F32, (size,))], name=f"n{i}")
        seconds = float(rng.uniform(20e-6, 300e-6))
        node.cost = Cost({"V100": seconds, "V100-32GB": seconds, "P100": seconds * float(rng.uniform(1, 3))})
        values.append(node.outputs[0])
    graph.set_outputs([values[-1]])
    return Module("heavy", graph, cluster)


def run_ilp(module: Module, time_limit: float = 30.0, **options: object) -> dict[str, object]:
    result = Place.of("ilp", time_limit=time_limit, **options).run(module, PassContext())
    verify(module)
    return dict(result.stats)


# ---- the CP-SAT model of place{algo=ilp}, solved in this process or the session's solver process


def solve_ilp_model(
    problem: PlacementProblem, options: dict[str, object], hint: tuple[list[int], list[int]] | None
) -> dict:
    from ortools.sat.python import cp_model  # noqa: PLC0415

    options = {"memory": None, **options}
    ilp = IlpModel(problem, Transfers(problem), **options)  # type: ignore[arg-type]
    hinted = None
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.max_time_in_seconds = 60.0
    if hint is not None:
        hinted = ilp.hint(*hint)
        solver.parameters.fix_variables_to_their_hinted_value = True
    status = solver.Solve(ilp.model)
    out: dict[str, object] = {"status": solver.StatusName(status), "unit": ilp.unit, "hinted": hinted, "fifo": ilp.fifo}
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out["makespan"] = solver.ObjectiveValue() * ilp.unit
        out["device"] = [next(d for d in ilp.devices if solver.Value(ilp.x[g][d])) for g in range(problem.num_nodes)]
        out["start"] = [solver.Value(v) * ilp.unit for v in ilp.start]
    return out


class SolverProcess:
    """One interpreter without TensorFlow that runs CP-SAT solves for the whole test session.

    CP-SAT crashes a process that has loaded TensorFlow (``place{algo=ilp}``'s ``isolate``), and
    the test session always has (test modules import it), so every ILP solve of the suite would
    start a fresh interpreter (about a second of imports each, most of the ILP tests' time). This
    keeps one such interpreter per session: ``call(module, function, args)`` pickles the call to it
    and the answer back (the same function on the same arguments, in a process TensorFlow never
    entered). A child that dies is restarted on the next call.
    """

    _LOOP = (
        "import importlib, pickle, sys, traceback\n"
        "sys.path.insert(0, {tests!r})\n"
        "out = sys.stdout.buffer\n"
        "sys.stdout = sys.stderr\n"
        "while True:\n"
        "    try:\n"
        "        module, function, args = pickle.load(sys.stdin.buffer)\n"
        "    except EOFError:\n"
        "        break\n"
        "    try:\n"
        "        answer = (True, getattr(importlib.import_module(module), function)(*args))\n"
        "    except BaseException as error:\n"
        "        answer = (False, traceback.format_exception_only(error)[-1].strip())\n"
        "    pickle.dump(answer, out)\n"
        "    out.flush()\n"
    )

    def __init__(self) -> None:
        self._child: Any = None

    def call(self, module: str, function: str, args: tuple) -> Any:
        """``module.function(*args)`` in the child; its exception's last line raised as a RuntimeError."""
        import subprocess  # noqa: PLC0415

        if self._child is None or self._child.poll() is not None:
            self.close()
            code = self._LOOP.format(tests=str(Path(__file__).parent))
            self._child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            pickle.dump((module, function, args), self._child.stdin)
            self._child.stdin.flush()
            ok, answer = pickle.load(self._child.stdout)
        except (EOFError, BrokenPipeError) as error:
            raise RuntimeError(f"the solver process died (exit code {self._child.wait()})") from error
        if not ok:
            raise RuntimeError(answer)
        return answer

    def close(self) -> None:
        """End the child (it leaves its loop when its input closes)."""
        if self._child is not None:
            self._child.stdin.close()
            self._child.wait(timeout=60)
            self._child.stdout.close()
            self._child = None


SOLVER_PROCESS = SolverProcess()
"""The session's solver process (conftest.py routes ``place{algo=ilp}``'s isolated solves to it)."""


# ---- the congestion goldens: 1 ms nodes, 1e6 B tensors, 1 GB/s links (one transfer: 1 ms)


T = "f32[250000]"


MS = 1e-3


MESH2 = mesh_cluster(2)


def module(tmp_path: Path, cluster_toml: str, body: str, inputs: str = f"%x : {T}"):
    return module_on_cluster(tmp_path, cluster_toml, body, inputs)


def node(name: str, operands: str, device: str, order: int, cost: str = "1ms") -> str:
    count = len(operands.split(","))
    types = ", ".join([T] * count)
    op = "onnx.Relu" if count == 1 else "onnx.Add"
    return f'    %{name} = {op}({operands}) : ({types}) -> {T} [cost = {cost}, device = "{device}", order = {order}]'


def times(result, m) -> dict[str, tuple[float, float]]:
    index = m.graph.index()
    return {
        n.name: (round(s / MS, 9), round(f / MS, 9))
        for n, s, f in zip(index.nodes, result.start.tolist(), result.finish.tolist(), strict=True)
    }


def transfers(result) -> list[tuple[float, float]]:
    return sorted((round(begin / MS, 9), round(end / MS, 9)) for *_, begin, end in result.transfer_log)


SLOW_MESH2 = MESH2.replace("latency = 0.0", "latency = 5e-4")  # 0.5 ms latency, 1 ms occupancy per tensor


CPU_CHARGED = (
    "[overheads]\ntransfer = 2e-4\nsend_cpu = 2e-4\nsend_cpu_per_byte = 3e-10\n"
    "recv_cpu = 1e-4\nrecv_cpu_per_byte = 4e-10\n" + MESH2
)  # per 1e6 B tensor: latency 0.2 ms, occupancy 1 ms, sender CPU 0.5 ms, receiver CPU 0.5 ms


# ---- an MLP Adam training step built node by node in the TF dialect (any batch)


def tf_tensor(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(dtype, tuple(shape))


def tf_const(graph: Graph, name: str, array: np.ndarray) -> Node:
    tensor = DenseTensor.from_numpy(array)
    return graph.add_node(
        "tf.Const", [], [tensor.type], name=name, params={"dtype": tensor.type.dtype.short, "value": tensor}
    )


def mlp_training_step(batch: int, widths: tuple[int, ...] = (4, 3, 2)) -> Module:
    """One Adam training step of an MLP ``widths[0] -> ... -> widths[-1]`` on ``batch`` samples."""
    g = Graph("main")
    layers = len(widths) - 1
    x = g.add_node("tf.Placeholder", [], [tf_tensor(batch, widths[0])], name="x", params={"dtype": "f32"})
    handles, reads = [], []
    for k in range(layers):
        shape = (widths[k], widths[k + 1])
        h = g.add_node(
            "tf.VarHandleOp",
            [],
            [tf_tensor(dtype=DType.RESOURCE)],
            name=f"w{k}/h",
            params={"dtype": "f32", "shape": shape},
        )
        r = g.add_node(
            "tf.ReadVariableOp", [h.outputs[0]], [tf_tensor(*shape)], name=f"w{k}/read", params={"dtype": "f32"}
        )
        handles.append(h)
        reads.append(r)
    acts = [x.outputs[0]]
    pre = []
    for k in range(layers):
        z = g.add_node(
            "tf.MatMul", [acts[-1], reads[k].outputs[0]], [tf_tensor(batch, widths[k + 1])], name=f"fwd{k}/mm"
        )
        pre.append(z)
        if k < layers - 1:
            acts.append(g.add_node("tf.Relu", [z.outputs[0]], [z.outputs[0].type], name=f"fwd{k}/relu").outputs[0])
        else:
            acts.append(z.outputs[0])
    axes = tf_const(g, "loss/axes", np.asarray([0, 1], dtype=np.int32))
    loss = g.add_node("tf.Sum", [acts[-1], axes.outputs[0]], [tf_tensor()], name="loss/sum")
    shape = tf_const(g, "grad/shape", np.asarray([batch, widths[-1]], dtype=np.int32))  # the batch, baked in
    one = tf_const(g, "grad/one", np.asarray(1.0, dtype=np.float32))
    grad = g.add_node(
        "tf.Fill", [shape.outputs[0], one.outputs[0]], [tf_tensor(batch, widths[-1])], name="grad/fill"
    ).outputs[0]
    grads = [None] * layers
    for k in reversed(range(layers)):
        if k < layers - 1:
            grad = g.add_node("tf.ReluGrad", [grad, pre[k].outputs[0]], [grad.type], name=f"bwd{k}/relu").outputs[0]
        dw = g.add_node(
            "tf.MatMul",
            [acts[k], grad],
            [tf_tensor(widths[k], widths[k + 1])],
            name=f"bwd{k}/dw",
            params={"transpose_a": True},
        )
        grads[k] = dw
        if k > 0:
            grad = g.add_node(
                "tf.MatMul",
                [grad, reads[k].outputs[0]],
                [tf_tensor(batch, widths[k])],
                name=f"bwd{k}/dx",
                params={"transpose_b": True},
            ).outputs[0]
    lr = tf_const(g, "adam/lr", np.asarray(1e-3, dtype=np.float32))
    applies = []
    for k in range(layers):
        slots = [
            g.add_node(
                "tf.VarHandleOp", [], [tf_tensor(dtype=DType.RESOURCE)], name=f"w{k}/{s}", params={"dtype": "f32"}
            )
            for s in ("m", "v")
        ]
        ins = [handles[k].outputs[0], *(s.outputs[0] for s in slots), lr.outputs[0], grads[k].outputs[0]]
        apply = g.add_node("tf.ResourceApplyAdam", ins, [], name=f"w{k}/adam")
        apply.add_control_input(reads[k])
        applies.append(apply)
    out = g.add_node("tf.Identity", [loss.outputs[0]], [tf_tensor()], name="out")
    for apply in applies:
        out.add_control_input(apply)
    g.set_outputs([out.outputs[0]])
    return Module("mlp_train", g, "4xV100-nvlink")


# ---- the two-layer MLP step worked by hand (test_training_structure.py's module docstring)


MLP = """
module @mlp_train {cluster = "2xV100"} {
  graph @main() {
    %x = tf.Placeholder() : () -> f32[8,4]
    %w0h = tf.VarHandleOp() : () -> resource[]
    %w1h = tf.VarHandleOp() : () -> resource[]
    %m0 = tf.VarHandleOp() : () -> resource[]
    %m1 = tf.VarHandleOp() : () -> resource[]
    %beta = tf.VarHandleOp() : () -> resource[]
    %d0/w = tf.ReadVariableOp(%w0h) : (resource[]) -> f32[4,4]
    %d0/MatMul = tf.MatMul(%x, %d0/w) : (f32[8,4], f32[4,4]) -> f32[8,4]
    %d0/Relu = tf.Relu(%d0/MatMul) : (f32[8,4]) -> f32[8,4]
    %d1/w = tf.ReadVariableOp(%w1h) : (resource[]) -> f32[4,4]
    %d1/MatMul = tf.MatMul(%d0/Relu, %d1/w) : (f32[8,4], f32[4,4]) -> f32[8,4]
    %loss/axes = tf.Const() : () -> i32[2]
    %loss/Sum = tf.Sum(%d1/MatMul, %loss/axes) : (f32[8,4], i32[2]) -> f32[]
    %ones = tf.Const() : () -> f32[8,4]
    %G/d1/MatMul/MatMul = tf.MatMul(%ones, %d1/w) : (f32[8,4], f32[4,4]) -> f32[8,4]
    %G/d1/MatMul/MatMul_1 = tf.MatMul(%d0/Relu, %ones) {transpose_a = true} : (f32[8,4], f32[8,4]) -> f32[4,4]
    %G/d0/Relu/ReluGrad = tf.ReluGrad(%G/d1/MatMul/MatMul, %d0/Relu) : (f32[8,4], f32[8,4]) -> f32[8,4]
    %G/d0/MatMul/MatMul_1 = tf.MatMul(%x, %G/d0/Relu/ReluGrad) {transpose_a = true} : (f32[8,4], f32[8,4]) -> f32[4,4]
    %shape = tf.Const() : () -> i32[2]
    %G/d0/MatMul/Reshape = tf.Reshape(%G/d0/MatMul/MatMul_1, %shape) : (f32[4,4], i32[2]) -> f32[4,4]
    %lr = tf.Const() : () -> f32[]
    %beta/read = tf.ReadVariableOp(%beta) : (resource[]) -> f32[]
    tf.ResourceApplyAdam @adam/apply0(%w0h, %m0, %beta/read, %lr, %G/d0/MatMul/Reshape) : APPLY
    tf.ResourceApplyAdam @adam/apply1(%w1h, %m1, %beta/read, %lr, %G/d1/MatMul/MatMul_1) : APPLY
    %beta/read2 = tf.ReadVariableOp(%beta) ctrl(@adam/apply0, @adam/apply1) : (resource[]) -> f32[]
    %beta/mul = tf.Mul(%beta/read2, %lr) : (f32[], f32[]) -> f32[]
    tf.AssignVariableOp @beta/assign(%beta, %beta/mul) : (resource[], f32[]) -> ()
    %out = tf.Identity(%loss/Sum) ctrl(@beta/assign) : (f32[]) -> f32[]
    return %out
  }
}
""".replace("APPLY", "(resource[], resource[], f32[], f32[], f32[4,4]) -> ()")


# ---- an L-layer MLP training step as text (the pipeline and parallelize tests)


APPLY = "(resource[], resource[], resource[], f32[], f32[WxW]) -> ()"


def mlp_train(layers: int = 4, batch: int = 256, width: int = 1024, cluster: str = "4xV100") -> str:
    """The text of an L-layer MLP training step, written out as TensorFlow's gradient code would.

    Forward ``d<k>/MatMul -> d<k>/Relu``, a ``loss/Sum``, the backward of each layer under
    ``gradient_tape/d<k>/`` (named under its forward op, as TensorFlow names gradients: ``ReluGrad``,
    the weight gradient ``MatMul`` with ``transpose_a``, the input gradient ``MatMul`` with
    ``transpose_b``), and one ``ResourceApplyAdam`` per weight with its two slots.
    """
    t = f"f32[{batch},{width}]"
    w = f"f32[{width},{width}]"
    lines = [
        f'module @mlp_train {{cluster = "{cluster}"}} {{',
        "  graph @main() {",
        f'    %x = tf.Placeholder() {{dtype = "f32"}} : () -> {t}',
        '    %adam/lr = tf.Const() {dtype = "f32", value = dense<f32[] = [0.001]>} : () -> f32[]',
    ]
    h = "%x"
    for k in range(layers):
        lines += [
            f'    %d{k}/w = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/m = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/v = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/read = tf.ReadVariableOp(%d{k}/w) {{dtype = "f32"}} : (resource[]) -> {w}',
            f"    %d{k}/MatMul = tf.MatMul({h}, %d{k}/read) : ({t}, {w}) -> {t}",
            f"    %d{k}/Relu = tf.Relu(%d{k}/MatMul) : ({t}) -> {t}",
        ]
        h = f"%d{k}/Relu"
    lines += [
        '    %loss/axes = tf.Const() {dtype = "i32", value = dense<i32[2] = [0, 1]>} : () -> i32[2]',
        f"    %loss/Sum = tf.Sum({h}, %loss/axes) : ({t}, i32[2]) -> f32[]",
        f'    %gradient_tape/shape = tf.Const() {{dtype = "i32", value = dense<i32[2] = [{batch}, {width}]>}} '
        ": () -> i32[2]",
        '    %gradient_tape/one = tf.Const() {dtype = "f32", value = dense<f32[] = [1.0]>} : () -> f32[]',
        f"    %gradient_tape/loss/Fill = tf.Fill(%gradient_tape/shape, %gradient_tape/one) : (i32[2], f32[]) -> {t}",
    ]
    g = "%gradient_tape/loss/Fill"
    updates = []
    for k in reversed(range(layers)):
        x = f"%d{k - 1}/Relu" if k else "%x"
        s = f"gradient_tape/d{k}"  # TensorFlow names a gradient under its forward op's name
        lines += [
            f"    %{s}/Relu/ReluGrad = tf.ReluGrad({g}, %d{k}/Relu) : ({t}, {t}) -> {t}",
            f"    %{s}/MatMul/MatMul_1 = tf.MatMul({x}, %{s}/Relu/ReluGrad) {{transpose_a = true}} : ({t}, {t}) -> {w}",
        ]
        if k:  # the input's gradient (none for the first layer: x is data)
            lines.append(
                f"    %{s}/MatMul/MatMul = tf.MatMul(%{s}/Relu/ReluGrad, %d{k}/read) {{transpose_b = true}} "
                f": ({t}, {w}) -> {t}"
            )
        lines.append(
            f"    tf.ResourceApplyAdam @d{k}/adam(%d{k}/w, %d{k}/m, %d{k}/v, %adam/lr, %{s}/MatMul/MatMul_1) "
            f": {APPLY.replace('WxW', f'{width},{width}')}"
        )
        g = f"%{s}/MatMul/MatMul"
        updates.append(f"@d{k}/adam")
    lines += [
        f"    %out = tf.Identity(%loss/Sum) ctrl({', '.join(updates)}) : (f32[]) -> f32[]",
        "    return %out",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


# ---- hypothesis: random modules of every construct (the text round trips)


# Characters that str.splitlines() treats as line ends are excluded from generated strings: see the
# reported bug in test_types_attributes.test_string_with_unicode_line_separators_round_trips.
_TEXT = st.text(st.characters(exclude_characters="\u2028\u2029\x85"), max_size=6)


_IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


_NAME_CHARS = string.ascii_letters + string.digits + "_.$#/-" + ' "\\é\t'


_DTYPES = [d for d in DType]


def _dims() -> st.SearchStrategy:
    return st.integers(0, 5) | _IDENT | st.none()


_TYPES = st.builds(
    TensorType,
    st.sampled_from(_DTYPES),
    st.none() | st.lists(_dims(), max_size=3).map(tuple),
)


def _dense() -> st.SearchStrategy:
    numeric = [DType.F16, DType.F32, DType.F64, DType.I8, DType.I64, DType.U64, DType.BOOL, DType.C64]

    @st.composite
    def build(draw):
        dtype = draw(st.sampled_from(numeric))
        size = draw(st.integers(0, 20))  # both the inline list (<= 16) and the base64 form
        from graphir.attributes import numpy_dtype

        np_dtype = np.dtype(numpy_dtype(dtype))
        raw = draw(st.binary(min_size=size * np_dtype.itemsize, max_size=size * np_dtype.itemsize))
        array = np.frombuffer(raw, dtype=np_dtype).copy()
        if np_dtype.kind == "f":
            array[np.isnan(array)] = 1.5  # NaN payloads/signs: reported bug, tested elsewhere
        if np_dtype.kind == "b":
            array = array.view(np.uint8) % 2 == 1
        return DenseTensor.from_numpy(array.reshape((size,)))

    return build()


_SCALARS = st.integers(-(10**20), 10**20) | st.booleans() | st.floats() | _TEXT


_PARAMS = st.recursive(
    _SCALARS | _TYPES | _dense() | st.builds(Opaque, _TEXT, st.binary(max_size=8)),
    lambda inner: st.lists(inner, max_size=3).map(tuple) | st.dictionaries(_IDENT, inner, max_size=2),
    max_leaves=6,
)


_KINDS = st.sampled_from(["default", "V100", "P100", "cpu", "A100", "V100-32GB", "2080Ti", "odd kind"])


def _annotations() -> st.SearchStrategy:
    cost = st.builds(Cost.of, st.floats(0, 1e4)) | st.dictionaries(_KINDS, st.floats(0, 1e4), max_size=3).map(Cost)
    mem = st.builds(Mem, st.integers(0, 1 << 40), st.integers(0, 1 << 40), st.integers(0, 1 << 40))
    return st.fixed_dictionaries(
        {},
        optional={
            "cost": cost,
            "mem": mem,
            "affinity": st.lists(st.sampled_from(["cpu", "V100", "x y", "é"]), max_size=2).map(tuple),
            "group": st.integers(0, 5),
            "colocate": st.sampled_from(["k", "embedding", "x y"]),
            "device": st.sampled_from(["gpu0", "gpu1", "/job:worker/task:1/device:GPU:0"]),
            "order": st.integers(0, 50),
            "start": st.floats(-1e4, 1e4),
            "finish": st.floats(0, 1e4),
        },
    )


@st.composite
def random_modules(draw, max_nodes: int = 25) -> Module:
    """A random module of every construct, with up to ``max_nodes`` nodes."""
    rng: random.Random = draw(st.randoms(use_true_random=False))

    def name(prefix: str) -> str:
        body = "".join(rng.choice(_NAME_CHARS) for _ in range(rng.randint(0, 3)))
        return prefix + body

    graph = Graph(draw(st.sampled_from(["main", "g 2", "sub.graph"])))
    values = []
    for k in range(draw(st.integers(0, 3))):
        values.append(graph.add_input(graph.unique_name(name(f"in{k}")), draw(_TYPES)))
    for k in range(draw(st.integers(0, 2))):
        const_type = draw(_TYPES)
        if draw(st.booleans()):
            data = draw(_dense())
            const_type = data.type
        else:
            data = ExternalTensor(const_type)
        values.append(graph.add_constant(graph.unique_name(name(f"w{k}")), const_type, data))
    num_nodes = draw(st.integers(0, max_nodes))
    specs = []
    for _ in range(num_nodes):
        specs.append(
            {
                "op": rng.choice(["onnx.Relu", "test.op", "tf.MatMul", "graphir.thing", "x.y.z"]),
                "outputs": [draw(_TYPES) for _ in range(rng.choice((0, 1, 1, 1, 2, 3)))],
                "params": draw(st.dictionaries(_IDENT, _PARAMS, max_size=3)),
                "annotations": draw(_annotations()),
                "named": rng.random() < 0.3,
            }
        )
    # Insert the nodes in a random order, then wire each one to graph values and results of
    # lower-ranked nodes: the insertion order is not topological, the graph is still a DAG.
    nodes: dict[int, object] = {}
    for rank in rng.sample(range(num_nodes), num_nodes):
        spec = specs[rank]
        node_name = graph.unique_name(name(f"node{rank}"), for_node=True) if spec["named"] else None
        output_names = [graph.unique_name(name(f"v{rank}_{j}")) for j in range(len(spec["outputs"]))]
        node = graph.add_node(
            spec["op"], [], spec["outputs"], name=node_name, output_names=output_names, params=spec["params"]
        )
        for key, value in spec["annotations"].items():
            node.set_annotation(key, value)
        nodes[rank] = node
    for rank in range(num_nodes):
        available = values + [v for r in range(rank) for v in nodes[r].outputs]
        for _ in range(rng.randint(0, 3) if available else 0):
            nodes[rank].add_input(rng.choice(available))
        if rank and rng.random() < 0.3:  # control dependencies print as ctrl(@node, ...)
            for _ in range(rng.randint(1, 2)):
                nodes[rank].add_control_input(nodes[rng.randrange(rank)])
    nodes = [nodes[r] for r in range(num_nodes)]
    all_values = values + [v for node in nodes for v in node.outputs]
    if all_values:
        graph.set_outputs(rng.sample(all_values, rng.randint(0, min(3, len(all_values)))))
    metadata = draw(st.dictionaries(_IDENT.filter(lambda k: k != "cluster"), _PARAMS, max_size=2))
    cluster = draw(st.none() | st.sampled_from(["4xV100", "2xA100-nvlink", "my cluster.toml"]))
    return Module(draw(st.sampled_from(["m", "resnet-50", "with space"])), graph, cluster, metadata)


# ---- the parser with its fast path off


def parse_tokens_only(text: str) -> Module:
    original = LineScanner.scan_node_line, _Parser._read_plain_lines
    LineScanner.scan_node_line = lambda self, line, defined: None  # type: ignore[method-assign]
    _Parser._read_plain_lines = lambda self, body: None  # type: ignore[method-assign]
    try:
        return parse_module(text, "random.gir")
    finally:
        LineScanner.scan_node_line, _Parser._read_plain_lines = original  # type: ignore[method-assign]


# ---- a synthetic calibration of the 2-worker TF rig


def rig_calibration(latency: float, bandwidth: float, kernel: float, gap: float, step: float) -> RigCalibration:
    sizes = [1024 * 4**k for k in range(7)]
    transfers = {
        ("worker0", "worker1"): [(s, latency + s / bandwidth) for s in sizes],
        ("worker1", "worker0"): [(s, 2 * latency + s / bandwidth) for s in sizes],
    }
    chains = {name: [(n, step + n * (kernel + gap)) for n in (50, 200, 800)] for name in ("worker0", "worker1")}
    return RigCalibration(
        transfers,
        chains,
        {"worker0": kernel, "worker1": kernel},
        {"worker0": (2e9, 0.05), "worker1": (2e9, 0.05)},
        {"worker0": (48e6, 0.01), "worker1": (48e6, 0.01)},
    )


# ---- tiny training steps traced by the zoo's own builder (needs TensorFlow)


GPT_CONFIG = (("layers", 2), ("d_model", 24), ("heads", 4), ("d_ff", 48), ("vocab", 30), ("seq", 6))
"""A tiny GPT: head size 24 / 4 = 6 and sequence 6."""


LSTM_CONFIG = (("layers", 2), ("units", 16), ("vocab", 20), ("seq", 4))
"""A tiny unrolled LSTM language model."""


TRANSFORMER_CONFIG = (("layers", 1), ("d_model", 24), ("heads", 4), ("d_ff", 48), ("vocab", 30), ("seq", 5))
"""A tiny encoder-decoder Transformer."""


def tiny_cnn(batch: int, size: int = 12, classes: int = 5) -> Any:
    """A small CNN training model (the zoo's ModelSpec shape)."""
    import keras

    images = keras.Input((size, size, 3), batch_size=batch, name="images")
    x = keras.layers.Conv2D(8, 3, padding="same", name="c1")(images)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D(2, name="p1")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.Conv2D(12, 3, strides=2, padding="same", name="c2")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same", name="ap")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(images, x, name="tiny_cnn"), [((batch, size, size, 3), "float32")], ((batch,), "int32")


def plain_cnn(batch: int, size: int = 12, classes: int = 5) -> Any:
    """A small CNN without batch statistics (micro-batches then compute the same step exactly)."""
    import keras

    images = keras.Input((size, size, 3), batch_size=batch, name="images")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="c1")(images)
    x = keras.layers.MaxPooling2D(2, name="p1")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.Conv2D(12, 3, strides=2, padding="same", activation="relu", name="c2")(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same", name="ap")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(images, x, name="plain_cnn"), [((batch, size, size, 3), "float32")], ((batch,), "int32")


def padded_cnn(batch: int, size: int = 14, classes: int = 5) -> Any:
    """A small CNN with the zoo CNNs' re-batching hazards, and a batch of 8 colliding with many sizes.

    ``ZeroPadding2D`` (a ``Pad`` whose ``[4, 2]`` paddings the gradient slices), ``Cropping2D`` (a
    ``StridedSlice`` whose gradient is a ``StridedSliceGrad``), ``Concatenate`` (its gradient slices
    at ``ConcatOffset`` begins), and at ``batch=8`` channels, spatial sizes, a concatenation offset
    and a dense layer's width of 8 that are not the batch. No batch statistics, so a re-batched step
    computes the same update exactly.
    """
    import keras

    images = keras.Input((size, size, 3), batch_size=batch, name="images")
    x = keras.layers.ZeroPadding2D(1, name="pad")(images)
    x = keras.layers.Conv2D(8, 3, activation="relu", name="c1")(x)  # 16 x 16 x 8
    x = keras.layers.MaxPooling2D(2, name="p1")(x)  # 8 x 8 x 8
    a = keras.layers.Conv2D(8, 1, activation="relu", name="a")(x)
    b = keras.layers.ZeroPadding2D(1, name="b_pad")(x)
    b = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="b")(b)  # 10 x 10 x 8
    b = keras.layers.Cropping2D(1, name="b_crop")(b)  # 8 x 8 x 8
    x = keras.layers.Concatenate(name="cat")([a, b])  # 8 x 8 x 16: b starts at channel 8
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="c2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(8, activation="relu", name="fc1")(x)
    x = keras.layers.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(images, x, name="padded_cnn"), [((batch, size, size, 3), "float32")], ((batch,), "int32")


def mini_resnet(batch: int, size: int = 32, classes: int = 10) -> Any:
    """ResNet-50's layers at a toy size: Keras's own ResNet v1 (``keras.src.applications.resnet``).

    The 7x7 stem convolution with batch norm, zero padding and 3x3 max pooling, bottleneck blocks
    (1x1, 3x3, 1x1 convolutions with batch norm, a projection shortcut, the addition), global
    average pooling and the softmax classifier, as ``keras.applications.ResNet50`` builds them; two
    stacks of one block each (16 and 32 filters, 64 and 128 out) instead of 3, 4, 6 and 3 blocks.
    """
    import keras
    from keras.src.applications import resnet

    def stack(x: Any) -> Any:
        x = resnet.stack_residual_blocks_v1(x, 16, 1, stride1=1, name="conv2")
        return resnet.stack_residual_blocks_v1(x, 32, 1, name="conv3")

    model = resnet.ResNet(
        stack, False, True, name="mini_resnet", weights=None, input_shape=(size, size, 3), classes=classes
    )
    assert isinstance(model, keras.Model)
    return model, [((batch, size, size, 3), "float32")], ((batch,), "int32")


def build_infer_onnx(model: str, batch: int, path: Path, **config: Any) -> None:
    """Write the inference ONNX of ``model`` (``mini_resnet``) at ``batch`` to ``path``, as the zoo converts its own.

    :func:`graphir.tools.zoo_convert.build_infer_onnx` (tf2onnx, weights frozen inline); ``config``
    goes to the builder. Needs TensorFlow.
    """
    from graphir.tools import zoo_convert, zoo_models

    builders = {"mini_resnet": mini_resnet}
    zoo_models.MODELS[model] = builders[model]
    zoo_convert.build_infer_onnx(model, batch, tuple(config.items()), path)


def build_train(model: str, batch: int, dropout: bool = True) -> tuple[Any, Any]:
    """``(graph_def, concrete_function)`` of one training step of ``model`` at ``batch``.

    One Adam step (forward, GradientTape backward, ``ResourceApplyAdam`` per variable:
    :func:`graphir.tools.zoo_convert.build_train_graphdef`) of ``gpt`` (the zoo's GPT at a tiny
    config whose head size and sequence length equal 6, so that many dimensions collide with a batch
    of 6), ``lstm`` and ``transformer`` (the zoo's, tiny), ``cnn`` (a small CNN with Keras batch
    norm, max and average pooling, a depthwise convolution and a softmax head), ``cnn_plain`` (the
    same without batch norm) or ``cnn_padded`` (:func:`padded_cnn`). ``dropout=False`` turns the
    GPT's dropout off (a numeric comparison of two graphs needs the same randomness). Needs TensorFlow.
    """
    from graphir.tools import zoo_convert, zoo_models

    if model == "cnn":
        zoo_models.MODELS["tiny_cnn"] = tiny_cnn
        zoo_convert.MODELS_WITH_SOFTMAX = zoo_models.MODELS_WITH_SOFTMAX | {"tiny_cnn"}
        return zoo_convert.build_train_graphdef("tiny_cnn", batch, ())
    if model == "cnn_plain":
        zoo_models.MODELS["plain_cnn"] = plain_cnn
        zoo_convert.MODELS_WITH_SOFTMAX = zoo_models.MODELS_WITH_SOFTMAX | {"plain_cnn"}
        return zoo_convert.build_train_graphdef("plain_cnn", batch, ())
    if model == "cnn_padded":
        zoo_models.MODELS["padded_cnn"] = padded_cnn
        zoo_convert.MODELS_WITH_SOFTMAX = zoo_models.MODELS_WITH_SOFTMAX | {"padded_cnn"}
        return zoo_convert.build_train_graphdef("padded_cnn", batch, ())
    if not dropout:
        zoo_models.DROPOUT = 0.0
    configs = {"gpt": GPT_CONFIG, "lstm": LSTM_CONFIG, "transformer": TRANSFORMER_CONFIG}
    return zoo_convert.build_train_graphdef(model, batch, configs[model])


def add_memory_pressure(module: Module, seed: int) -> bool:
    """Give some unconstrained nodes persistent bytes so that no device holds them all, yet any spread fits.

    Weights ``w`` of ``cap / 8`` to ``cap / 4`` (``cap``: the smallest device's memory) go on nodes
    without a group, colocation class or affinity until their sum ``W`` exceeds the largest device's
    memory, while ``W <= D * (cap - max w) - 1 GiB`` (``D`` devices; the GiB covers every tensor of
    the graph). Then everything on one device is out of memory, and a placer that puts each node on
    a device where it fits, whenever one has room, never runs out: a node finds no room only when
    every device holds more than ``cap - max w``, which needs more than ``W`` bytes in all.
    Returns whether the pressure could be built (``False``: too few such nodes; nothing changed).
    """
    rng = np.random.default_rng(seed)
    capacities = [device.memory for device in module.cluster.devices]
    cap, largest, devices = min(capacities), max(capacities), len(capacities)
    low, high = cap // 8, cap // 4
    bound = devices * (cap - high) - GiB
    nodes = module.graph.index().nodes
    free = [node for node in nodes if node.group is None and not node.colocate and not node.affinity]
    weights: dict[Node, int] = {}
    total = 0
    for node in rng.permutation(len(free)).tolist():
        if total > largest:
            break
        weight = int(rng.integers(low, high + 1))
        if total + weight > bound:
            break
        weights[free[node]] = weight
        total += weight
    if total <= largest:
        return False
    for node, weight in weights.items():
        node.mem = Mem(persistent=weight, activation=sum(value.type.nbytes for value in node.outputs))
    return True


def assert_fits(module: Module, algo: str) -> None:
    """The placed ``module`` is not out of memory, and it is spread over more than one device."""
    sim = simulate(module)
    assert sim.oom_devices == [], (algo, sim.oom_devices, sim.peak_memory.tolist())
    assert len({node.device for node in module.graph.nodes}) > 1, algo


# ---- fused kernels marked by hand (until the fuse-kernels pass sets them)

ELEMENTWISE_TF_OPS = frozenset(
    f"tf.{op}"
    for op in (
        "Add AddV2 Sub Mul RealDiv Neg Square Sqrt Rsqrt Exp Log Maximum Minimum "
        "Relu Sigmoid Tanh ReluGrad SigmoidGrad TanhGrad"
    ).split()
)
"""TF ops an elementwise chain of :func:`mark_kernel_chains` may hold (all have XLA kernels)."""


def mark_kernel_chains(module: Module, ops: frozenset[str] = ELEMENTWISE_TF_OPS, prefix: str = "k") -> int:
    """Give every maximal chain of elementwise nodes on one device its own ``kernel`` name; the chains marked.

    A node ``u`` joins the chain of its only successor ``v`` (data and control) when both are in
    ``ops``, on one device, and (when the nodes have orders) ``v`` is next after ``u`` in the device's
    order. Every chain is convex: all paths out of ``u`` go through ``v``; and, being consecutive
    in its device's order, it stays convex under the enforced order's control dependencies. Chains
    of one node are left unmarked. Names are ``<prefix><k>``, numbered in topological order.
    """
    nodes = list(module.graph.index().nodes)
    parent = {node: node for node in nodes}

    def root(node: Node) -> Node:
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for node in nodes:
        successors = {*node.successors, *node.control_users}
        if node.op not in ops or len(successors) != 1 or node.device is None:
            continue
        (after,) = successors
        if after.op not in ops or after.device != node.device:
            continue
        if node.order is not None and after.order != node.order + 1:
            continue
        parent[root(node)] = root(after)
    members: dict[Node, list[Node]] = {}
    for node in nodes:
        if node.op in ops and node.device is not None:
            members.setdefault(root(node), []).append(node)
    chains = [chain for chain in members.values() if len(chain) > 1]
    for number, chain in enumerate(chains):
        for node in chain:
            node.kernel = f"{prefix}{number}"
    return len(chains)


KERNEL_REGION_TF_OPS = ELEMENTWISE_TF_OPS | frozenset(
    f"tf.{op}"
    for op in (
        "Sum Mean Max Reshape Transpose Cast SelectV2 Select Softmax BiasAdd BiasAddGrad SquaredDifference Pow "
        "Erf ExpandDims Squeeze Tile BroadcastTo Identity ConcatV2 StridedSlice Const"
    ).split()
)
"""TF ops a region of :func:`mark_kernel_regions` may hold (reductions, reshapes, selects... all with XLA kernels)."""


def mark_kernel_regions(module: Module, ops: frozenset[str] = KERNEL_REGION_TF_OPS, limit: int = 24) -> list[int]:
    """Grow convex regions of ``ops`` on one device greedily and name each a kernel; the regions' sizes.

    In topological order, the region of each edge's ends (data or control; both in ``ops``, on one
    device, at most ``limit`` nodes together) merge unless a path leaves one and enters the other,
    the device orders counted as edges (each node to the next of its device), so the regions stay
    jointly convex under the enforced order too. Regions of one node stay unmarked; names are
    ``r<k>``. A quadratic search, for test graphs of a few thousand nodes.
    """
    from graphir.backends.tf.lowering import lowering_sequence

    placed = [node for node in module.graph.nodes if node.device is not None]
    ordered = bool(placed) and all(node.order is not None for node in placed)
    nodes, order_prev = lowering_sequence(module, ordered)  # a topological order of data, control and order edges
    position = {node: k for k, node in enumerate(nodes)}
    following = {before: after for after, before in order_prev.items()}

    def successors(node: Node) -> list[Node]:
        after = following.get(node)
        return [*node.successors, *node.control_users, *([after] if after is not None else [])]

    region = {node: node for node in nodes}
    members = {node: [node] for node in nodes}

    def find(node: Node) -> Node:
        while region[node] is not node:
            region[node] = region[region[node]]
            node = region[node]
        return node

    def path_between(first: Node, second: Node) -> bool:
        """Whether a path leaves region ``first`` and enters region ``second`` through other regions."""
        inside = {*members[first], *members[second]}
        last = max(position[m] for m in members[second])
        pending = [s for m in members[first] for s in successors(m) if s not in inside]
        seen: set[Node] = set()
        while pending:
            node = pending.pop()
            if node in seen or position[node] > last:
                continue
            seen.add(node)
            for succ in successors(node):
                if succ in inside:
                    if find(succ) is second:
                        return True
                else:
                    pending.append(succ)
        return False

    for node in nodes:
        if node.op not in ops or node.device is None:
            continue
        for succ in successors(node):
            if succ.op not in ops or succ.device != node.device:
                continue
            first, second = find(node), find(succ)
            if first is second or len(members[first]) + len(members[second]) > limit:
                continue
            if path_between(first, second) or path_between(second, first):
                continue
            region[second] = first
            members[first] += members.pop(second)
    regions = [group for root, group in members.items() if len(group) > 1 and find(root) is root]
    for number, group in enumerate(regions):
        for node in group:
            node.kernel = f"r{number}"
    return [len(group) for group in regions]


TWO_TASKS = """
[[device]]
name = "w0"
kind = "cpu"
tf_device = "/job:worker/task:0/device:CPU:0"

[[device]]
name = "w1"
kind = "cpu"
tf_device = "/job:worker/task:1/device:CPU:0"
"""
"""A cluster file of two CPU devices on two TF worker tasks (the multi-host and rig tests)."""
