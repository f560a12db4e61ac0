"""Synthetic graphir modules for scaling benchmarks: seeded random layered DAGs of any size.

Unlike ``devtools/synth_onnx.py`` (real ONNX ops, uniform tensors) these graphs are built directly as
:class:`~graphir.ir.Module` objects and imitate the statistics of the zoo's training graphs:

* **Layers**: nodes are laid out in layers of random width (mean ``width``); every node reads its
  first operand from the previous layer (the graph stays deep, like a training graph's forward and
  backward chains) and up to two more from the ``window`` most recent layers (skip connections).
  Mean in-degree ~1.5, like the zoo.
* **Ops** are drawn from a weighted mix of the zoo's most frequent TF op types (``tf.MatMul``,
  ``tf.Conv2D``, element-wise ops, ``tf.Const``-like sources...), named ``synth.<Op>``.
* **Compute time** (``cost`` annotation): log-normal, median :data:`MEDIAN_COST`, sigma
  :data:`COST_SIGMA` (heavy-tailed: the top 1% of nodes hold about a third of the total time, as in
  profiled CNN/Transformer training graphs); heavy ops (MatMul, Conv) are scaled up.
* **Tensor sizes**: each result is ``f32[n]`` with ``n`` log-normal (median :data:`MEDIAN_ELEMENTS`
  elements, i.e. 256 KiB, sigma :data:`SIZE_SIGMA`, clipped to [1, 2^28]): from scalars to
  activation maps of hundreds of MiB, like the zoo. A fraction of the sources are variables
  (``synth.Variable``) carrying ``mem`` persistent bytes.
* **Control edges**: a small fraction of nodes also get a control dependency on an earlier node.

The same ``(num_nodes, seed, ...)`` always gives the same module, and so byte-identical `.gir`.
Building is vectorised with numpy (random draws, edge choice); 100k nodes build in a few seconds.

Command line::

    python -m devtools.synth 100000 big.gir --seed 0
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.ir import Graph, Module
from graphir.types import DType, TensorType

MEDIAN_COST = 20e-6
"""Median compute time of a node (seconds)."""
COST_SIGMA = 1.6
"""Sigma of the log-normal compute time (heavy tail)."""
MEDIAN_ELEMENTS = 65536
"""Median number of f32 elements of a result (256 KiB)."""
SIZE_SIGMA = 2.0
"""Sigma of the log-normal tensor size."""
MAX_ELEMENTS = 1 << 28
VARIABLE_FRACTION = 0.08
"""Fraction of nodes that are variables (sources with persistent memory)."""
CONTROL_FRACTION = 0.02
"""Fraction of nodes that get one extra control dependency."""

# Op mix: (op type, relative frequency, compute-time multiplier, number of data operands or -1 for 1-3).
_OPS: tuple[tuple[str, float, float, int], ...] = (
    ("Mul", 14, 1.0, 2),
    ("AddV2", 12, 1.0, 2),
    ("Sub", 6, 1.0, 2),
    ("Reshape", 8, 0.2, 1),
    ("Identity", 6, 0.1, 1),
    ("Relu", 5, 1.0, 1),
    ("Sigmoid", 3, 1.0, 1),
    ("Tanh", 3, 1.0, 1),
    ("Sum", 4, 1.5, 1),
    ("AddN", 4, 1.5, -1),
    ("ConcatV2", 3, 1.0, -1),
    ("MatMul", 8, 8.0, 2),
    ("Conv2D", 4, 12.0, 2),
    ("Conv2DBackpropInput", 2, 12.0, 2),
    ("Conv2DBackpropFilter", 2, 12.0, 2),
    ("BiasAddGrad", 2, 1.0, 1),
    ("FusedBatchNormV3", 2, 3.0, 2),
    ("Softmax", 1, 2.0, 1),
)


def make_synthetic_module(
    num_nodes: int,
    seed: int = 0,
    *,
    width: int = 40,
    window: int = 4,
    name: str | None = None,
) -> Module:
    """A random layered DAG of exactly ``num_nodes`` nodes with ``cost`` and ``mem`` annotations.

    Args:
        num_nodes: number of nodes (>= 1).
        seed: random seed; equal arguments give an identical module.
        width: mean number of nodes per layer.
        window: how many recent layers a node may read from.
        name: module name (default ``synth_<num_nodes>_<seed>``).

    Returns:
        The module; its graph outputs are the results of the last layer.
    """
    if num_nodes < 1:
        raise ValueError("num_nodes must be at least 1")
    if width < 1 or window < 1:
        raise ValueError("width and window must be at least 1")
    rng = np.random.default_rng(seed)
    # ---- layout: layer sizes summing to num_nodes
    sizes: list[int] = []
    remaining = num_nodes
    while remaining > 0:
        size = int(min(remaining, rng.integers(1, 2 * width)))
        sizes.append(size)
        remaining -= size
    layer_of = np.repeat(np.arange(len(sizes)), sizes)
    layer_start = np.concatenate(([0], np.cumsum(sizes)))
    # ---- per-node draws, vectorised
    weights = np.array([op[1] for op in _OPS], dtype=float)
    op_ids = rng.choice(len(_OPS), size=num_nodes, p=weights / weights.sum())
    is_variable = rng.random(num_nodes) < VARIABLE_FRACTION
    is_variable[layer_of == 0] = True  # the first layer holds only sources
    multipliers = np.array([op[2] for op in _OPS])[op_ids]
    costs = np.exp(rng.normal(np.log(MEDIAN_COST), COST_SIGMA, num_nodes)) * multipliers
    elements = np.clip(np.exp(rng.normal(np.log(MEDIAN_ELEMENTS), SIZE_SIGMA, num_nodes)), 1, MAX_ELEMENTS)
    elements = elements.astype(np.int64)
    arity = np.array([op[3] for op in _OPS])[op_ids]
    arity = np.where(arity < 0, rng.integers(1, 4, num_nodes), arity)
    # ---- operands: the first from the previous layer, the others from the window
    prev_start = layer_start[np.maximum(layer_of - 1, 0)]
    prev_size = layer_start[np.maximum(layer_of, 1)] - prev_start
    first = prev_start + (rng.random(num_nodes) * prev_size).astype(np.int64)
    win_start = layer_start[np.maximum(layer_of - window, 0)]
    win_size = layer_start[layer_of] - win_start
    extra = win_start[:, None] + (rng.random((num_nodes, 2)) * np.maximum(win_size, 1)[:, None]).astype(np.int64)
    control_from = win_start + (rng.random(num_nodes) * np.maximum(win_size, 1)).astype(np.int64)
    has_control = (rng.random(num_nodes) < CONTROL_FRACTION) & ~is_variable

    graph = Graph("main")
    types: dict[int, TensorType] = {}
    nodes = []
    for i in range(num_nodes):
        count = int(elements[i])
        tensor_type = types.get(count)
        if tensor_type is None:
            tensor_type = types[count] = TensorType(DType.F32, (count,))
        if is_variable[i]:
            node = graph.add_node("synth.Variable", (), [tensor_type], name=f"v{i}")
            node.mem = Mem(persistent=count * 4, activation=count * 4)
        else:
            operand_ids = [int(first[i])]
            operand_ids += [int(x) for x in extra[i, : int(arity[i]) - 1]]
            operands = [nodes[k].outputs[0] for k in operand_ids]
            node = graph.add_node("synth." + _OPS[op_ids[i]][0], operands, [tensor_type], name=f"n{i}")
            node.mem = Mem(activation=count * 4)
            if has_control[i]:
                node.add_control_input(nodes[int(control_from[i])])
        node.cost = Cost.of(float(costs[i]))
        nodes.append(node)
    last = len(sizes) - 1
    graph.set_outputs(nodes[k].outputs[0] for k in range(int(layer_start[last]), num_nodes))
    return Module(name or f"synth_{num_nodes}_{seed}", graph)


def main(argv: Sequence[str] | None = None) -> int:
    """Write a synthetic module as `.gir` text."""
    parser = argparse.ArgumentParser(prog="synth", description="Write a seeded random layered DAG as .gir text.")
    parser.add_argument("num_nodes", type=int, help="number of nodes (>= 1)")
    parser.add_argument("output", type=Path, help="output .gir file ('-' for stdout)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--width", type=int, default=40, help="mean nodes per layer (default 40)")
    parser.add_argument("--window", type=int, default=4, help="layers a node may read from (default 4)")
    args = parser.parse_args(argv)
    from graphir.printer import print_module

    start = time.perf_counter()
    try:
        module = make_synthetic_module(args.num_nodes, args.seed, width=args.width, window=args.window)
    except ValueError as exc:
        print(f"synth: error: {exc}", file=sys.stderr)
        return 1
    # Printed straight to the stream: a million-node module's text is 140 MB.
    if str(args.output) == "-":
        print_module(module, sys.stdout)
    else:
        with args.output.open("w") as out:
            print_module(module, out)
    index = module.graph.index()
    elapsed = time.perf_counter() - start
    print(f"synth: {index.num_nodes} nodes, {index.num_edges} edges in {elapsed:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
