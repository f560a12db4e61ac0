"""ONNX ``If`` nodes with a compile-time-constant condition are replaced by their taken branch at import.

The models are small and worked by hand: the branches of each ``If`` return results of different
ranks, which ONNX shape inference can only merge into "unknown rank"; with the branch resolved, the
values downstream get the taken branch's types, and the lowering runs them (checked against
onnxruntime).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphir.importers.onnx import import_onnx
from graphir.importers.onnx_fold import resolve_constant_ifs
from graphir.types import DType, TensorType
from graphir.verifier import verify

ort = pytest.importorskip("onnxruntime")

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _vi(name: str, dims, elem=F):
    return helper.make_tensor_value_info(name, elem, dims)


def _rank_model(path, size_length: int, y_dims=None) -> dict[str, np.ndarray]:
    """``r = If(Size(size) == 4)``: then ``Unsqueeze(-x, [0])`` (f32[1,2,3]), else ``x`` (f32[2,3]).

    Then ``y = Unsqueeze(r, -1)``.
    """
    then_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["u"]), helper.make_node("Unsqueeze", ["u", "axes0"], ["t"])],
        "then",
        [],
        [_vi("t", None)],
        initializer=[numpy_helper.from_array(np.array([0], np.int64), "axes0")],
    )
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", None)])
    nodes = [
        helper.make_node("Size", ["size"], ["n"]),
        helper.make_node("Constant", [], ["four"], value_int=4),
        helper.make_node("Equal", ["n", "four"], ["c"]),
        helper.make_node("If", ["c"], ["r"], name="choose", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Constant", [], ["minus1"], value_ints=[-1]),
        helper.make_node("Unsqueeze", ["r", "minus1"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", [2, 3]), _vi("size", [size_length], I64)], [_vi("y", y_dims)])
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal([2, 3]).astype(np.float32), "size": np.arange(size_length, dtype=np.int64)}


def _run_both(path, feeds):
    from graphir.backends.tf import lower

    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    module = import_onnx(path)
    verify(module)
    actual = lower(module)(*(feeds[v.name] for v in module.graph.inputs))
    return module, actual, expected


def test_true_condition_takes_the_then_branch(tmp_path):
    path = tmp_path / "then.onnx"
    feeds = _rank_model(path, 4)
    module, actual, expected = _run_both(path, feeds)
    graph = module.graph
    # By hand: Size([4]) = 4 == 4 -> then: u = -x, r = u[None] : f32[1,2,3]; y = r[..., None] : f32[1,2,3,1].
    assert [n.op for n in graph.nodes] == [
        *("onnx.Size", "onnx.Constant", "onnx.Equal", "onnx.Neg", "onnx.Unsqueeze"),
        *("onnx.Constant", "onnx.Unsqueeze"),
    ]
    assert graph.value("u").type == TensorType(DType.F32, (2, 3))
    assert graph.value("r").type == TensorType(DType.F32, (1, 2, 3))  # the then-branch's result, renamed
    assert graph.value("y").type == TensorType(DType.F32, (1, 2, 3, 1))
    assert [v.name for v in graph.constants] == ["axes0"]  # the branch's initializer moved out
    np.testing.assert_array_equal(expected[0], -feeds["x"][None, :, :, None])
    np.testing.assert_array_equal(actual[0], expected[0])


def test_false_condition_forwards_an_outer_value(tmp_path):
    path = tmp_path / "else.onnx"
    feeds = _rank_model(path, 5)
    module, actual, expected = _run_both(path, feeds)
    graph = module.graph
    # By hand: Size([5]) = 5 != 4 -> else: r = x, a graph input, so an Identity names it; y : f32[2,3,1].
    assert [n.op for n in graph.nodes] == [
        *("onnx.Size", "onnx.Constant", "onnx.Equal", "onnx.Identity", "onnx.Constant", "onnx.Unsqueeze"),
    ]
    assert graph.node("choose_result0").outputs[0].name == "r"
    assert graph.value("y").type == TensorType(DType.F32, (2, 3, 1))
    np.testing.assert_array_equal(actual[0], feeds["x"][:, :, None])
    np.testing.assert_array_equal(actual[0], expected[0])


def test_without_resolution_the_merged_rank_is_unknown(tmp_path):
    """The reason for the rewrite: shape inference alone gives r (and so y) no rank."""
    path = tmp_path / "m.onnx"
    _rank_model(path, 4)
    inferred = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    types = {info.name: info.type for info in inferred.graph.value_info}
    assert not types["r"].tensor_type.HasField("shape")


def test_a_forwarded_computed_value_takes_the_result_name(tmp_path):
    """else: ``e = Identity(h)`` with ``h`` computed outside: ``h`` is renamed to the If's result, no Identity kept.

    The declared output type is more precise than what inference gives ``h`` (as in the expanded
    AffineGrid); an Identity from ``h`` would not verify, the renamed ``Reshape`` result does.
    """
    else_graph = helper.make_graph([helper.make_node("Identity", ["h"], ["e"])], "else", [], [_vi("e", None)])
    then_graph = helper.make_graph([helper.make_node("Neg", ["h"], ["t"])], "then", [], [_vi("t", None)])
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["h"]),
        helper.make_node("If", ["flag"], ["y"], name="choose", then_branch=then_graph, else_branch=else_graph),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", [2, 3]), _vi("shape", [2], I64)],
        [_vi("y", [3, 2])],
        initializer=[numpy_helper.from_array(np.array(False), "flag")],
    )
    path = tmp_path / "fwd.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    module = import_onnx(path)
    verify(module)
    (reshape,) = module.graph.nodes
    assert reshape.op == "onnx.Reshape" and [v.name for v in reshape.outputs] == ["y"]
    assert reshape.outputs[0].type == TensorType(DType.F32, (3, 2))


def test_nested_if_resolved_from_a_constant_the_branch_computes(tmp_path):
    """then: ``k = 2``; ``inner = If(k == two)`` -> Relu, else Neg. Both Ifs go; names defined twice are renamed."""
    inner_then = helper.make_graph([helper.make_node("Relu", ["x"], ["p"])], "it", [], [_vi("p", None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["q"])], "ie", [], [_vi("q", None)])
    then_graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["k"], value_int=2),
            helper.make_node("Equal", ["k", "two"], ["kc"]),
            helper.make_node("If", ["kc"], ["dup"], name="inner", then_branch=inner_then, else_branch=inner_else),
        ],
        "then",
        [],
        [_vi("dup", None)],
    )
    else_graph = helper.make_graph([helper.make_node("Abs", ["x"], ["a"])], "else", [], [_vi("a", None)])
    nodes = [
        helper.make_node("Constant", [], ["two"], value_int=2),
        helper.make_node("If", ["yes"], ["r"], name="outer", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Sigmoid", ["r"], ["k"]),  # 'k' is also defined in the then-branch
        helper.make_node("Add", ["k", "r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [_vi("x", [2, 3])], [_vi("y", [2, 3])], initializer=[numpy_helper.from_array(np.array(True), "yes")]
    )
    path = tmp_path / "nested.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    feeds = {"x": np.random.default_rng(3).standard_normal([2, 3]).astype(np.float32)}
    module, actual, expected = _run_both(path, feeds)
    assert [(n.op, [v.name for v in n.outputs]) for n in module.graph.nodes] == [
        ("onnx.Constant", ["two"]),
        ("onnx.Constant", ["k__1"]),
        ("onnx.Equal", ["kc"]),
        ("onnx.Relu", ["r"]),
        ("onnx.Sigmoid", ["k"]),
        ("onnx.Add", ["y"]),
    ]
    relu = np.maximum(feeds["x"], 0)
    np.testing.assert_allclose(actual[0], 1 / (1 + np.exp(-relu)) + relu, rtol=1e-6)
    np.testing.assert_allclose(actual[0], expected[0], rtol=1e-6)


def test_a_condition_decided_by_data_keeps_the_if(tmp_path):
    """``Size`` of an input with a symbolic dim, or a condition read from an input: not constant."""
    path = tmp_path / "dyn.onnx"
    _rank_model(path, 4)
    model = onnx.load(str(path))
    model.graph.input[1].type.tensor_type.shape.dim[0].dim_param = "n"
    assert resolve_constant_ifs(model, dict) == []
    assert [n.op_type for n in model.graph.node].count("If") == 1
    model.graph.initializer.append(numpy_helper.from_array(np.array(True), "c_default"))
    model.graph.node[3].input[0] = "c_default"
    model.graph.input.append(_vi("c_default", [], TensorProto.BOOL))  # an overridable default: not constant
    assert resolve_constant_ifs(model, dict) == []


@pytest.mark.parametrize("batch", [2, 1])
def test_ops_on_a_value_whose_rank_is_decided_by_data(tmp_path, batch):
    """``Squeeze`` without axes of f32[n,1,3] has rank 2, or 1 when n = 1: Split, Concat, Unsqueeze with
    non-negative axes and MatMul (1-D rules at run time) lower without a static rank (the expanded
    2-D AffineGrid needs this)."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"]),
        helper.make_node("MatMul", ["s", "w"], ["m"]),
        helper.make_node("Unsqueeze", ["m", "axes"], ["u"]),
        helper.make_node("Concat", ["u", "u"], ["c"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", ["n", 1, 3])],
        [_vi("c", None)],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array([0], np.int64), "axes")],
    )
    path = tmp_path / "dyn_rank.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.random.default_rng(4).standard_normal([batch, 1, 3]).astype(np.float32)
    module, actual, expected = _run_both(path, {"x": x})
    assert module.graph.value("s").type.shape is None  # the IR has no rank for it
    by_hand = np.concatenate([(np.squeeze(x) @ w)[None]] * 2, axis=0)  # [2, batch, 4], or [2, 4] when batch = 1
    assert actual[0].shape == expected[0].shape == by_hand.shape
    np.testing.assert_allclose(actual[0], by_hand, rtol=1e-5)


def test_split_with_a_non_negative_axis_needs_no_rank(tmp_path):
    nodes = [
        helper.make_node("Squeeze", ["x"], ["s"]),
        helper.make_node("Split", ["s"], ["a", "b", "c"], axis=1, num_outputs=3),
    ]
    graph = helper.make_graph(nodes, "g", [_vi("x", ["n", 1, 3])], [_vi("a", None), _vi("c", None)])
    path = tmp_path / "split.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    x = np.random.default_rng(5).standard_normal([2, 1, 3]).astype(np.float32)
    _, actual, expected = _run_both(path, {"x": x})
    np.testing.assert_array_equal(actual[0], x[:, 0, 0:1])
    np.testing.assert_array_equal(actual[1], expected[1])


def test_a_renamed_value_is_renamed_inside_the_regions_that_read_it(tmp_path):
    """then: ``k = x + x`` (``k`` is defined outside too), read by an If on a graph input.

    That If stays a region, its branches reading the renamed ``k__1``.
    """
    mul_then = helper.make_graph([helper.make_node("Relu", ["k"], ["p"])], "it", [], [_vi("p", None)])
    mul_else = helper.make_graph([helper.make_node("Identity", ["k"], ["q"])], "ie", [], [_vi("q", None)])
    then_graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "x"], ["k"]),
            helper.make_node("If", ["flag"], ["z"], name="inner", then_branch=mul_then, else_branch=mul_else),
        ],
        "then",
        [],
        [_vi("z", None)],
    )
    else_graph = helper.make_graph([helper.make_node("Abs", ["x"], ["a"])], "else", [], [_vi("a", None)])
    nodes = [
        helper.make_node("If", ["yes"], ["r"], name="outer", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("Neg", ["r"], ["k"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", [2, 3]), _vi("flag", [], TensorProto.BOOL)],
        [_vi("k", [2, 3])],
        initializer=[numpy_helper.from_array(np.array(True), "yes")],
    )
    path = tmp_path / "capture.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = np.random.default_rng(6).standard_normal([2, 3]).astype(np.float32)
    for flag in (True, False):
        module, actual, expected = _run_both(path, {"x": x, "flag": np.array(flag)})
        inner = module.graph.node("inner")
        assert [v.name for v in inner.inputs] == ["flag", "k__1"]  # the If's captured operand, renamed
        np.testing.assert_array_equal(actual[0], -(np.maximum(2 * x, 0) if flag else 2 * x))
        np.testing.assert_array_equal(actual[0], expected[0])
