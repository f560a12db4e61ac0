"""ONNX LSTM, GRU and RNN: type rule, cost and the TensorFlow lowering checked against onnxruntime.

Each case builds a one-node ONNX model with :mod:`onnx.helper` exercising attributes the node suite
leaves out (bidirectional with sequence lengths and initial states, layout 1, clip, peepholes,
``input_forget``, activations with alpha/beta, ``linear_before_reset``, float64), runs it with
onnxruntime and with graphir's lowering, and compares every output to 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphir.importers.onnx import import_onnx
from graphir.ops import estimate_node, type_rule_of
from graphir.verifier import verify

ort = pytest.importorskip("onnxruntime")

SEQ, BATCH, SIZE, HIDDEN = 5, 3, 4, 6
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(
    path: Path, op: str, attrs: dict, *, dirs: int = 1, layout: int = 0, dtype=np.float32, optional=()
) -> dict[str, np.ndarray]:
    """Write a one-node ``op`` model to ``path``; return its feeds (random, seeded)."""
    rng = np.random.default_rng(7)
    g = GATES[op]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    state = [dirs, BATCH, HIDDEN]
    arrays = {
        "X": rng.standard_normal([SEQ, BATCH, SIZE]),
        "W": rng.standard_normal([dirs, g * HIDDEN, SIZE]) * 0.5,
        "R": rng.standard_normal([dirs, g * HIDDEN, HIDDEN]) * 0.5,
        "B": rng.standard_normal([dirs, 2 * g * HIDDEN]) * 0.3,
        "sequence_lens": np.array([SEQ, 2, 4], np.int32),
        "initial_h": rng.standard_normal(state) * 0.5,
        "initial_c": rng.standard_normal(state) * 0.5,
        "P": rng.standard_normal([dirs, 3 * HIDDEN]) * 0.3,
    }
    positions = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c", "P"] if op == "LSTM" else [])
    used = {"X", "W", "R", *optional}
    names = [n if n in used else "" for n in positions]
    while names and not names[-1]:
        names.pop()
    feeds = {n: (a if n == "sequence_lens" else a.astype(dtype)) for n, a in arrays.items() if n in used}
    if layout:  # batch first: X[batch, seq, in], states [batch, dirs, H]
        feeds = {n: a.transpose(1, 0, 2) if n in ("X", "initial_h", "initial_c") else a for n, a in feeds.items()}
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, hidden_size=HIDDEN, layout=layout, **attrs)
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else elem, list(feeds[n].shape))
        for n in names
        if n
    ]
    outs = [helper.make_tensor_value_info(n, elem, None) for n in outputs]
    graph = helper.make_graph([node], "rnn", inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.save_model(model, str(path))
    return feeds


def _reference(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs; a layout-1 model (which onnxruntime refuses) runs as its layout-0 twin."""
    model = onnx.load_model(str(path))
    (node,) = model.graph.node
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if not layout:
        return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    for attr in node.attribute:
        if attr.name == "layout":
            attr.i = 0
    batch_first = ("X", "initial_h", "initial_c")
    for info in model.graph.input:
        if info.name in batch_first:
            dims = info.type.tensor_type.shape.dim
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {n: a.transpose(1, 0, 2) if n in batch_first else a for n, a in feeds.items()})
    y, *states = outputs
    return [y.transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in states]


def _compare(path: Path, feeds: dict[str, np.ndarray]) -> None:
    from graphir.backends.tf import lower

    expected = _reference(path, feeds)
    module = import_onnx(path)
    verify(module)
    lowered = lower(module)
    actual = lowered(*(feeds[v.name] for v in module.graph.inputs))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


ALL = ("B", "sequence_lens", "initial_h", "initial_c", "P")
CASES = [
    ("LSTM", {"direction": "bidirectional"}, 2, 0, ALL),
    ("LSTM", {"direction": "reverse", "clip": 0.7, "input_forget": 1}, 1, 0, ALL),
    ("LSTM", {"direction": "bidirectional", "clip": 1.5}, 2, 1, ALL),
    (
        "LSTM",
        {
            "activations": ["HardSigmoid", "LeakyRelu", "ScaledTanh"],
            "activation_alpha": [0.3, 0.05, 1.2],
            "activation_beta": [0.4, 0.8],
        },
        1,
        0,
        ("B", "sequence_lens"),
    ),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1}, 2, 0, ALL[:3]),
    ("GRU", {"direction": "reverse", "clip": 0.5}, 1, 1, ALL[:3]),
    ("GRU", {"activations": ["Softsign", "Elu"], "activation_alpha": [0.7]}, 1, 0, ("B",)),
    (
        "RNN",
        {"direction": "bidirectional", "activations": ["Relu", "Affine"], "activation_alpha": [0.5]},
        2,
        0,
        ALL[:3],
    ),
    ("RNN", {"activations": ["Softplus"], "clip": 0.9}, 1, 1, ALL[:3]),
]


@pytest.mark.parametrize(("op", "attrs", "dirs", "layout", "optional"), CASES)
def test_lowering_matches_onnxruntime(tmp_path, op, attrs, dirs, layout, optional):
    path = tmp_path / "m.onnx"
    feeds = _model(path, op, attrs, dirs=dirs, layout=layout, optional=optional)
    _compare(path, feeds)


def test_float64_lstm_computes_in_float64(tmp_path):
    """onnxruntime has no float64 LSTM: the float32 twin is the reference, the result stays float64."""
    from graphir.backends.tf import lower

    path32, path64 = tmp_path / "m32.onnx", tmp_path / "m64.onnx"
    feeds = _model(path32, "LSTM", {"direction": "bidirectional"}, dirs=2, optional=ALL[:3])
    feeds64 = _model(path64, "LSTM", {"direction": "bidirectional"}, dirs=2, dtype=np.float64, optional=ALL[:3])
    expected = _reference(path32, feeds)
    module = import_onnx(path64)
    actual = lower(module)(*(feeds64[v.name] for v in module.graph.inputs))
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_type_rule_and_cost(tmp_path):
    path = tmp_path / "m.onnx"
    _model(path, "LSTM", {"direction": "bidirectional"}, dirs=2, optional=ALL)
    module = import_onnx(path)
    (node,) = module.graph.nodes
    rule = type_rule_of("onnx.LSTM")
    assert rule is not None
    assert rule(node, [v.type for v in node.inputs], [v.type for v in node.outputs]) is None
    flops, nbytes, temporary, fallback, _ = estimate_node(node)
    assert not fallback
    step = 2 * BATCH * 4 * HIDDEN * (SIZE + HIDDEN) + 30 * BATCH * HIDDEN  # by hand: products + gate arithmetic
    assert flops == SEQ * 2 * step
    r_bytes = 2 * 4 * HIDDEN * HIDDEN * 4
    assert nbytes >= (SEQ - 1) * r_bytes  # R is reread every step
    assert temporary == SEQ * BATCH * 4 * HIDDEN * 4
    node.params = {**node.params, "direction": "sideways"}
    assert "direction 'sideways'" in rule(node, [], [])
    node.params = {**node.params, "direction": "bidirectional", "activations": ("Sigmoid", "Tanh")}
    assert "2 activations, expected 6" in rule(node, [], [])
    node.params = {**node.params, "activations": ("Sigmoid", "Tanh", "Swish")}
    assert "unknown activation 'Swish'" in rule(node, [], [])


def test_type_rule_names_a_mismatched_weight(tmp_path):
    path = tmp_path / "m.onnx"
    _model(path, "GRU", {}, optional=("B",))
    module = import_onnx(path)
    (node,) = module.graph.nodes
    node.params = {**node.params, "hidden_size": HIDDEN + 1}
    message = type_rule_of("onnx.GRU")(node, [], [])
    assert message is not None and message.startswith("W has type f32[1,18,4], expected shape [1, 21, 4]")
