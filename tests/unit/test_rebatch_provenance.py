"""Re-batching by provenance: a dimension carries the batch when it derives from the batch inputs.

Golden cases worked by hand, each with a size that equals the batch by coincidence (the zoo CNNs'
refusals before: resnet50's input ``Pad``, inception_v3's concat gradient ``Slice`` with
``ConcatOffset`` begins, nasnet's ``Cropping2D`` gradient ``StridedSliceGrad``). Each graph is
re-batched from 4 to 2; the expected shapes and constants are written out in full.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import tf_const, tf_tensor

from graphir.errors import PassError
from graphir.ir import Graph, Module, Value
from graphir.passes.transform.rebatch import rebatch
from graphir.types import DType
from graphir.verifier import verify

I32 = DType.I32


def _const(graph: Graph, name: str, values: object, dtype: type = np.int32) -> Value:
    return tf_const(graph, name, np.asarray(values, dtype)).outputs[0]


def _value(module: Module, name: str) -> list:
    return module.graph.node(name).params["value"].numpy().tolist()  # type: ignore[union-attr]


def _shape(module: Module, name: str) -> tuple:
    return tuple(module.graph.value(name).type.shape or ())


def _images(graph: Graph, *shape: int) -> Value:
    return graph.add_node("tf.Placeholder", [], [tf_tensor(*shape)], name="x", params={"shape": shape}).outputs[0]


def _padded(paddings: list[list[int]], padded: tuple[int, ...]) -> Module:
    """``x [4, 5, 5, 3]`` padded by a ``[4, 2]`` constant (its 4 rows: the batch, by coincidence), summed per sample."""
    g = Graph("main")
    x = _images(g, 4, 5, 5, 3)
    pad = g.add_node("tf.Pad", [x, _const(g, "paddings", paddings)], [tf_tensor(*padded)], name="pad")
    total = g.add_node(
        "tf.Sum", [pad.outputs[0], _const(g, "axes", [1, 2, 3])], [tf_tensor(padded[0])], name="per_sample"
    )
    g.set_outputs([total.outputs[0]])
    return Module("padded", g)


def test_pad_whose_paddings_have_the_batchs_size():
    """Before: ``dimension 0 (size 4) of '%pad' (tf.Pad) might or might not be the batch`` (paddings unread)."""
    paddings = [[0, 0], [1, 1], [1, 1], [0, 0]]
    got = rebatch(_padded(paddings, (4, 7, 7, 3)), 2)
    verify(got)
    assert _shape(got, "x") == (2, 5, 5, 3)
    assert _shape(got, "pad") == (2, 7, 7, 3)  # padded spatially only: the batch axis passes through
    assert _shape(got, "per_sample") == (2,)
    assert _shape(got, "paddings") == (4, 2) and _value(got, "paddings") == paddings  # a rank, not the batch
    assert _value(got, "axes") == [1, 2, 3]


def test_padding_the_batch_axis_is_refused_naming_the_pad():
    with pytest.raises(PassError, match="node 'pad' \\(tf.Pad\\).*disagree on where the batch"):
        rebatch(_padded([[1, 1], [0, 0], [0, 0], [0, 0]], (6, 5, 5, 3)), 2)


def _cropping_gradient(end: list[int], masks: int) -> Module:
    """``StridedSliceGrad`` of ``x[:, 1:4, 1:4, :]`` on ``[4, 5, 5, 4]`` (Keras ``Cropping2D((1, 1))``'s gradient).

    The channels are 4, the batch's size, by coincidence; ``masks`` sets begin and end masks on axes 0 and 3.
    """
    g = Graph("main")
    dy = _images(g, 4, 3, 3, 4)
    grad = g.add_node(
        "tf.StridedSliceGrad",
        [
            _const(g, "grad/shape", [4, 5, 5, 4]),
            _const(g, "grad/begin", [0, 1, 1, 0]),
            _const(g, "grad/end", end),
            _const(g, "grad/strides", [1, 1, 1, 1]),
            dy,
        ],
        [tf_tensor(4, 5, 5, 4)],
        name="grad",
        params={"begin_mask": masks, "end_mask": masks, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0},
    )
    g.set_outputs([grad.outputs[0]])
    return Module("crop", g)


def test_strided_slice_grad():
    """Before: ``node 'grad' (tf.StridedSliceGrad) has no batch rule``."""
    got = rebatch(_cropping_gradient([0, 4, 4, 0], masks=0b1001), 2)
    verify(got)
    assert _shape(got, "grad") == (2, 5, 5, 4)
    assert _value(got, "grad/shape") == [2, 5, 5, 4]  # the batch element only: the channels' 4 is not the batch
    assert _value(got, "grad/begin") == [0, 1, 1, 0]
    assert _value(got, "grad/end") == [0, 4, 4, 0]  # masked ends are not read

    # Unmasked, the end of the whole batch axis is the batch, the end of the whole channel axis is not.
    got = rebatch(_cropping_gradient([4, 4, 4, 4], masks=0), 2)
    assert _value(got, "grad/end") == [2, 4, 4, 4]
    assert _value(got, "grad/shape") == [2, 5, 5, 4]


def test_strided_slice_grad_cutting_the_batch_is_refused():
    g = Graph("main")
    dy = _images(g, 4, 3)
    g.add_node(
        "tf.StridedSliceGrad",
        [_const(g, "s", [8, 3]), _const(g, "b", [0, 0]), _const(g, "e", [4, 3]), _const(g, "t", [1, 1]), dy],
        [tf_tensor(8, 3)],
        name="scatter",
    )  # dy is the first half of an [8, 3]: the batch would be part of an axis
    with pytest.raises(PassError, match="node 'scatter' \\(tf.StridedSliceGrad\\)"):
        rebatch(Module("m", g), 2)


def test_slice_of_a_weight_whose_size_is_the_batch():
    """``Slice(table [8, 6], [4, 0], [4, 6])``: 4 rows, the batch's count, that come from a weight."""
    g = Graph("main")
    x = _images(g, 4, 6)
    table = _const(g, "table", np.arange(48).reshape(8, 6), np.float32)
    rows = g.add_node(
        "tf.Slice",
        [table, _const(g, "rows/begin", [4, 0]), _const(g, "rows/size", [4, 6])],
        [tf_tensor(4, 6)],
        name="rows",
    )
    scores = g.add_node(
        "tf.MatMul", [x, rows.outputs[0]], [tf_tensor(4, 4)], name="scores", params={"transpose_b": True}
    )
    g.set_outputs([scores.outputs[0]])
    got = rebatch(Module("m", g), 2)
    verify(got)
    assert _shape(got, "scores") == (2, 4)  # rows of x: the batch; columns: the table's rows
    assert _shape(got, "rows") == (4, 6)
    assert _value(got, "rows/size") == [4, 6] and _value(got, "rows/begin") == [4, 0]
    assert _shape(got, "table") == (8, 6)


def _concat_gradient() -> Module:
    """ConcatV2's gradient along axis 2 of two ``[4, 2, 4]`` parts: ``Slice(dy, ConcatOffset(...)[i], shape_i)``.

    The second offset is ``[0, 0, 4]``: 4, the batch's size, by coincidence (it is the first part's width).
    """
    g = Graph("main")
    dy = _images(g, 4, 2, 8)
    shapes = [_const(g, f"shape{i}", [4, 2, 4]) for i in range(2)]
    offsets = g.add_node(
        "tf.ConcatOffset",
        [_const(g, "axis", 2), *shapes],
        [tf_tensor(3, dtype=I32), tf_tensor(3, dtype=I32)],
        name="offsets",
        params={"N": 2},
    )
    parts = [
        g.add_node("tf.Slice", [dy, offsets.outputs[i], shapes[i]], [tf_tensor(4, 2, 4)], name=f"part{i}")
        for i in range(2)
    ]
    g.set_outputs([p.outputs[0] for p in parts])
    return Module("concat_grad", g)


def test_concat_gradient_slices_begin_at_computed_offsets():
    """Before: ``dimension 0 (size 4) of '%part0' (tf.Slice) might or might not be the batch`` (begin unknown)."""
    got = rebatch(_concat_gradient(), 2)
    verify(got)
    assert _shape(got, "part0") == _shape(got, "part1") == (2, 2, 4)
    assert _value(got, "shape0") == _value(got, "shape1") == [2, 2, 4]  # the batch element only
    assert _value(got, "axis") == 2


def test_a_constant_the_batch_does_not_reach_keeps_its_shape():
    """A ``[4, 6]`` Fill of zeros that meets no batch-carrying tensor: 4 is not the batch (nothing derives it)."""
    g = Graph("main")
    x = _images(g, 4, 6)
    lonely = g.add_node(
        "tf.Fill", [_const(g, "d", [4, 6]), _const(g, "v", 0.0, np.float32)], [tf_tensor(4, 6)], name="lonely"
    )
    doubled = g.add_node("tf.AddV2", [x, x], [tf_tensor(4, 6)], name="doubled")
    g.set_outputs([doubled.outputs[0], lonely.outputs[0]])
    got = rebatch(Module("m", g), 2)
    assert _shape(got, "doubled") == (2, 6)
    assert _shape(got, "lonely") == (4, 6) and _value(got, "d") == [4, 6]

    # The same Fill added to x: its dims now derive from the batch (both ways along the edge).
    g = Graph("main")
    x = _images(g, 4, 6)
    zeros = g.add_node(
        "tf.Fill", [_const(g, "d", [4, 6]), _const(g, "v", 0.0, np.float32)], [tf_tensor(4, 6)], name="zeros"
    )
    total = g.add_node("tf.AddV2", [x, zeros.outputs[0]], [tf_tensor(4, 6)], name="total")
    g.set_outputs([total.outputs[0]])
    got = rebatch(Module("m", g), 2)
    assert _shape(got, "zeros") == (2, 6) and _value(got, "d") == [2, 6]


def test_a_node_that_cannot_tell_is_refused_naming_it():
    """Paddings computed at run time (``Abs`` is not evaluated): the Pad cannot say where the batch goes."""
    g = Graph("main")
    x = _images(g, 4, 6)
    computed = g.add_node(
        "tf.Abs", [_const(g, "p", [[0, 0], [1, 1]])], [tf_tensor(2, 2, dtype=I32)], name="p/abs"
    ).outputs[0]
    g.add_node("tf.Pad", [x, computed], [tf_tensor(4, 8)], name="pad")
    with pytest.raises(PassError, match="node 'pad' \\(tf.Pad\\) does not tell where the batch 4 goes \\(its paddings"):
        rebatch(Module("m", g), 2)


def test_mirror_pad_grad_folds_the_padding_back():
    """``MirrorPadGrad([4, 7, 7, 3], paddings) -> [4, 5, 5, 3]``: the Pad rule, operand and result swapped."""
    g = Graph("main")
    dy = _images(g, 4, 7, 7, 3)
    paddings = [[0, 0], [1, 1], [1, 1], [0, 0]]
    g.add_node(
        "tf.MirrorPadGrad",
        [dy, _const(g, "paddings", paddings)],
        [tf_tensor(4, 5, 5, 3)],
        name="fold",
        params={"mode": "REFLECT"},
    )
    got = rebatch(Module("m", g), 2)
    assert _shape(got, "fold") == (2, 5, 5, 3) and _value(got, "paddings") == paddings
