"""Control-flow ops holding regions (:mod:`graphir.regions`): ONNX ``If``/``Loop``/``Scan``, TF ``While``/``If``.

**Cost** (what ``profile`` charges the node, which fusion and placement treat as one unit with its
whole body on one device): the work of one pass through a region is the sum of its nodes' own
estimates (nested regions included), and the node's work is

* ``If``: the costlier branch (by FLOPs, then bytes): a conservative bound, since the branch
  taken is known only at run time;
* ``Loop``: ``trips · body``, ``trips`` the constant trip count ``M`` when it is one (bounded by
  nothing else: a loop that ends early on its condition is over-charged), else
  :data:`DEFAULT_TRIPS` (a documented guess for a data-dependent count);
* ``Scan``: ``length · body``, the length of the first scan input along its scan axis (static),
  else :data:`DEFAULT_TRIPS`;
* TF ``While``: :data:`DEFAULT_TRIPS` · (cond + body) (TF's functional loops carry no count).

FLOPs and bytes add up, so the roofline of a loop is that of its summed work (an optimistic bound
against per-op rooflines: the body's kernels are charged no launch overhead of their own).
Temporary bytes: the body's largest scratch plus all its activations (every result of one trip
alive at once: an upper bound of what a trip holds), plus the body's constants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from graphir.attributes import DenseTensor
from graphir.ops.registry import Estimate, cost
from graphir.ops.work import estimate_node
from graphir.regions import node_regions

if TYPE_CHECKING:
    from graphir.ir import Graph, Node, Value

__all__ = ["DEFAULT_TRIPS", "region_work", "trip_count"]

DEFAULT_TRIPS = 16
"""Trips charged to a loop whose count is known only at run time."""


def region_work(graph: Graph) -> Estimate:
    """``(flops, bytes, temporary)`` of one pass through a region graph (see the module docstring)."""
    flops = nbytes = 0.0
    scratch = activations = 0
    for node in graph.nodes:
        f, b, t, _, _ = estimate_node(node)
        flops += f
        nbytes += b
        scratch = max(scratch, t)
        activations += sum(v.type.nbytes_or(0) for v in node.outputs)
    constants = sum(v.type.nbytes_or(0) for v in graph.constants)
    return flops, nbytes, scratch + activations + constants


def _constant_scalar(value: Value | None) -> int | None:
    """The integer value of a constant scalar operand (an initializer or an ``onnx.Constant``), else ``None``."""
    if value is None:
        return None
    data = value.const
    if data is None and value.producer is not None and value.producer.op == "onnx.Constant":
        data = value.producer.params.get("value")  # type: ignore[assignment]
    if not isinstance(data, DenseTensor):
        return None
    array = np.asarray(data.numpy()).reshape(-1)
    return int(array[0]) if array.size == 1 else None


def trip_count(node: Node) -> tuple[int, bool]:
    """``(trips, exact)``: how many times ``node``'s body runs, and whether that is known before the run."""
    op = node.op.rsplit(".", 1)[-1]
    if op == "Loop":
        absent = set(node.params.get("_absent_inputs", ()))  # type: ignore[arg-type]
        m = None if 0 in absent or not node.inputs else _constant_scalar(node.inputs[0])
        if m is not None and m >= 0:
            return m, True
    if op == "Scan":
        scan_count = node.params.get("num_scan_inputs")
        captures = node.params.get("_captured_inputs", 0)
        own = node.inputs[: len(node.inputs) - captures] if isinstance(captures, int) else node.inputs
        if isinstance(scan_count, int) and 0 < scan_count <= len(own):
            first = own[len(own) - scan_count].type
            axes = node.params.get("scan_input_axes") or (0,)
            axis = int(axes[0])  # type: ignore[index]
            if first.shape is not None and first.shape:
                length = first.shape[axis]
                if isinstance(length, int):
                    return length, True
    return DEFAULT_TRIPS, False


def _looped_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """``trips · (work of the regions)`` (``If``: the costlier branch); see the module docstring."""
    regions = node_regions(node)
    if not regions:
        return None
    works = [region_work(region.graph) for _, region in regions]
    if node.op.rsplit(".", 1)[-1] == "If":
        flops, nbytes, _ = max(works, key=lambda w: (w[0], w[1]))
        return flops, nbytes, max(w[2] for w in works)
    trips, _ = trip_count(node)
    flops = sum(w[0] for w in works)
    nbytes = sum(w[1] for w in works)
    return trips * flops, trips * nbytes + float(sum(ib) + sum(ob)), max(w[2] for w in works)


cost("onnx.If", "onnx.Loop", "onnx.Scan", "tf.While", "tf.StatelessWhile", "tf.If", "tf.StatelessIf")(_looped_cost)
