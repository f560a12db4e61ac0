"""The op registry (graphir.ops): facet resolution, registration rules, type rules, docs/ops.md freshness."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import f32

from devtools import opdoc
from graphir.errors import VerifyError
from graphir.ir import Graph, Module
from graphir.ops import (
    OPS,
    cost_of,
    define,
    estimate_node,
    fallback_count,
    is_variable,
    lowering_of,
    op_def,
    owns_value,
    split_of,
    static_shape,
)
from graphir.ops.registry import OpDef
from graphir.types import DType, TensorType
from graphir.verifier import verify

REPO = Path(__file__).resolve().parents[2]


def test_cost_resolves_qualified_name_before_bare_type():
    # TF's Sum reduces, ONNX's Sum adds its operands elementwise: different estimators.
    assert cost_of("tf.Sum") is OPS["tf.Sum"].cost
    assert cost_of("onnx.Sum") is OPS["Sum"].cost
    assert cost_of("tf.Sum") is not cost_of("onnx.Sum")
    # A vendor domain falls back to the bare op type.
    assert cost_of("onnx.com.microsoft.FusedConv") is OPS["FusedConv"].cost
    assert cost_of("onnx.NoSuchOp") is None


def test_split_lowering_and_type_rules_are_dialect_specific():
    assert split_of("onnx.Relu") is not None and split_of("tf.Relu") is not None
    assert split_of("onnx.Relu").plan is not split_of("tf.Relu").plan  # NCHW vs NHWC channel axis
    assert split_of("onnx.com.microsoft.Relu") is None
    assert lowering_of("onnx.Conv") is not None and lowering_of("tf.Conv2D") is None
    assert split_of("onnx.Conv").dims == ("batch", "channel")
    assert split_of("onnx.BatchNormalization").dims == ("batch",)
    assert op_def("onnx.Conv").name == "onnx.Conv" and op_def("tf.Conv2DBackpropInput").name == "Conv2DBackpropInput"


def test_define_refuses_to_overwrite_a_facet():
    name = "test_ops.Probe"
    try:
        define(name, cost=lambda *a: (1.0, 2.0, 0))
        with pytest.raises(ValueError, match="already has a cost"):
            define(name, cost=lambda *a: (3.0, 4.0, 0))
        with pytest.raises(ValueError, match="unknown op facet"):
            define(name, flops=None)
        replaced = define(name, replace=True, cost=lambda *a: (5.0, 6.0, 0))
        assert isinstance(replaced, OpDef) and replaced.cost(None, [], [], [], []) == (5.0, 6.0, 0)
    finally:
        OPS.pop(name, None)


def test_estimate_node_uses_the_cost_facet_and_its_fallback():
    graph = Graph("g")
    a = graph.add_input("a", f32(2, 3))
    b = graph.add_input("b", f32(3, 4))
    matmul = graph.add_node("onnx.MatMul", [a, b], [f32(2, 4)])
    flops, nbytes, temporary, fallback, symbolic = estimate_node(matmul)
    assert (flops, nbytes, temporary, fallback, symbolic) == (2.0 * 8 * 3, 4.0 * (6 + 12 + 8), 0, False, False)
    unknown = graph.add_node("onnx.NoSuchOp", [a], [f32(2, 3)])
    assert estimate_node(unknown) == (6.0, 48.0, 0, True, False)


def test_fallback_count_agrees_with_estimate_node_per_node():
    # By hand: softmax on a known shape has an estimator (no fallback, twice); softmax on an
    # unknown-rank input falls back (its estimator needs the input shape), twice; an op without an
    # estimator falls back once; MatMul with params has an estimate (no fallback). Fallbacks: 3.
    graph = Graph("g")
    known = graph.add_input("a", f32(2, 3))
    unknown = graph.add_input("u", TensorType(DType.F32, None))
    for _ in range(2):
        graph.add_node("onnx.Softmax", [known], [f32(2, 3)])
        graph.add_node("onnx.Softmax", [unknown], [f32(2, 3)])
    graph.add_node("onnx.NoSuchOp", [known], [f32(2, 3)])
    b = graph.add_input("b", f32(3, 4))
    graph.add_node("onnx.MatMul", [known, b], [f32(2, 4)], params={"note": 1})
    nodes = graph.index().nodes
    assert fallback_count(nodes) == 3 == sum(estimate_node(node)[3] for node in nodes)


def test_static_facts_of_integer_symbolic_and_unknown_shapes():
    # By hand: f32[2,3] is its own static shape (the same tuple, 24 bytes); f32[2,batch,3] counts
    # the symbol as 1 (2*1*3*4 = 24 bytes) and says a symbol was replaced; an unknown dim or rank
    # has no static shape and 0 bytes. Each agrees with static_shape.
    from graphir.ops.work import _static_facts

    plain = f32(2, 3)
    assert _static_facts(plain) == ((2, 3), False, 24) and _static_facts(plain)[0] is plain.shape
    symbolic = TensorType(DType.F32, (2, "batch", 3))
    assert _static_facts(symbolic) == ((2, 1, 3), True, 24)
    for unknown in (TensorType(DType.F32, (2, None)), TensorType(DType.F32, None)):
        assert _static_facts(unknown) == (None, False, 0)
    for type_ in (plain, symbolic, TensorType(DType.F32, (2, None))):
        assert _static_facts(type_)[:2] == static_shape(type_)


def test_never_none_estimators_answer_on_unknown_shapes():
    # fallback_count skips the estimators of _NEVER_NONE (a node using one never falls back):
    # each must give an estimate even where a shape-reading estimator gives up (unknown shapes,
    # no inputs, several inputs).
    from graphir.ops.work import _NEVER_NONE

    graph = Graph("g")
    a = graph.add_input("a", f32(2, 3))
    node = graph.add_node("onnx.Relu", [a], [f32(2, 3)])
    assert len(_NEVER_NONE) >= 7  # _zero, _copy, _gather, _slice, _scatter and the two factories' products
    for estimator in _NEVER_NONE:
        for ins, outs in (([None], [None]), ([], [(2, 3)]), ([(2, 3), None, (4,)], [None, (1,)])):
            ib, ob = [0 if s is None else 24 for s in ins], [0 if s is None else 24 for s in outs]
            assert estimator(node, ins, outs, ib, ob) is not None


def test_fallback_count_skips_never_none_estimators_with_the_same_answer():
    # Relu (elementwise), Reshape (metadata) and Concat (copy) have never-None estimators; on an
    # unknown-rank input they still do not fall back. ReduceSum on that input does (its estimator
    # needs the input shape), NoSuchOp has no estimator: 2 fallbacks by hand.
    graph = Graph("g")
    unknown = graph.add_input("u", TensorType(DType.F32, None))
    for op in ("onnx.Relu", "onnx.Reshape", "onnx.Concat", "onnx.ReduceSum", "onnx.NoSuchOp"):
        graph.add_node(op, [unknown], [TensorType(DType.F32, None)])
    nodes = graph.index().nodes
    assert fallback_count(nodes) == 2 == sum(estimate_node(node)[3] for node in nodes)


def test_memory_facts():
    assert is_variable("tf.VarHandleOp") and is_variable("VariableV2") and not is_variable("onnx.Constant")
    assert owns_value("onnx.Constant") and owns_value("tf.Const") and not owns_value("tf.Identity")


def test_verifier_runs_the_registry_type_rules():
    module = Module("m", Graph("g"))
    graph = module.graph
    a = graph.add_input("a", f32(2, 3))
    b = graph.add_input("b", f32(4, 5))
    graph.add_node("onnx.MatMul", [a, b], [f32(2, 5)], name="mm")
    with pytest.raises(VerifyError, match="'onnx.MatMul' op 'mm' operand shapes .* mismatched inner dimensions"):
        verify(module)


def test_verifier_checks_split_concat_through_the_registry():
    module = Module("m", Graph("g"))
    graph = module.graph
    x = graph.add_input("x", f32(4, 3))
    graph.add_node("graphir.split", [x], [f32(1, 3), f32(2, 3)], name="s", params={"axis": 0})
    with pytest.raises(VerifyError, match="parts add up to 3 along axis 0, expected 4"):
        verify(module)


def test_every_facet_is_documented_and_docs_ops_md_is_fresh():
    assert not opdoc.stale(REPO), f"docs/ops.md is out of date: run `{opdoc.WRITE_COMMAND}`"


def test_registry_does_not_import_tensorflow():
    code = (
        "import sys, graphir.ops, graphir.backends.tf.onnx_ops as t; "
        "assert 'tensorflow' not in sys.modules; print(len(t.ONNX_OPS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == sum(1 for d in OPS.values() if d.lower is not None) > 60
