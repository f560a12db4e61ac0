"""The TF importer reads TensorFlow's inferred output types through its internal API, or the public one.

``tf_convert._inferred_outputs_fast`` wraps each imported op in bare C++ wrappers; where that API
is missing, ``tf.graph_util.import_graph_def`` and full ``Operation`` objects are used instead. Both
must give each output the same dtype and dims (unknown sizes, unknown ranks, several results,
resource handles), hence the same module and the same warning, byte for byte.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")

from graphir.importers import tf_convert  # noqa: E402
from graphir.importers.tf import import_graphdef  # noqa: E402
from graphir.printer import print_module  # noqa: E402
from graphir.types import DType  # noqa: E402


def _graph_def() -> object:
    graph = tf.Graph()
    with graph.as_default():
        anything = tf.compat.v1.placeholder(tf.float32, shape=None, name="anything")  # unknown rank
        rows = tf.compat.v1.placeholder(tf.float32, shape=[None, 6], name="rows")  # unknown size
        tf.identity(anything, name="same")
        tf.split(rows, 3, axis=1, name="thirds")  # three results
        tf.unique(tf.reshape(rows, [-1]), name="uniq")  # two results, int32 and unknown sizes
        handle = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[2, 3], shared_name="v", name="v")
        tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.float32, name="read")
    return graph.as_graph_def()


def _imported(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    module = import_graphdef(_graph_def(), name="m", source="g.pb")
    return print_module(module), capsys.readouterr().err


def test_fast_and_public_shape_reading_agree(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fast_text, fast_err = _imported(capsys)
    calls: list[object] = []
    monkeypatch.setattr(tf_convert, "_inferred_outputs_fast", lambda graph, graph_def: calls.append(graph_def))
    public_text, public_err = _imported(capsys)
    assert calls, "the fallback was not taken"
    assert fast_text == public_text
    assert fast_err == public_err
    assert "2 value(s) have unknown rank after TF shape inference ('anything:0', 'same:0')" in fast_err


def test_the_fast_path_reads_every_output(capsys: pytest.CaptureFixture[str]) -> None:
    found = tf_convert._inferred_outputs_fast(tf.Graph(), _graph_def())
    assert found is not None, "this TensorFlow lacks the internal API the fast path uses"
    assert found["anything"] == [(1, None)]
    assert [dtype for dtype, _ in found["thirds"]] == [1, 1, 1]
    assert {tuple(-1 if d is None else d for d in dims) for _, dims in found["thirds"]} == {(-1, 2)}
    assert [dtype for dtype, _ in found["uniq"]] == [1, 3]  # float32 values, int32 indices
    assert found["v"] == [(20, ())]  # a resource handle is a scalar
    assert found["read"] == [(1, (2, 3))]
    module = import_graphdef(_graph_def(), name="m", source="g.pb")
    types = {v.name: v.type for n in module.graph.nodes for v in n.outputs}
    assert types["rows"].shape == (None, 6) and types["same"].shape is None
    assert types["uniq#1"].dtype is DType.I32 and types["thirds#2"].shape == (None, 2)


def test_wrappers_that_differ_fall_back_to_the_public_api(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tensorflow.python.client import pywrap_tf_session

    expected, _ = _imported(capsys)

    def other_signature(*args: object) -> object:
        raise TypeError("PyOperation takes other arguments in this TensorFlow")

    monkeypatch.setattr(pywrap_tf_session, "PyOperation", other_signature)
    assert tf_convert._inferred_outputs_fast(tf.Graph(), _graph_def()) is None
    text, _ = _imported(capsys)
    assert text == expected
