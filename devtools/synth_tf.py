"""Synthetic TensorFlow GraphDefs for scale tests and benchmarks: random layered DAGs of real TF ops.

The TensorFlow twin of :mod:`devtools.synth_onnx`: every activation is ``f32[1,64]``; ops are
unary ``Relu``/``Sigmoid``/``Tanh``, binary ``AddV2``/``Mul``, variadic ``AddN`` (2-3 inputs) and
``MatMul`` against one of a few shared ``[64,64]`` ``Const`` weights (inline, small enough to stay
nodes). Nodes are laid out in layers; each reads 1-3 values from the few most recent layers (the
first always from the previous layer). The ``NodeDef`` protos are written directly (no TensorFlow
graph is built), so making a million-node file takes seconds; the same ``(num_nodes, seed)`` always
gives the same file, byte for byte.

Command line::

    python -m devtools.synth_tf 100000 big.pb --seed 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from devtools.synth_onnx import layered_wiring

HIDDEN = 64
"""Width of every activation (``f32[1,HIDDEN]``)."""
NUM_WEIGHTS = 8
"""Number of shared ``[HIDDEN, HIDDEN]`` MatMul weights."""
_UNARY = ("Relu", "Sigmoid", "Tanh")
_BINARY = ("AddV2", "Mul")
_DT_FLOAT = 1  # tensorflow.core.framework.types_pb2.DT_FLOAT


def make_layered_graphdef(num_nodes: int, seed: int, *, width: int = 32, window: int = 3, num_inputs: int = 2) -> bytes:
    """The serialized ``GraphDef`` of a random layered DAG of ``num_nodes`` compute ops.

    Args:
        num_nodes: number of compute ops (>= 1); the file also holds ``num_inputs`` placeholders
            and :data:`NUM_WEIGHTS` weight constants.
        seed: random seed; equal arguments give an identical file.
        width: mean number of nodes per layer (each layer has 1 to ``2 * width - 1`` nodes).
        window: how many recent layers a node may read from.
        num_inputs: number of ``Placeholder`` inputs (the first layer).
    """
    from tensorflow.core.framework import graph_pb2, tensor_pb2

    if num_nodes < 1:
        raise ValueError("num_nodes must be at least 1")
    rng = np.random.default_rng(seed)
    graph = graph_pb2.GraphDef()
    graph.versions.producer = 1286
    for k in range(num_inputs):
        node = graph.node.add(name=f"x{k}", op="Placeholder")
        node.attr["dtype"].type = _DT_FLOAT
        for size in (1, HIDDEN):
            node.attr["shape"].shape.dim.add(size=size)
    for k in range(NUM_WEIGHTS):
        weight = rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) * np.float32(0.1)
        tensor = tensor_pb2.TensorProto(dtype=_DT_FLOAT, tensor_content=weight.tobytes())
        for size in weight.shape:
            tensor.tensor_shape.dim.add(size=size)
        node = graph.node.add(name=f"w{k}", op="Const")
        node.attr["dtype"].type = _DT_FLOAT
        node.attr["value"].tensor.CopyFrom(tensor)
    layers = layered_wiring(rng, num_nodes, num_inputs, width, window, _BINARY, _UNARY, "AddN", 1, NUM_WEIGHTS)
    for name, op, inputs in (node for layer in layers[1:] for node in layer):
        node = graph.node.add(name=name, op=op, input=inputs)
        node.attr["T"].type = _DT_FLOAT
        if op == "AddN":
            node.attr["N"].i = len(inputs)
        elif op == "MatMul":
            node.attr["transpose_a"].b = False
            node.attr["transpose_b"].b = False
    return graph.SerializeToString(deterministic=True)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: write a synthetic GraphDef to a file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("num_nodes", type=int, help="number of compute ops")
    parser.add_argument("out", type=Path, help="output .pb file (binary GraphDef)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--width", type=int, default=32, help="mean nodes per layer (default 32)")
    args = parser.parse_args(argv)
    if args.num_nodes < 1 or args.width < 1:
        parser.error("num_nodes and --width must be positive")
    args.out.write_bytes(make_layered_graphdef(args.num_nodes, args.seed, width=args.width))
    print(f"wrote {args.out}: {args.num_nodes} compute nodes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
