"""The analytical roofline: per-node time from FLOPs and bytes, and whole-graph work and memory.

The per-op work (FLOPs, bytes, scratch) comes from each op kind's cost facet in :mod:`graphir.ops`
(see :mod:`graphir.ops.work` for the estimators and their fallback).

**Time** (roofline, Williams et al. 2009; the "operational intensity" estimate Moirai §III-C
cites) on a device of peak ``P`` FLOP/s, memory bandwidth ``B`` bytes/s and per-kernel launch
overhead ``L``::

    t = max(flops / P, bytes / B) + L

A device with an asynchronous kernel dispatch time ``D > 0`` (``Device.kernel_dispatch``; 0, the
default, on every catalogued kind) instead charges ``max(max(flops / P, bytes / B), D)`` to an op
with work, whose launch is issued while the previous kernel runs, and ``L`` to an op without work
(metadata ops launch no kernel). ``benchmarks/results/occupancy.md`` records what it does to FastT's
Table 1 and why it is off.

It is computed with numpy for all nodes at once, per device *kind*, so heterogeneous clusters
get one time per kind (``Cost({kind: seconds})``). Celeritas §4.2 and Pesto §3.1 measure times
instead (``profile{mode=onnxruntime}``); the roofline is the estimate available without hardware.

**Memory** (:class:`~graphir.annotations.Mem`):

* ``persistent``: bytes that live for the whole run. (1) Graph constants (weights) feeding the
  op: a constant used by several ops (shared or tied weights) is attributed **once**, to its
  first user in the graph's topological order (the array view's numbering), so the sum over
  nodes equals the model's parameter bytes; a placer that splits the users of a shared weight
  must account for the copy itself. (2) Ops that own their value (:func:`graphir.ops.owns_value`:
  ONNX ``Constant``, TF ``Const``; their output bytes) and TF variables (:func:`graphir.ops.is_variable`:
  ``VarHandleOp``, ``VariableV2``, ``Variable``; the size given by their ``shape``/``dtype`` params).
  Optimizer slots (Adam's ``m`` and ``v``) are variables of their own and are counted this way.
* ``activation``: bytes of the op's outputs (zero for ops whose outputs are persistent).
  **Lifetime semantics** (used by the simulator's peak memory): an activation is allocated when
  its producer starts and freed when its *last consumer* finishes (or at the end of the step for
  graph outputs). In a training graph the forward activations are read by their backward (gradient)
  ops, so they naturally live until their last backward consumer; nothing beyond the use lists is
  needed to express that.
* ``temporary``: scratch bytes needed only while the op runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from graphir.attributes import DenseTensor
from graphir.ir import ValueKind
from graphir.ops import estimate_node, is_variable, owns_value, variable_bytes

if TYPE_CHECKING:
    from graphir.cluster import Cluster, Device
    from graphir.ir import Graph, Node

__all__ = ["GraphWork", "analyze_graph", "kind_times", "roofline"]


@attrs.frozen(eq=False)
class GraphWork:
    """Per-node work and memory of a graph, in the array view's topological numbering.

    Attributes:
        flops, bytes: float64 per node.
        persistent, activation, temporary: int64 bytes per node.
        fallback: bool per node, True where the bytes-only fallback was used.
        symbolic: bool per node, True where a symbolic dimension was taken as 1.
    """

    flops: np.ndarray
    bytes: np.ndarray
    persistent: np.ndarray
    activation: np.ndarray
    temporary: np.ndarray
    fallback: np.ndarray
    symbolic: np.ndarray

    def times(self, device: Device) -> np.ndarray:
        """Roofline time per node on ``device``: ``max(flops/peak, bytes/bandwidth) + launch overhead``."""
        return roofline(
            self.flops,
            self.bytes,
            device.peak_flops,
            device.mem_bandwidth,
            device.launch_overhead,
            device.kernel_dispatch,
        )


def roofline(
    flops: np.ndarray, nbytes: np.ndarray, peak_flops: float, bandwidth: float, overhead: float, dispatch: float = 0.0
) -> np.ndarray:
    """``max(flops / peak_flops, bytes / bandwidth) + overhead``, elementwise (Williams et al. 2009).

    With an asynchronous kernel ``dispatch`` time (:attr:`graphir.cluster_model.Device.kernel_dispatch`,
    > 0), an op with work costs ``max(kernel, dispatch)`` instead (its launch overlaps the previous
    kernel) and an op without work ``overhead``.
    """
    kernel = np.maximum(flops / peak_flops, nbytes / bandwidth)
    if dispatch <= 0:
        return kernel + overhead
    return np.where(kernel > 0, np.maximum(kernel, dispatch), overhead)


def kind_times(cluster: Cluster, nodes: Sequence[Node]) -> tuple[dict[str, np.ndarray], list[int]]:
    """Roofline seconds of ``nodes`` on each device kind of ``cluster`` (kinds sorted), and their temporaries.

    For passes that create nodes after profiling (operation splitting, data-parallel replicas) and
    need their analytical costs on the module's cluster.
    """
    estimates = [estimate_node(n) for n in nodes]
    flops = np.asarray([e[0] for e in estimates], dtype=np.float64)
    nbytes = np.asarray([e[1] for e in estimates], dtype=np.float64)
    times = {}
    for kind in sorted(cluster.kinds):
        device = cluster.kind_device(kind)
        times[kind] = roofline(
            flops, nbytes, device.peak_flops, device.mem_bandwidth, device.launch_overhead, device.kernel_dispatch
        )
    return times, [e[2] for e in estimates]


def analyze_graph(graph: Graph, nodes: Sequence[Node] | None = None) -> GraphWork:
    """FLOPs, bytes and memory of every node, in ``graph.index()`` order unless ``nodes`` is given.

    Shared constants are attributed to their first user in that order (see the module docstring).
    """
    if nodes is None:
        nodes = graph.index().nodes
    n = len(nodes)
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    temporary = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=bool)
    symbolic = np.zeros(n, dtype=bool)
    for i, node in enumerate(nodes):
        f, b, t, fb, sym = estimate_node(node)
        flops[i], nbytes[i], temporary[i], fallback[i], symbolic[i] = f, b, t, fb, sym
    persistent, activation = node_memory(nodes)
    return GraphWork(flops, nbytes, persistent, activation, temporary, fallback, symbolic)


def node_memory(nodes: Sequence[Node]) -> tuple[np.ndarray, np.ndarray]:
    """Persistent and activation bytes of each node (the accounting :func:`analyze_graph` reports).

    Persistent: the variables a node holds and the constants it is the first (in ``nodes``' order)
    to read; a constant-producing op's result. Activation: its results' bytes otherwise.
    """
    n = len(nodes)
    persistent = np.zeros(n, dtype=np.int64)
    activation = np.zeros(n, dtype=np.int64)
    owned: set[int] = set()
    for i, node in enumerate(nodes):
        weights = 0
        for value in node.inputs:
            if value.kind is ValueKind.CONSTANT and id(value) not in owned:
                owned.add(id(value))
                weights += value.nbytes
        out_bytes = sum(v.nbytes for v in node.outputs)
        if is_variable(node.op):
            weights += variable_bytes(node)
            out_bytes = 0
        elif owns_value(node.op):
            value_param = node.params.get("value")
            weights += out_bytes if out_bytes or not isinstance(value_param, DenseTensor) else len(value_param.data)
            out_bytes = 0
        persistent[i] = weights
        activation[i] = out_bytes
    return persistent, activation
