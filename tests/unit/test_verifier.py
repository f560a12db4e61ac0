"""The verifier: every check fires with a message naming the node(s), and valid graphs pass."""

from __future__ import annotations

import re

import pytest
from helpers import f32

from graphir.errors import VerifyError
from graphir.ir import Graph, Module
from graphir.parser import parse_module
from graphir.types import DType, TensorType
from graphir.verifier import verify


def fails(module: Module, pattern: str) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(module)
    assert re.search(pattern, info.value.message), info.value.message
    return info.value


def test_valid_chain_passes(chain):
    module, a, b, c = chain
    verify(module)
    # A complete, consistent placement passes too.
    a.device, a.order = "gpu0", 0
    b.device, b.order = "gpu1", 0
    c.device, c.order = "gpu0", 1
    a.colocate = c.colocate = "k"
    a.affinity = ("V100",)
    a.group = c.group = None
    b.group = 4
    verify(module)


def test_cycle_names_its_nodes(chain):
    module, a, b, c = chain
    a.set_input(0, c.outputs[0])
    exc = fails(module, r"graph 'main' has a cycle: a -> b -> c -> a")
    assert exc.loc.node == "a"


def test_cycle_from_text_points_at_the_line():
    text = """\
module @m {
  graph @main(%x : f32[2]) {
    %a = onnx.Add(%x, %c) : (f32[2], f32[2]) -> f32[2]
    %b = onnx.Relu(%a) : (f32[2]) -> f32[2]
    %c = onnx.Relu(%b) : (f32[2]) -> f32[2]
    return %c
  }
}
"""
    exc = fails(parse_module(text, "c.gir"), r"cycle: a -> b -> c -> a")
    assert exc.one_line().startswith("c.gir:3:")


def test_quotient_cycle_names_groups_and_members(chain):
    module, a, b, c = chain
    a.group = c.group = 7  # b sits between two members of group 7
    fails(module, r"quotient graph of groups has a cycle: group 7 \('a'\) -> 'b' -> group 7 \('a'\)")


def test_quotient_cycle_between_two_groups():
    g = Graph()
    x = g.add_input("x", f32(1))
    prev = x
    nodes = []
    for name in "pqrs":
        nodes.append(g.add_node("test.op", [prev], [f32(1)], name=name))
        prev = nodes[-1].outputs[0]
    p, q, r, s = nodes
    p.group, q.group, r.group, s.group = 1, 2, 1, 2  # 1 -> 2 -> 1
    fails(Module("m", g), r"group 1 \('p'\) -> group 2 \('q'\) -> group 1 \('p'\)")
    r.group = 2
    verify(Module("m", g))


def test_unknown_device_lists_the_cluster(chain):
    module, a, _, _ = chain
    a.device = "gpu7"
    exc = fails(module, r"'onnx.Relu' op 'a' is placed on unknown device 'gpu7' \(cluster '2xV100' has gpu0, gpu1\)")
    assert exc.loc.node == "a"


def test_order_must_be_a_permutation(chain):
    module, a, b, c = chain
    a.device = b.device = "gpu0"
    a.order, b.order = 0, 2
    fails(module, r"'b' has order 2 on 'gpu0', expected 1: orders must be 0..1")
    b.order = 0
    fails(module, r"'b' has order 0 on 'gpu0', expected 1")  # duplicate position
    b.order = 1
    verify(module)


def test_order_without_device(chain):
    module, a, _, _ = chain
    a.order = 0
    fails(module, r"'a' has an 'order' but no 'device'")


def test_deadlocking_order_names_the_cycle(chain):
    module, a, b, c = chain
    # a -> b -> c by data, but gpu0 runs c before a.
    a.device, a.order = "gpu0", 1
    c.device, c.order = "gpu0", 0
    b.device = "gpu1"
    exc = fails(module, r"per-device 'order' deadlocks against the data dependencies: ")
    cycle = exc.message.rsplit(": ", 1)[1].split(" -> ")
    assert cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}


def test_orders_on_independent_devices_do_not_interfere(chain):
    module, a, b, c = chain
    a.device, a.order = "gpu1", 0
    b.device, b.order = "gpu0", 0
    c.device, c.order = "gpu1", 1
    verify(module)


def test_colocation_names_both_nodes(chain):
    module, a, b, _ = chain
    a.device, b.device = "gpu0", "gpu1"
    a.colocate = b.colocate = "emb"
    fails(module, r"'b' is on 'gpu1' but its colocation class 'emb' has 'a' on 'gpu0'")
    b.device = "gpu0"
    verify(module)


def test_affinity_is_respected(chain):
    module, a, _, _ = chain
    a.device = "gpu1"
    a.affinity = ("cpu",)
    fails(module, r"'a' runs only on cpu but is placed on 'gpu1' \(V100\)")
    a.affinity = ("cpu", "V100")
    verify(module)


def test_affinity_without_device_is_fine(chain):
    module, a, _, _ = chain
    a.affinity = ("cpu",)
    verify(module)


@pytest.mark.parametrize(
    ("op", "in_types", "out_types", "params", "pattern"),
    [
        (
            "graphir.split",
            [f32(2, 6)],
            [f32(2, 2), f32(2, 3)],
            {"axis": 1},
            r"parts add up to 5 along axis 1, expected 6",
        ),
        (
            "graphir.split",
            [f32(2, 6)],
            [f32(2, 3), f32(3, 3)],
            {"axis": 1},
            r"part f32\[3,3\] does not match f32\[2,6\]",
        ),
        ("graphir.split", [f32(2, 6)], [f32(2, 3), f32(2, 3)], {"axis": 2}, r"axis 2 is out of range for f32\[2,6\]"),
        ("graphir.split", [f32(2, 6)], [f32(2, 3), f32(2, 3)], {}, r"needs an integer 'axis'"),
        ("graphir.split", [f32(2, 6)], [f32(2, 3), f32(2, 3)], {"axis": "1"}, r"needs an integer 'axis'"),
        ("graphir.split", [f32(2, 6)], [f32(2, 6, 1)], {"axis": 1}, r"does not match"),
        (
            "graphir.concat",
            [f32(2, 6), f32(2, 1)],
            [f32(2, 6)],
            {"axis": 1},
            r"parts add up to 7 along axis 1, expected 6",
        ),
        ("graphir.concat", [f32(2, 6)], [f32(2, 3), f32(2, 3)], {"axis": 1}, r"one whole tensor"),
        ("onnx.MatMul", [f32(2, 3), f32(4, 5)], [f32(2, 5)], {}, r"f32\[2,3\] and f32\[4,5\] have mismatched inner"),
        ("onnx.MatMul", [f32(7, 2, 3), f32(7, 4, 5)], [f32(7, 2, 5)], {}, r"mismatched inner"),
        ("onnx.Relu", [f32(2, 6)], [f32(2, 5)], {}, r"result type f32\[2,5\] does not match operand type f32\[2,6\]"),
        ("onnx.Relu", [f32(2)], [TensorType(DType.F16, (2,))], {}, r"does not match operand type"),
        # The element-wise unary rule: same rank, and no static result dim the operand does not have.
        ("onnx.Relu", [f32("n", 2)], [f32(3, 2)], {}, r"result type f32\[3,2\] does not match operand type f32\[n,2\]"),
        ("onnx.Relu", [f32(2, 3)], [f32(6)], {}, r"result type f32\[6\] does not match operand type f32\[2,3\]"),
        ("tf.Relu", [f32(2)], [f32(7)], {}, r"result type f32\[7\] does not match operand type f32\[2\]"),
        ("tf.Tanh", [f32(4)], [TensorType(DType.F16, (4,))], {}, r"does not match operand type"),
        ("onnx.Add", [f32(2), TensorType(DType.F16, (2,))], [f32(2)], {}, r"must share one element type"),
    ],
)
def test_type_rules(op, in_types, out_types, params, pattern):
    g = Graph()
    inputs = [g.add_input(f"i{k}", t) for k, t in enumerate(in_types)]
    g.add_node(op, inputs, out_types, name="s", params=params)
    exc = fails(Module("m", g), f"'{re.escape(op)}' op 's' .*" + pattern)
    assert exc.loc.node == "s"


@pytest.mark.parametrize(
    ("op", "in_types", "out_types", "params"),
    [
        ("graphir.split", [f32(2, 6)], [f32(2, 2), f32(2, 4)], {"axis": 1}),
        ("graphir.split", [f32("n", 6)], [f32("n", 2), f32("n", 4)], {"axis": 1}),
        ("graphir.split", [f32("n", 6)], [f32(5, 1)], {"axis": 1}),  # not static: not checked
        ("graphir.concat", [f32(1, 6), f32(3, 6)], [f32(4, 6)], {"axis": 0}),
        ("onnx.MatMul", [f32(2, 3), f32(3, 5)], [f32(2, 5)], {}),
        ("onnx.MatMul", [f32(3), f32(3, 5)], [f32(5)], {}),  # 1-D operand: no inner-dim rule
        ("onnx.MatMul", [f32(2, "k"), f32(3, 5)], [f32(2, 5)], {}),  # symbolic: not checked
        ("onnx.Relu", [f32("n", 2)], [f32("n", 2)], {}),
        ("onnx.Relu", [f32(3, 2)], [f32("n", 2)], {}),  # a symbolic result dim claims nothing
        ("onnx.Relu", [f32(None, 2)], [f32(3, 2)], {}),  # an unknown operand dim matches anything
        ("onnx.Relu", [TensorType(DType.F32, None)], [f32(3, 2)], {}),  # unknown rank: not checked
        ("tf.Relu", [f32(2, "n")], [f32(2, "n")], {}),
        ("onnx.Add", [f32(2), f32(1)], [f32(2)], {}),  # broadcasting: only dtypes checked
        ("tf.Identity", [f32(2)], [f32(7)], {}),  # no rule registered for this op: not checked
    ],
)
def test_type_rules_accept_valid_ops(op, in_types, out_types, params):
    g = Graph()
    inputs = [g.add_input(f"i{k}", t) for k, t in enumerate(in_types)]
    g.add_node(op, inputs, out_types, name="s", params=params)
    verify(Module("m", g))


def test_type_error_from_text_points_at_the_op():
    text = """\
module @m {
  graph @main(%x : f32[2,3], %w : f32[4,5]) {
    %y = onnx.MatMul(%x, %w) : (f32[2,3], f32[4,5]) -> f32[2,5]
    return %y
  }
}
"""
    exc = fails(parse_module(text, "t.gir"), r"mismatched inner dimensions")
    assert (exc.loc.file, exc.loc.line, exc.loc.col) == ("t.gir", 3, 10)
    assert exc.one_line().startswith("t.gir:3:10: error: 'onnx.MatMul' op 'y' ")


def test_stale_use_list_is_caught(chain):
    module, a, b, _ = chain
    b.inputs[0] = module.graph.value("x")  # bypasses set_input: the use lists are now wrong
    fails(module, r"'a' result '%a' has a stale use by 'b'|'b' operand #0 '%x' is missing from its use list")
    module.graph.value("a").uses.clear()
    fails(module, r"'b' operand #0 '%x' is missing from its use list")


def test_foreign_operand_is_caught(chain):
    module, _, b, _ = chain
    other = Graph("other")
    v = other.add_input("v", f32(4))
    b.set_input(0, v)
    fails(module, r"'b' operand #0 '%v' is not a value of graph 'main'")


def test_removed_producer_is_caught(chain):
    module, a, b, c = chain
    g = module.graph
    g.set_outputs([])
    g.remove_node(c)
    # Detach b from the graph the wrong way: keep it as a user of a but drop it from the graph.
    stray = b.outputs[0]
    b.outputs[0].uses.clear()
    g.remove_node(b)
    c2 = g.add_node("onnx.Relu", [a.outputs[0]], [f32(4)], name="c2")
    c2.inputs.append(stray)
    stray.uses.append((c2, 1))
    fails(module, r"'c2' operand #1 '%b' is not a value of graph 'main'")


def test_output_of_another_graph_is_caught(chain):
    module, *_ = chain
    other = Graph("other")
    module.graph.set_outputs([other.add_input("v", f32(1))])
    fails(module, r"graph output '%v' is not a value of graph 'main'")
