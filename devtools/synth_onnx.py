"""Synthetic ONNX models for scale tests and benchmarks: random layered DAGs of real ONNX ops.

Every activation is ``f32[1,64]`` so any op mix stays valid for ONNX shape inference and for
onnxruntime: unary ``Relu``/``Sigmoid``/``Tanh``, binary ``Add``/``Mul``, variadic ``Sum`` (1-3
inputs) and ``MatMul`` against one of a few shared ``[64,64]`` weight initializers. Nodes are laid
out in layers; each node reads 1-3 values from the few most recent layers (the first always from
the previous layer, so the graph stays deep). The same ``(num_nodes, seed)`` always gives the same
model, byte for byte.

Command line::

    python -m devtools.synth_onnx 100000 big.onnx --seed 0
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HIDDEN = 64
"""Width of every activation (``f32[1,HIDDEN]``)."""

OPSET = 13
NUM_WEIGHTS = 8
"""Number of shared ``[HIDDEN, HIDDEN]`` MatMul weights."""

_UNARY = ("Relu", "Sigmoid", "Tanh")
_BINARY = ("Add", "Mul")


def make_layered_onnx(
    num_nodes: int,
    seed: int,
    *,
    width: int = 32,
    window: int = 3,
    num_inputs: int = 2,
) -> onnx.ModelProto:
    """A random layered DAG of exactly ``num_nodes`` ONNX ops, deterministic for ``seed``.

    Args:
        num_nodes: number of ops (>= 1).
        seed: random seed; equal arguments give an identical model.
        width: mean number of nodes per layer (each layer has 1 to ``2 * width - 1`` nodes).
        window: how many recent layers a node may read from.
        num_inputs: number of graph inputs (the first layer).

    Returns:
        A checked ``onnx.ModelProto`` (opset 13) whose outputs are the values of the last layer.
    """
    if num_nodes < 1:
        raise ValueError("num_nodes must be at least 1")
    rng = np.random.default_rng(seed)
    model = helper.make_model(
        helper.make_graph([], f"layered_{num_nodes}_{seed}", [], []),
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="graphir-synth",
    )
    model.ir_version = 7
    graph = model.graph
    for k in range(num_inputs):
        graph.input.append(helper.make_tensor_value_info(f"x{k}", TensorProto.FLOAT, [1, HIDDEN]))
    for k in range(NUM_WEIGHTS):
        weight = rng.standard_normal((HIDDEN, HIDDEN), dtype=np.float32) * np.float32(0.1)
        graph.initializer.append(numpy_helper.from_array(weight, f"w{k}"))

    layers = layered_wiring(rng, num_nodes, num_inputs, width, window, _BINARY, _UNARY, "Sum", 0, NUM_WEIGHTS)
    for made, (out, op, inputs) in enumerate(name_op for layer in layers[1:] for name_op in layer):
        graph.node.add(op_type=op, input=inputs, output=[out], name=f"n{made}")
    for name, _, _ in layers[-1]:
        graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, HIDDEN]))
    onnx.checker.check_model(model)
    return model


def layered_wiring(
    rng: np.random.Generator,
    num_nodes: int,
    num_inputs: int,
    width: int,
    window: int,
    binary: tuple[str, ...],
    unary: tuple[str, ...],
    nary: str,
    min_extra: int,
    num_weights: int = 8,
) -> list[list[tuple[str, str, list[str]]]]:
    """The layered random wiring both synthetic writers share (this one and ``devtools/synth_tf.py``).

    Returns the layers, the first of them the graph inputs ``x0..``, each later one a list of
    ``(value name v<i>, op, input names)``: 15 % ``MatMul`` by a weight ``w<k>``, 35 % a unary op,
    35 % a binary op with a value of the last ``window`` layers, 15 % the ``nary`` op over the
    previous layer's value plus ``min_extra``..2 recent ones. Layers hold 1..2*width-1 ops.
    """
    layers: list[list] = [[(f"x{k}", "", []) for k in range(num_inputs)]]
    made = 0
    while made < num_nodes:
        layer_size = min(int(rng.integers(1, 2 * width)), num_nodes - made)
        recent = [name for layer in layers[-window:] for name, _, _ in layer]
        previous = [name for name, _, _ in layers[-1]]
        layer = []
        for _ in range(layer_size):
            first = previous[int(rng.integers(len(previous)))]
            choice = rng.random()
            if choice < 0.15:
                op, inputs = "MatMul", [first, f"w{int(rng.integers(num_weights))}"]
            elif choice < 0.5:
                op, inputs = unary[int(rng.integers(len(unary)))], [first]
            elif choice < 0.85:
                op, inputs = binary[int(rng.integers(len(binary)))], [first, recent[int(rng.integers(len(recent)))]]
            else:
                extra = [recent[int(rng.integers(len(recent)))] for _ in range(int(rng.integers(min_extra, 3)))]
                op, inputs = nary, [first, *extra]
            layer.append((f"v{made}", op, inputs))
            made += 1
        layers.append(layer)
    return layers


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: write a synthetic model to a file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("num_nodes", type=int, help="number of ONNX ops")
    parser.add_argument("out", type=Path, help="output .onnx file")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--width", type=int, default=32, help="mean nodes per layer (default 32)")
    args = parser.parse_args(argv)
    if args.num_nodes < 1 or args.width < 1:
        parser.error("num_nodes and --width must be positive")
    model = make_layered_onnx(args.num_nodes, args.seed, width=args.width)
    onnx.save_model(model, str(args.out))
    print(f"wrote {args.out}: {len(model.graph.node)} nodes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
