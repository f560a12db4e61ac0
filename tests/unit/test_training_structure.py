"""Forward/backward pairing (:mod:`graphir.passes.training`) on a hand-built and a traced training graph.

The hand-built graph is a two-layer MLP step worked by hand: forward ``d0/MatMul -> d0/Relu ->
d1/MatMul -> loss/Sum``, its gradient (``dX1 = seed . W1`` reads only a weight and a constant,
``dW1 = relu^T . seed``, ``ReluGrad``, ``dW0 = x^T . drelu``, a reshape) and one
``ResourceApplyAdam`` per weight with a slot, plus a step counter (``beta1_power`` read, ``Mul``,
``AssignVariableOp``) that no layer owns.
"""

from __future__ import annotations

from helpers import MLP

from graphir.parser import parse_module
from graphir.passes.training import BACKWARD, FORWARD, OPTIMIZER, OTHER, STATE, training_structure

# Worked by hand (module docstring of graphir.passes.training): role, anchor, layer per node.
# Layers: d0 -> 0, d1 -> 1, loss -> 2 (scope keys; no scope is shared by a majority); x has no
# scope and no forward predecessor: its successor's layer 0; out joins its predecessor's, 2.
EXPECTED = {
    "x": (FORWARD, "x", 0),
    "w0h": (STATE, "d0/MatMul", 0),
    "w1h": (STATE, "d1/MatMul", 1),
    "m0": (STATE, "d0/MatMul", 0),  # a slot follows the update that takes it
    "m1": (STATE, "d1/MatMul", 1),
    "beta": (STATE, None, -1),  # shared by every update: no layer
    "d0/w": (STATE, "d0/MatMul", 0),
    "d0/MatMul": (FORWARD, "d0/MatMul", 0),
    "d0/Relu": (FORWARD, "d0/Relu", 0),
    "d1/w": (STATE, "d1/MatMul", 1),
    "d1/MatMul": (FORWARD, "d1/MatMul", 1),
    "loss/axes": (OTHER, None, -1),
    "loss/Sum": (FORWARD, "loss/Sum", 2),
    "ones": (OTHER, None, -1),
    # reads the weight d1/w: its one forward consumer (no gradient scope, so no name hint)
    "G/d1/MatMul/MatMul": (BACKWARD, "d1/MatMul", 1),
    # reads d0/Relu's result: the last forward consumer, d1/MatMul
    "G/d1/MatMul/MatMul_1": (BACKWARD, "d1/MatMul", 1),
    "G/d0/Relu/ReluGrad": (BACKWARD, "d1/MatMul", 1),
    # reads x: its last forward consumer, d0/MatMul
    "G/d0/MatMul/MatMul_1": (BACKWARD, "d0/MatMul", 0),
    "shape": (OTHER, None, -1),
    # reads no forward value: its successor's (the update of w0)
    "G/d0/MatMul/Reshape": (BACKWARD, "d0/MatMul", 0),
    "lr": (OTHER, None, -1),
    "beta/read": (STATE, "d1/MatMul", 1),  # read by both updates: the larger anchor
    "adam/apply0": (OPTIMIZER, "d0/MatMul", 0),
    "adam/apply1": (OPTIMIZER, "d1/MatMul", 1),
    "beta/read2": (STATE, None, -1),
    "beta/mul": (STATE, None, -1),
    "beta/assign": (STATE, None, -1),
    "out": (FORWARD, "out", 2),
}


def _table(text: str) -> dict[str, tuple[int, str | None, int]]:
    structure = training_structure(parse_module(text))
    assert structure is not None
    names = [node.name for node in structure.nodes]
    return {
        names[u]: (
            int(structure.role[u]),
            names[int(structure.anchor[u])] if structure.anchor[u] >= 0 else None,
            int(structure.layer[u]),
        )
        for u in range(len(names))
    }


def test_hand_built_mlp_step_without_name_hints() -> None:
    """Every node's role, anchor and layer as worked by hand; the structure alone decides."""
    assert _table(MLP) == EXPECTED


def test_gradient_scope_hint_picks_the_confirmed_forward_op() -> None:
    """Under ``gradient_tape/``, ReluGrad is anchored to d0/Relu (it reads d0/Relu's result: confirmed)."""
    table = _table(MLP.replace("%G/", "%gradient_tape/"))
    assert table["gradient_tape/d0/Relu/ReluGrad"] == (BACKWARD, "d0/Relu", 0)
    assert table["gradient_tape/d1/MatMul/MatMul_1"] == (BACKWARD, "d1/MatMul", 1)
    # the hint names d0/MatMul, but the op reads nothing of d0/MatMul's: the structure decides
    assert table["gradient_tape/d0/MatMul/Reshape"] == (BACKWARD, "d0/MatMul", 0)


def test_not_a_training_graph() -> None:
    """No write consuming a gradient: None (an inference graph; the step counter alone is not training)."""
    lines = [line for line in MLP.splitlines() if "tf.ResourceApplyAdam" not in line]
    text = "\n".join(lines).replace("ctrl(@adam/apply0, @adam/apply1) ", "")
    assert training_structure(parse_module(text)) is None


# --------------------------------------------------------------------------------- a traced Keras step


def test_traced_gpt_gradients_follow_their_forward_matmul(tiny_gpt_step) -> None:
    """Each gradient MatMul of a forward MatMul is anchored to it; updates and layers line up."""
    structure = training_structure(tiny_gpt_step)
    assert structure is not None
    nodes = structure.nodes
    names = [node.name for node in nodes]
    position = {name: u for u, name in enumerate(names)}
    matmuls = {"tf.MatMul", "tf.BatchMatMulV2"}
    forward_matmuls = [u for u in range(len(nodes)) if structure.role[u] == FORWARD and nodes[u].op in matmuls]
    assert len(forward_matmuls) >= 10
    checked = 0
    for u, node in enumerate(nodes):
        if node.op not in matmuls or not node.name.startswith("gradient_tape/"):
            continue
        assert structure.role[u] == BACKWARD, node.name
        forward_name = node.name.removeprefix("gradient_tape/").rsplit("/", 1)[0]
        if forward_name in position and structure.role[position[forward_name]] == FORWARD:
            assert names[structure.anchor[u]] == forward_name, node.name
            checked += 1
    assert checked >= 2 * len(forward_matmuls) - 4  # dX and dW of (almost) every forward MatMul
    # Every Adam update belongs to a layer, through the forward op that reads its variable.
    updates = [u for u in range(len(nodes)) if nodes[u].op == "tf.ResourceApplyAdam"]
    assert updates and all(structure.role[u] == OPTIMIZER and structure.layer[u] >= 0 for u in updates)
    for u in updates:
        variable = nodes[u].inputs[0].producer
        assert variable is not None and structure.anchor[position[variable.name]] == structure.anchor[u]
    # Layers never decrease along a forward edge; the second block's layers come after the first's.
    for u in forward_matmuls:
        for value in nodes[u].inputs:
            p = value.producer
            if p is not None and structure.role[position[p.name]] == FORWARD:
                assert structure.layer[position[p.name]] <= structure.layer[u]
    first = {int(structure.layer[u]) for u in forward_matmuls if "/l0_" in names[u]}
    second = {int(structure.layer[u]) for u in forward_matmuls if "/l1_" in names[u]}
    assert first and second and max(first) < min(second)
    assert structure.num_layers >= 10
    anchored = structure.anchor >= 0
    assert (structure.layer[anchored] >= 0).all()
    assert (structure.anchor[structure.role == BACKWARD] >= 0).all()
