"""Dimension equalities of a ``tf.Graph`` that TensorFlow's forward shape inference does not use.

TensorFlow infers an op's output shape from its inputs only. In a training step whose variables lost
their shapes (:mod:`graphir.importers.tf_resources`) a forward activation may stay unknown while its
gradient, or a tensor the graph ties it to, is known: the gradient code wrote static shapes into
constants while tracing (``Tile`` multiples of a mean's gradient), ``ReluGrad(dy, features)`` ties
a forward activation to its gradient, a ``ConcatV2`` ties its inputs' other dims together. A VALID
stride-1 convolution's kernel size is ``in - out + 1``, so knowing both sides of it fixes the kernel.

:class:`DimSolver` collects such equalities between the dims of a graph's tensors in a union-find
with offsets (``value(a) = value(b) + delta``, for padding and VALID windows of known size) and
answers :meth:`DimSolver.shape`, a tensor's shape with every dim the equalities fix. Every rule is
exact for the op's semantics; no rule assumes a broadcast did not happen (an elementwise output dim
equals an operand's only when the other operand is absent or known to be 1 on that axis).
"""

from __future__ import annotations

from typing import Any

PartialShape = tuple[int | None, ...] | None

_SAME_SHAPE = frozenset(
    {
        "Abs",
        "AddN",
        "Cast",
        "EluGrad",
        "Exp",
        "Identity",
        "LeakyRelu",
        "LeakyReluGrad",
        "Log",
        "Neg",
        "Reciprocal",
        "Relu",
        "Relu6",
        "Relu6Grad",
        "ReluGrad",
        "Rsqrt",
        "RsqrtGrad",
        "Selu",
        "SeluGrad",
        "Sigmoid",
        "SigmoidGrad",
        "Sign",
        "Softplus",
        "SoftplusGrad",
        "Sqrt",
        "SqrtGrad",
        "Square",
        "StopGradient",
        "Tanh",
        "TanhGrad",
    }
)
"""Ops whose data inputs and outputs all have one shape (no broadcasting)."""

BROADCASTING_BINARY = frozenset(
    {
        "Add",
        "AddV2",
        "BiasAdd",
        "Div",
        "DivNoNan",
        "FloorDiv",
        "Maximum",
        "Minimum",
        "Mul",
        "MulNoNan",
        "Pow",
        "RealDiv",
        "SquaredDifference",
        "Sub",
        "TruncateDiv",
    }
)
"""Binary ops that broadcast their two inputs numpy-style (also the importer's resource recovery's list)."""

_WINDOWED = frozenset({"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D"})
_SHAPE_SOURCES = {"Shape": None, "ShapeN": None}
_SHAPED_BY_INPUT = {
    "Reshape": 1,
    "Slice": 2,
    "Conv2DBackpropInput": 0,
    "Conv3DBackpropInputV2": 0,
    "DepthwiseConv2dNativeBackpropInput": 0,
    "AvgPoolGrad": 0,
    "BroadcastTo": 1,
    "Fill": 0,
}
"""Ops whose output shape is the value of one input: when that input is ``Shape(t)``, the output has ``t``'s dims."""


class DimSolver:
    """Union-find over ``(tensor name, axis)`` with offsets and known values, built from a ``tf.Graph``."""

    def __init__(self, graph: Any):
        self._parent: dict[tuple[str, int], tuple[tuple[str, int], int]] = {}
        self._known: dict[tuple[str, int], int] = {}
        self._tensors: dict[str, Any] = {}
        self.conflicts = 0
        for op in graph.get_operations():
            for tensor in op.outputs:
                self._add(tensor)
        for op in graph.get_operations():
            self._relate(op)

    # ------------------------------------------------------------------------------ queries

    def shape(self, tensor: Any) -> PartialShape:
        """``tensor``'s shape with every dim the collected equalities determine."""
        dims = _dims(tensor.shape)
        if dims is None:
            return None
        return tuple(self.value(tensor, axis) for axis in range(len(dims)))

    def value(self, tensor: Any, axis: int) -> int | None:
        """The size of ``tensor``'s dim ``axis`` when known or determined; else ``None``."""
        key = (tensor.name, axis)
        if key not in self._parent:
            return None
        root, offset = self._find(key)
        known = self._known.get(root)
        return None if known is None else known + offset

    def difference(self, a: Any, a_axis: int, b: Any, b_axis: int) -> int | None:
        """``size(a[a_axis]) - size(b[b_axis])`` when the equalities fix it (both may be unknown)."""
        ka, kb = (a.name, a_axis), (b.name, b_axis)
        if ka not in self._parent or kb not in self._parent:
            return None
        ra, oa = self._find(ka)
        rb, ob = self._find(kb)
        if ra == rb:
            return oa - ob
        va, vb = self._known.get(ra), self._known.get(rb)
        return None if va is None or vb is None else (va + oa) - (vb + ob)

    # ------------------------------------------------------------------------------ union-find

    def _add(self, tensor: Any) -> None:
        dims = _dims(tensor.shape)
        if dims is None:
            return
        self._tensors[tensor.name] = tensor
        for axis, size in enumerate(dims):
            key = (tensor.name, axis)
            self._parent[key] = (key, 0)
            if size is not None:
                self._known[key] = size

    def _find(self, key: tuple[str, int]) -> tuple[tuple[str, int], int]:
        path: list[tuple[str, int]] = []
        node = key
        while True:
            parent, _ = self._parent[node]
            if parent == node:
                break
            path.append(node)
            node = parent
        root = node
        # Path compression: each node's offset to the root is the sum along its path.
        total = 0
        for node in reversed(path):
            parent, offset = self._parent[node]
            total += offset
            self._parent[node] = (root, total)
        return root, self._parent[key][1] if key != root else 0

    def _union(self, a: Any, a_axis: int, b: Any, b_axis: int, delta: int = 0) -> None:
        """Record ``size(a[a_axis]) = size(b[b_axis]) + delta``."""
        ka, kb = (a.name, a_axis), (b.name, b_axis)
        if ka not in self._parent or kb not in self._parent:
            return
        ra, oa = self._find(ka)
        rb, ob = self._find(kb)
        link = ob + delta - oa  # value(ra) = value(rb) + link
        if ra == rb:
            if link:
                self.conflicts += 1
            return
        va, vb = self._known.get(ra), self._known.get(rb)
        if va is not None and vb is not None and va != vb + link:
            self.conflicts += 1  # contradicting evidence: keep the classes apart
            return
        self._parent[ra] = (rb, link)
        if va is not None and vb is None:
            self._known[rb] = va - link
        self._known.pop(ra, None)

    def _union_all(self, a: Any, b: Any) -> None:
        da, db = _dims(a.shape), _dims(b.shape)
        if da is None or db is None or len(da) != len(db):
            return
        for axis in range(len(da)):
            self._union(a, axis, b, axis)

    # ------------------------------------------------------------------------------ op rules

    def _relate(self, op: Any) -> None:
        kind = op.type
        if kind in _SAME_SHAPE:
            for tensor in op.inputs:
                self._union_all(op.outputs[0], tensor)
        elif kind in BROADCASTING_BINARY and len(op.inputs) == 2:
            self._broadcast(op)
        elif kind == "ConcatV2":
            self._concat(op)
        elif kind in _WINDOWED:
            self._window(op)
        elif kind in ("Pad", "PadV2", "MirrorPad"):
            self._pad(op)
        elif kind in ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"):
            self._union_all(op.outputs[0], op.inputs[0])
        elif kind.startswith("FusedBatchNormGrad"):
            self._union_all(op.outputs[0], op.inputs[0])
            self._union_all(op.outputs[0], op.inputs[1])
        elif kind == "MaxPoolGrad":
            self._union_all(op.outputs[0], op.inputs[0])
            self._union_all(op.inputs[2], op.inputs[1])
        elif kind in ("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter"):
            self._shaped_by(op, 1)
        elif kind == "MatMul":
            self._matmul(op)
        if kind in _SHAPED_BY_INPUT:
            self._shaped_by(op, _SHAPED_BY_INPUT[kind])

    def _broadcast(self, op: Any) -> None:
        out = op.outputs[0]
        shapes = [_dims(t.shape) for t in op.inputs]
        rank = _dims(out.shape)
        if rank is None or any(s is None for s in shapes):
            return
        for k, tensor in enumerate(op.inputs):
            mine, other = shapes[k], shapes[1 - k]
            assert mine is not None and other is not None
            for back in range(1, len(mine) + 1):
                other_size = other[-back] if back <= len(other) else 1
                if other_size == 1 and len(rank) >= back:  # out = this operand exactly on this axis
                    self._union(out, len(rank) - back, tensor, len(mine) - back)

    def _concat(self, op: Any) -> None:
        axis = _static(op.inputs[-1])
        out = op.outputs[0]
        dims = _dims(out.shape)
        if axis is None or dims is None:
            return
        axis = int(axis) % len(dims)
        for tensor in op.inputs[:-1]:
            other = _dims(tensor.shape)
            if other is None or len(other) != len(dims):
                continue
            for k in range(len(dims)):
                if k != axis:
                    self._union(out, k, tensor, k)

    def _window(self, op: Any) -> None:
        """Batch dims are equal; a stride-1 window keeps SAME sizes and shrinks VALID ones by a known kernel."""
        x, y = op.inputs[0], op.outputs[0]
        dx, dy = _dims(x.shape), _dims(y.shape)
        if dx is None or dy is None or len(dx) != len(dy):
            return
        channels_first = _attr(op, "data_format", b"NHWC").startswith(b"NC")
        spatial = range(2, len(dx)) if channels_first else range(1, len(dx) - 1)
        self._union(y, 0, x, 0)
        strides = list(_attr(op, "strides", [1] * len(dx)))
        dilations = list(_attr(op, "dilations", [1] * len(dx)))
        padding = _attr(op, "padding", b"")
        if op.type.startswith(("MaxPool", "AvgPool")):
            window: list[int | None] = list(_attr(op, "ksize", [1] * len(dx)))
        else:
            kernel = _dims(op.inputs[1].shape)
            first = 0 if kernel is None else len(kernel) - 2 - len(spatial)
            window = [None] * len(dx)
            if kernel is not None and first == 0:
                for n, axis in enumerate(spatial):
                    window[axis] = kernel[n]
        for axis in spatial:
            if strides[axis] != 1:
                continue
            if padding == b"SAME":
                self._union(y, axis, x, axis)
            elif padding == b"VALID" and (size := window[axis]) is not None:
                self._union(y, axis, x, axis, -((size - 1) * dilations[axis]))

    def _pad(self, op: Any) -> None:
        paddings = _static(op.inputs[1])
        x, y = op.inputs[0], op.outputs[0]
        dx = _dims(x.shape)
        if paddings is None or dx is None or len(paddings) != len(dx):
            return
        for axis, (before, after) in enumerate(paddings.tolist()):
            self._union(y, axis, x, axis, int(before) + int(after))

    def _matmul(self, op: Any) -> None:
        a, b, out = op.inputs[0], op.inputs[1], op.outputs[0]
        ta, tb = bool(_attr(op, "transpose_a", False)), bool(_attr(op, "transpose_b", False))
        self._union(out, 0, a, 1 if ta else 0)
        self._union(out, 1, b, 0 if tb else 1)
        self._union(a, 0 if ta else 1, b, 1 if tb else 0)

    def _shaped_by(self, op: Any, index: int) -> None:
        """The output has the dims of ``t`` when input ``index`` is ``Shape(t)`` / ``ShapeN(...)[k]``."""
        if index >= len(op.inputs):
            return
        shape_tensor = op.inputs[index]
        source = shape_tensor.op
        if source.type not in _SHAPE_SOURCES:
            return
        self._union_all(op.outputs[0], source.inputs[shape_tensor.value_index])


def _dims(tf_shape: Any) -> PartialShape:
    return None if tf_shape.rank is None else tuple(tf_shape.as_list())


def _attr(op: Any, name: str, default: Any) -> Any:
    try:
        return op.get_attr(name)
    except ValueError:
        return default


def _static(tensor: Any) -> Any:
    """The value of a ``Const`` input (through ``Identity``), else ``None``."""
    op = tensor.op
    while op.type == "Identity":
        op = op.inputs[0].op
    if op.type != "Const":
        return None
    import tensorflow as tf

    return tf.make_ndarray(op.get_attr("value"))
