"""Analytical cost model: FLOPs, bytes moved and memory per op, from shapes; roofline time per device.

**Work per op.** For each node, an estimator chosen by its bare op type (the text after the last
``.``: ``onnx.Conv`` -> ``Conv``, ``tf.Conv2DBackpropInput`` -> ``Conv2DBackpropInput``) computes

* ``flops``: floating-point operations, counting a multiply-add as 2 (convolution:
  ``2 · |out| · Cin/g · prod(kernel)``; matrix product: ``2 · |out| · K``; pooling: ``|out| · prod(kernel)``;
  elementwise ops a small per-element constant, e.g. 5 for softmax, 4 for GELU's erf);
* ``bytes``: bytes of DRAM traffic, read and written once (inputs + outputs), except ops that
  touch only part of an input (gathers and slices read what they return; optimizers read and
  write their slots; reshape-like ops are metadata changes and move nothing);
* ``temporary``: scratch memory where known (the im2col buffer of a convolution on one image,
  an upper bound for CPU and cuDNN's implicit-GEMM kernels).

Symbolic dimensions count as 1 (reported in the pass statistics). An op type without an
estimator, or one whose estimator needs a shape that is unknown, falls back to a bytes-only
estimate: ``bytes = inputs + outputs`` and ``flops = |outputs|``; the profile pass counts and
lists these (``fallback-ops``), so a missing estimator never passes silently as zero.

**Time** (roofline, Williams et al. 2009; the "operational intensity" estimate Moirai §III-C
cites) on a device of peak ``P`` FLOP/s, memory bandwidth ``B`` bytes/s and per-kernel launch
overhead ``L``::

    t = max(flops / P, bytes / B) + L

It is computed with numpy for all nodes at once, per device *kind*, so heterogeneous clusters
get one time per kind (``Cost({kind: seconds})``). Celeritas §4.2 and Pesto §3.1 measure times
instead (``profile{mode=onnxruntime}``); the roofline is the estimate available without hardware.

**Memory** (:class:`~graphir.annotations.Mem`):

* ``persistent``: bytes that live for the whole run. (1) Graph constants (weights) feeding the
  op: a constant used by several ops (shared or tied weights) is attributed **once**, to its
  first user in the graph's topological order (the array view's numbering), so the sum over
  nodes equals the model's parameter bytes; a placer that splits the users of a shared weight
  must account for the copy itself. (2) Ops that own their value: ONNX ``Constant``, TF ``Const``
  (their output bytes) and TF variables (``VarHandleOp``, ``VariableV2``, ``Variable``: the size
  given by their ``shape``/``dtype`` params). Optimizer slots (Adam's ``m`` and ``v``) are
  variables of their own and are counted this way.
* ``activation``: bytes of the op's outputs (zero for ops whose outputs are persistent).
  **Lifetime semantics** (used by the simulator's peak memory): an activation is allocated when
  its producer starts and freed when its *last consumer* finishes (or at the end of the step for
  graph outputs). In a training graph the forward activations are read by their backward (gradient)
  ops, so they naturally live until their last backward consumer; nothing beyond the use lists is
  needed to express that.
* ``temporary``: scratch bytes needed only while the op runs (see above).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from graphir.attributes import DenseTensor
from graphir.types import DType, TensorType

if TYPE_CHECKING:
    from graphir.cluster import Cluster, Device
    from graphir.ir import Graph, Node

Shape = tuple[int, ...]
# An estimator gets the node, the input and output shapes (None: unknown) and byte sizes and
# returns (flops, bytes, temporary), or None when a shape it needs is unknown.
Estimate = tuple[float, float, int]
Estimator = Callable[["Node", list["Shape | None"], list["Shape | None"], list[int], list[int]], "Estimate | None"]

ESTIMATORS: dict[str, Estimator] = {}
"""Op type -> estimator, keyed by the full op name (``tf.Sum``) or the bare op type (``Conv``); the
full name is looked up first. Plugins may add entries for their own op types."""


def register_estimator(*op_types: str) -> Callable[[Estimator], Estimator]:
    """Decorator: use the function as the estimator of ``op_types`` (bare names, ``Conv2D``)."""

    def wrap(fn: Estimator) -> Estimator:
        for op_type in op_types:
            ESTIMATORS[op_type] = fn
        return fn

    return wrap


def bare_op(op: str) -> str:
    """The op type without dialect/domain (``onnx.com.microsoft.FusedConv`` -> ``FusedConv``)."""
    return op.rsplit(".", 1)[-1]


def _elems(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


# --------------------------------------------------------------------------- generic families


def _zero(*_: Any) -> Estimate:
    """Metadata-only ops (reshape, shape queries, identity, control flow markers): no work."""
    return 0.0, 0.0, 0


def _elementwise(flops_per_element: float) -> Estimator:
    """Pointwise ops, broadcasting: ``k · |out| · (n_inputs - 1)`` FLOPs (at least one pass)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        n_out = sum(_elems(s) for s in outs)
        return flops_per_element * n_out * max(1, len(ins) - 1), float(sum(ib) + sum(ob)), 0

    return estimate


def _copy(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Data movement reading every input once and writing every output (concat, transpose, pad...)."""
    return 0.0, float(sum(ib) + sum(ob)), 0


def _gather(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Reads only the rows it returns (plus the indices) and writes them: ``2·|out| + indices``."""
    return 0.0, float(2 * sum(ob) + sum(ib[1:])), 0


def _slice(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Slices read what they return: ``2·|out|`` (index operands are tiny)."""
    return 0.0, float(2 * sum(ob)), 0


def _scatter(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Scatter/segment ops: write the output, read the updates and indices."""
    return float(sum(_elems(s) for s in ins[1:])), float(sum(ob) + sum(ib[1:])), 0


def _produce(flops_per_element: float) -> Estimator:
    """Ops that only write their output (fills, ranges, random generators)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        return flops_per_element * sum(_elems(s) for s in outs), float(sum(ob)), 0

    return estimate


def _reduce(flops_per_element: float) -> Estimator:
    """Reductions over the first input: ``k · |in|`` FLOPs, reading inputs and writing outputs."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        if not ins or ins[0] is None:
            return None
        return flops_per_element * _elems(ins[0]), float(sum(ib) + sum(ob)), 0

    return estimate


def _over_input(flops_per_element: float) -> Estimator:
    """Ops whose work is proportional to the first input (normalisations, softmax, their grads)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        if not ins or ins[0] is None:
            return None
        return flops_per_element * _elems(ins[0]), float(sum(ib) + sum(ob)), 0

    return estimate


def _param_ints(node: Node, key: str) -> tuple[int, ...] | None:
    value = node.params.get(key)
    if isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def _param_int(node: Node, key: str, default: int) -> int:
    value = node.params.get(key, default)
    return value if isinstance(value, int) else default


# --------------------------------------------------------------------------- convolutions


@register_estimator("Conv", "FusedConv", "ConvInteger")
def _onnx_conv(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """ONNX Conv, W = [Cout, Cin/g, k...]: ``2 · |Y| · prod(W[1:])`` (+ |Y| for the bias)."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    weight, out = ins[1], outs[0]
    per_output = _elems(weight[1:])
    flops = 2.0 * _elems(out) * per_output + (_elems(out) if len(ins) > 2 else 0)
    temporary = 0
    if any(k != 1 for k in weight[2:]) and len(out) > 2:
        # im2col of one image: (Cin/g · prod(k)) rows x prod(out spatial) columns.
        temporary = per_output * _elems(out[2:]) * _itemsize(node)
    return flops, float(sum(ib) + sum(ob)), temporary


@register_estimator("ConvTranspose")
def _onnx_conv_transpose(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """ONNX ConvTranspose, W = [Cin, Cout/g, k...]: ``2 · |X| · prod(W[1:])``."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None:
        return None
    return 2.0 * _elems(ins[0]) * _elems(ins[1][1:]), float(sum(ib) + sum(ob)), 0


@register_estimator("Conv2D", "Conv3D", "Conv1D", "_FusedConv2D")
def _tf_conv(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """TF Conv, filter = [k..., Cin/g, Cout]: ``2 · |out| · prod(filter[:-1])``."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    per_output = _elems(ins[1][:-1])
    temporary = per_output * _elems(outs[0][1:-1]) * _itemsize(node) if any(k != 1 for k in ins[1][:-2]) else 0
    return 2.0 * _elems(outs[0]) * per_output, float(sum(ib) + sum(ob)), temporary


@register_estimator("DepthwiseConv2dNative", "DepthwiseConv2D")
def _tf_depthwise(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Depthwise conv, filter = [kh, kw, Cin, multiplier]: ``2 · |out| · kh · kw``."""
    if len(ins) < 2 or ins[1] is None or not outs or outs[0] is None:
        return None
    return 2.0 * _elems(outs[0]) * _elems(ins[1][:-2]), float(sum(ib) + sum(ob)), 0


@register_estimator("Conv2DBackpropInput", "Conv3DBackpropInputV2", "Conv3DBackpropInput")
def _tf_conv_backprop_input(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """DX of a conv (inputs: input_sizes, filter, dY): the forward FLOPs, ``2 · |dY| · prod(filter[:-1])``."""
    if len(ins) < 3 or ins[1] is None or ins[2] is None:
        return None
    return 2.0 * _elems(ins[2]) * _elems(ins[1][:-1]), float(sum(ib[1:]) + sum(ob)), 0


@register_estimator("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "Conv3DBackpropFilter")
def _tf_conv_backprop_filter(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """DW of a conv (inputs: input, filter_sizes, dY; output: filter-shaped): ``2 · |dY| · prod(dW[:-1])``."""
    if len(ins) < 3 or ins[2] is None or not outs or outs[0] is None:
        return None
    return 2.0 * _elems(ins[2]) * _elems(outs[0][:-1]), float(ib[0] + ib[2] + sum(ob)), 0


@register_estimator("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")
def _tf_depthwise_backprop(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Depthwise conv gradients: ``2 · |dY| · kh · kw`` (kernel from the filter or the result)."""
    if len(ins) < 3 or ins[2] is None:
        return None
    kernel = ins[1] if node.op.endswith("Input") else (outs[0] if outs else None)
    if kernel is None or len(kernel) < 2:
        return None
    return 2.0 * _elems(ins[2]) * _elems(kernel[:-2]), float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- matrix products


def _matmul(k_of: Callable[[Node, Shape, Shape], int], bias_input: int | None = None) -> Estimator:
    def estimate(node: Node, ins, outs, ib, ob) -> Estimate | None:
        if len(ins) < 2 or ins[0] is None or ins[1] is None or not outs or outs[0] is None or not ins[0]:
            return None
        k = k_of(node, ins[0], ins[1])
        flops = 2.0 * _elems(outs[0]) * k
        if bias_input is not None and len(ins) > bias_input:
            flops += _elems(outs[0])
        return flops, float(sum(ib) + sum(ob)), 0

    return estimate


def _k_last(node: Node, a: Shape, b: Shape) -> int:
    return a[-1]


def _k_transpose(flag: str) -> Callable[[Node, Shape, Shape], int]:
    def k_of(node: Node, a: Shape, b: Shape) -> int:
        if len(a) < 2:
            return a[-1]
        return a[-2] if node.params.get(flag) in (1, True) else a[-1]

    return k_of


register_estimator("MatMul", "MatMulInteger")(_matmul(_k_last))
register_estimator("Gemm")(_matmul(_k_transpose("transA"), bias_input=2))
register_estimator("tf.MatMul")(_matmul(_k_transpose("transpose_a")))
register_estimator("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")(_matmul(_k_transpose("adj_x")))
register_estimator("_MklMatMul", "_FusedMatMul")(_matmul(_k_transpose("transpose_a")))


@register_estimator("Einsum")
def _einsum(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """``2 · prod(size of every distinct index)`` when some index is contracted, else ``|out|``."""
    equation = node.params.get("equation")
    if not isinstance(equation, str) or any(s is None for s in ins):
        return None
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), ins, strict=False):
        letters = [c for c in term if c.isalpha()]
        if "..." in term or shape is None or len(letters) != len(shape):
            return None
        sizes.update(zip(letters, shape, strict=True))
    contracted = set(sizes) - set(rhs)
    flops = 2.0 * math.prod(sizes.values()) if contracted else float(sum(_elems(s) for s in outs))
    return flops, float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- pooling, normalisation


def _kernel_elems(node: Node) -> int | None:
    kernel = _param_ints(node, "kernel_shape") or _param_ints(node, "ksize")
    return math.prod(kernel) if kernel is not None else None


@register_estimator("MaxPool", "AveragePool", "AvgPool", "AvgPool3D", "MaxPool3D", "LpPool", "MaxPoolWithArgmax")
def _pool(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Windowed pooling: ``|out| · prod(kernel)`` comparisons/additions."""
    kernel = _kernel_elems(node)
    if kernel is None or not outs or outs[0] is None:
        return None
    return float(_elems(outs[0]) * kernel), float(sum(ib) + sum(ob)), 0


@register_estimator("MaxPoolGrad", "AvgPoolGrad", "MaxPoolGradV2", "MaxPool3DGrad", "AvgPool3DGrad", "MaxPoolGradGrad")
def _pool_grad(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Pooling gradients: ``|dY| · prod(kernel)`` (dY is the last input)."""
    kernel = _kernel_elems(node)
    if kernel is None or not ins or ins[-1] is None:
        return None
    return float(_elems(ins[-1]) * kernel), float(sum(ib) + sum(ob)), 0


@register_estimator("LRN")
def _lrn(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Local response normalisation: a sum of squares over ``size`` channels, then a power: ``(2·size + 4)/elem``."""
    if not ins or ins[0] is None:
        return None
    size = _param_int(node, "size", 0) or 2 * _param_int(node, "depth_radius", 2) + 1
    return float(_elems(ins[0]) * (2 * size + 4)), float(sum(ib) + sum(ob)), 0


@register_estimator("LRNGrad")
def _lrn_grad(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """LRN gradient: about twice the forward work."""
    if not ins or ins[0] is None:
        return None
    size = 2 * _param_int(node, "depth_radius", 2) + 1
    return float(_elems(ins[0]) * (4 * size + 8)), float(sum(ib) + sum(ob)), 0


@register_estimator("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx")
def _fused_batch_norm(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """TF batch norm: training computes mean and variance (10 FLOPs/elem), inference scales (4)."""
    if not ins or ins[0] is None:
        return None
    training = node.params.get("is_training", True) in (True, 1)
    return float(_elems(ins[0]) * (10 if training else 4)), float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- recurrent cells


@register_estimator("LSTM", "GRU", "RNN")
def _onnx_rnn(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """ONNX RNNs: two GEMMs per step plus ~10 FLOPs per gate unit.

    With X = [seq, batch, in], W = [dirs, gates·h, in], R = [dirs, gates·h, h]:
    ``2 · seq · batch · dirs · gates·h · (in + h)``.
    """
    if len(ins) < 3 or any(s is None or len(s) != 3 for s in ins[:3]):
        return None
    x, w, r = ins[0], ins[1], ins[2]
    seq, batch, dirs, gate_units, width, hidden = x[0], x[1], w[0], w[1], w[2], r[2]  # type: ignore[index]
    flops = 2.0 * seq * batch * dirs * gate_units * (width + hidden) + 10.0 * seq * batch * dirs * gate_units
    return flops, float(sum(ib) + sum(ob)), 0


@register_estimator("LSTMBlockCell", "BlockLSTM", "BlockLSTMV2", "GRUBlockCell")
def _tf_lstm_block(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """TF fused LSTM cell(s): x = [(seq,) batch, in], w = [in + h, 4h]: ``2 · steps · batch · (in+h) · 4h``."""
    weight = next((s for s in ins if s is not None and len(s) == 2 and s[0] > 0 and s[1] % 4 == 0), None)
    x = ins[1] if node.op.endswith(("BlockLSTM", "BlockLSTMV2")) and len(ins) > 1 else (ins[0] if ins else None)
    if weight is None or x is None or len(x) < 2:
        return None
    steps = x[0] if len(x) == 3 else 1
    batch = x[-2]
    flops = 2.0 * steps * batch * weight[0] * weight[1] + 10.0 * steps * batch * weight[1]
    return flops, float(sum(ib) + sum(ob)), 0


@register_estimator("LSTMBlockCellGrad", "BlockLSTMGrad", "BlockLSTMGradV2", "GRUBlockCellGrad")
def _tf_lstm_block_grad(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Fused LSTM gradients: about twice the forward GEMM work."""
    forward = _tf_lstm_block(node, ins, outs, ib, ob)
    return None if forward is None else (2.0 * forward[0], forward[1], 0)


# --------------------------------------------------------------------------- optimizers


def _optimizer(flops_per_element: float, tensors_touched: int) -> Estimator:
    """Optimizer updates (``ResourceApply*``): ``k`` FLOPs per element.

    The update reads/writes ``tensors_touched`` variable-sized tensors (variable, slots, gradient);
    the size is the gradient's (variable inputs are resource handles of zero bytes).
    """

    def estimate(node: Node, ins, outs, ib, ob) -> Estimate | None:
        known = [_elems(s) for s in ins if s is not None]
        if not known:
            return None
        elements = max(known)
        itemsize = max((b // e for b, e in zip(ib, (_elems(s) for s in ins), strict=True) if e), default=4)
        return flops_per_element * elements, float(tensors_touched * elements * itemsize), 0

    return estimate


_OPTIMIZERS: dict[str, tuple[float, int]] = {
    # name: (FLOPs per element, variable-sized tensors read + written)
    "GradientDescent": (2, 3),  # var -= lr * g
    "ProximalGradientDescent": (6, 3),
    "Momentum": (4, 5),  # accum = m·accum + g; var -= lr·accum
    "KerasMomentum": (4, 5),
    "Adagrad": (5, 5),
    "AdagradV2": (6, 5),
    "ProximalAdagrad": (9, 5),
    "AdagradDA": (10, 7),
    "Adadelta": (12, 7),
    "RMSProp": (10, 7),
    "CenteredRMSProp": (14, 9),
    "Adam": (18, 7),  # m, v updates, bias-corrected step: read var, m, v, g; write var, m, v
    "AdamWithAmsgrad": (20, 9),
    "AdaMax": (12, 7),
    "Ftrl": (20, 7),
    "FtrlV2": (22, 7),
    "PowerSign": (10, 5),
    "AddSign": (10, 5),
}
for _name, (_flops, _tensors) in _OPTIMIZERS.items():
    register_estimator(f"ResourceApply{_name}", f"Apply{_name}", f"ResourceSparseApply{_name}", f"SparseApply{_name}")(
        _optimizer(_flops, _tensors)
    )


@register_estimator("AssignVariableOp", "Assign", "AssignVariableXlaConcatND")
def _assign(node: Node, ins, outs, ib, ob) -> Estimate:
    """Variable assignment: read the value, write the variable."""
    return 0.0, float(2 * max(ib, default=0)), 0


@register_estimator("AssignAddVariableOp", "AssignSubVariableOp", "AssignAdd", "AssignSub")
def _assign_update(node: Node, ins, outs, ib, ob) -> Estimate:
    """In-place add/sub into a variable: read both, write one; one FLOP per element."""
    largest = max((s for s in ins if s is not None), key=_elems, default=None)
    return float(_elems(largest)), float(3 * max(ib, default=0)), 0


# --------------------------------------------------------------------------- misc


@register_estimator("TopK", "TopKV2")
def _topk(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Partial sort: ``|in| · log2(k)`` comparisons (k from the values output's last dimension)."""
    if not ins or ins[0] is None or not outs or outs[0] is None or not outs[0]:
        return None
    return float(_elems(ins[0]) * max(1.0, math.log2(max(outs[0][-1], 2)))), float(sum(ib) + sum(ob)), 0


@register_estimator("SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyLoss")
def _softmax_xent(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """Softmax + log + loss + gradient over the logits: ~8 FLOPs per logit."""
    if not ins or ins[0] is None:
        return None
    return 8.0 * _elems(ins[0]), float(sum(ib) + sum(ob)), 0


def _register_family(estimator: Estimator, *op_types: str) -> None:
    register_estimator(*op_types)(estimator)


_register_family(
    _zero,
    # ONNX metadata / shape ops
    *("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Shape", "Size", "Constant", "Optional"),
    *("OptionalGetElement", "OptionalHasElement", "SequenceEmpty"),
    # TF graph plumbing, shape arithmetic and variable handles
    *("ExpandDims", "Const", "Placeholder", "PlaceholderWithDefault", "NoOp", "IdentityN", "StopGradient"),
    *("PreventGradient", "Snapshot", "VarHandleOp", "VariableV2", "Variable", "ReadVariableOp", "VarIsInitializedOp"),
    *("_Arg", "_Retval", "_Send", "_Recv", "Rank", "ShapeN", "BroadcastGradientArgs", "BroadcastArgs"),
    *("ConcatOffset", "InvertPermutation", "Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"),
    *("ControlTrigger", "Assert", "Print", "PrintV2", "EnsureShape", "DestroyResourceOp", "RefIdentity"),
    *("VariableShape", "StringFormat", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename"),
)
_register_family(
    _elementwise(1),
    *("Relu", "Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Not", "Cast", "CastLike", "Clip", "LeakyRelu"),
    *("Relu6", "ReluGrad", "Relu6Grad", "LeakyReluGrad", "Square", "Reciprocal", "Inv", "IsNaN", "IsInf"),
    *("Add", "AddV2", "Sub", "Mul", "Div", "RealDiv", "FloorDiv", "TruncateDiv", "Mod", "FloorMod"),
    *("Max", "Min", "Maximum", "Minimum", "Sum", "AddN", "Mean", "Equal", "NotEqual", "Less", "LessEqual"),
    *("Greater", "GreaterEqual", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "LogicalAnd"),
    *("LogicalOr", "LogicalNot", "Where", "Select", "SelectV2", "PRelu", "BiasAdd", "BiasAddV1"),
    *("SquaredDifference", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "ThresholdedRelu"),
    *("Shrink", "HardSwish", "Dropout", "DivNoNan", "MulNoNan", "ClipByValue", "ZerosLike", "OnesLike"),
    *("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ApproximateEqual"),
)
_register_family(
    _elementwise(4),
    *("Exp", "Log", "Sqrt", "Rsqrt", "Sigmoid", "Tanh", "Erf", "Elu", "Selu", "Celu", "Softplus", "Softsign"),
    *("HardSigmoid", "Mish", "Gelu", "Pow", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh"),
    *("Asinh", "Acosh", "Atanh", "Expm1", "Log1p", "SigmoidGrad", "TanhGrad", "RsqrtGrad", "SqrtGrad"),
    *("EluGrad", "SeluGrad", "SoftplusGrad", "SoftsignGrad", "Erfc", "Lgamma", "Digamma", "Swish", "FastGelu"),
    *("BiasGelu", "QuickGelu", "ReciprocalGrad", "Xlogy", "Xdivy", "GeluGrad"),
)
_register_family(
    _copy,
    *("Concat", "ConcatV2", "Transpose", "ConjugateTranspose", "Pad", "PadV2", "MirrorPad", "Tile", "Expand"),
    *("BroadcastTo", "Split", "SplitV", "SplitToSequence", "Pack", "Unpack", "DepthToSpace", "SpaceToDepth"),
    *("Resize", "Upsample", "ResizeNearestNeighbor", "ResizeNearestNeighborGrad", "ReverseV2", "ReverseSequence"),
    *("DynamicStitch", "ParallelDynamicStitch", "DynamicPartition", "Trilu", "MatrixBandPart", "Compress"),
    *("StridedSliceGrad", "SliceGrad", "ConcatFromSequence", "SequenceConstruct", "SequenceAt", "SequenceInsert"),
    *("TensorListFromTensor", "TensorListStack", "TensorListSetItem", "TensorListGetItem", "TensorListReserve"),
    *("TensorArrayV3", "TensorArrayScatterV3", "TensorArrayGatherV3", "TensorArrayReadV3", "TensorArrayWriteV3"),
    *("graphir.split", "graphir.concat"),  # FastT operation splitting: pieces copied out and back
    *("CopyHost", "Copy", "DeepCopy", "_HostSend", "_HostRecv", "MirrorPadGrad", "Roll", "Unique", "NonZero"),
    *("CenterCropPad", "Col2Im", "AffineGrid", "GridSample", "RoiAlign", "MaxUnpool"),
)
_register_family(_slice, "Slice", "StridedSlice", "ResourceStridedSliceAssign")
_register_family(
    _gather,
    *("Gather", "GatherV2", "GatherElements", "GatherND", "ResourceGather", "ResourceGatherNd", "OneHot"),
    *("EmbeddingLookup", "BatchGather", "GatherBlockQuantized"),
)
_register_family(
    _scatter,
    *("ScatterND", "ScatterElements", "Scatter", "ScatterNd", "TensorScatterUpdate", "TensorScatterAdd"),
    *("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "SegmentSum", "SegmentMean"),
    *("ResourceScatterAdd", "ResourceScatterUpdate", "ScatterAdd", "ScatterUpdate", "SparseSegmentSum"),
    *("SparseSegmentMean", "SparseSegmentSqrtN", "SparseSegmentMeanGrad", "SparseSegmentSqrtNGrad"),
)
_register_family(
    _produce(0),
    *("ConstantOfShape", "Range", "Fill", "EyeLike", "Zeros", "Ones", "LinSpace", "Empty"),
)
_register_family(
    _produce(4),
    *("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "RandomStandardNormal"),
    *("TruncatedNormal", "RandomUniformInt", "StatelessRandomUniformV2", "StatelessRandomNormalV2"),
    *("StatelessTruncatedNormalV2", "StatelessRandomUniformIntV2", "Multinomial", "Bernoulli"),
    *("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal", "StatelessRandomGetKeyCounter"),
)
_register_family(
    _reduce(1),
    *("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ArgMax", "ArgMin"),
    *("GlobalAveragePool", "GlobalMaxPool", "Prod", "All", "Any", "BiasAddGrad", "CumSum", "Cumsum"),
    *("Cumprod", "CumulativeLogsumexp", "EuclideanNorm", "Bincount", "Histogram", "SegmentMax"),
)
# TF's Sum/Max/Min/Mean/Prod are reductions, ONNX's are n-ary elementwise ops: the dialect-qualified
# key wins over the bare one.
_register_family(_reduce(1), "tf.Sum", "tf.Max", "tf.Min", "tf.Mean", "tf.Prod")
_register_family(_reduce(2), "ReduceSumSquare", "ReduceL2", "L2Loss", "GlobalLpPool", "Norm")
_register_family(_reduce(4), "ReduceLogSum", "ReduceLogSumExp")
_register_family(_over_input(5), "Softmax", "LogSoftmax", "Hardmax", "SoftmaxGrad", "LogSoftmaxGrad")
_register_family(_over_input(4), "BatchNormalization")
_register_family(
    _over_input(8),
    *("LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization", "InstanceNormalization"),
    *("GroupNormalization", "RMSNormalization", "MeanVarianceNormalization", "LpNormalization"),
)
_register_family(
    _over_input(12),
    *("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3", "LayerNormalizationGrad"),
)
_register_family(_over_input(8), "ResizeBilinear", "ResizeBicubic", "ResizeBilinearGrad", "ResizeBicubicGrad")


def _itemsize(node: Node) -> int:
    for value in node.outputs:
        size = value.type.dtype.itemsize
        if size:
            return size
    return 4


# --------------------------------------------------------------------------- whole-graph analysis


def _static_shape(type_: TensorType) -> tuple[Shape | None, bool]:
    """(shape with symbols as 1, True when a symbol was replaced); shape None when unknown."""
    shape = type_.shape
    if shape is None:
        return None, False
    symbolic = False
    out = []
    for dim in shape:
        if isinstance(dim, int):
            out.append(dim)
        elif dim is None:
            return None, False
        else:
            symbolic = True
            out.append(1)
    return tuple(out), symbolic


def _shape_bytes(type_: TensorType, shape: Shape | None) -> int:
    return 0 if shape is None else math.prod(shape) * type_.dtype.itemsize


_VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable"})
_OWNS_VALUE = frozenset({"Constant", "Const"})


def _variable_bytes(node: Node) -> int:
    """Size of a TF variable from its ``shape``/``dtype`` params (or its output type for ref variables)."""
    shape_param = node.params.get("shape")
    dtype_param = node.params.get("dtype")
    shape: tuple[Any, ...] | None = None
    dtype: DType | None = None
    if isinstance(shape_param, TensorType):
        shape, dtype = shape_param.shape, shape_param.dtype
    elif isinstance(shape_param, tuple):
        shape = shape_param
    if isinstance(dtype_param, TensorType):
        dtype = dtype_param.dtype
    elif isinstance(dtype_param, DType):
        dtype = dtype_param
    elif isinstance(dtype_param, str):
        try:
            dtype = DType.from_short(dtype_param)
        except KeyError:
            dtype = next((d for d in DType if d.name.lower() == dtype_param.lower().removeprefix("dt_")), None)
    if shape is None or dtype is None:
        out = node.outputs[0].type if node.outputs else None
        if out is not None and out.dtype.itemsize and out.is_static:
            return out.nbytes_or(0)
        return 0
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        return 0
    return math.prod(shape) * dtype.itemsize


@attrs.frozen(eq=False)
class GraphWork:
    """Per-node work and memory of a graph, in the array view's topological numbering.

    Attributes:
        flops, bytes: float64 per node.
        persistent, activation, temporary: int64 bytes per node.
        fallback: bool per node, True where the bytes-only fallback was used.
        symbolic: bool per node, True where a symbolic dimension was taken as 1.
    """

    flops: np.ndarray
    bytes: np.ndarray
    persistent: np.ndarray
    activation: np.ndarray
    temporary: np.ndarray
    fallback: np.ndarray
    symbolic: np.ndarray

    def times(self, device: Device) -> np.ndarray:
        """Roofline time per node on ``device``: ``max(flops/peak, bytes/bandwidth) + launch overhead``."""
        return roofline(self.flops, self.bytes, device.peak_flops, device.mem_bandwidth, device.launch_overhead)


def roofline(flops: np.ndarray, nbytes: np.ndarray, peak_flops: float, bandwidth: float, overhead: float) -> np.ndarray:
    """``max(flops / peak_flops, bytes / bandwidth) + overhead``, elementwise (Williams et al. 2009)."""
    return np.maximum(flops / peak_flops, nbytes / bandwidth) + overhead


def estimate_node(node: Node) -> tuple[float, float, int, bool, bool]:
    """(flops, bytes, temporary, used_fallback, had_symbolic_dims) of one node."""
    ins: list[Shape | None] = []
    ib: list[int] = []
    symbolic = False
    for value in node.inputs:
        shape, sym = _static_shape(value.type)
        symbolic |= sym
        ins.append(shape)
        ib.append(_shape_bytes(value.type, shape))
    outs: list[Shape | None] = []
    ob: list[int] = []
    for value in node.outputs:
        shape, sym = _static_shape(value.type)
        symbolic |= sym
        outs.append(shape)
        ob.append(_shape_bytes(value.type, shape))
    estimator = ESTIMATORS.get(node.op) or ESTIMATORS.get(bare_op(node.op))
    result = estimator(node, ins, outs, ib, ob) if estimator is not None else None
    if result is None:
        # Bytes-based fallback: read every input, write every output, one FLOP per output element.
        return float(sum(_elems(s) for s in outs)), float(sum(ib) + sum(ob)), 0, True, symbolic
    flops, nbytes, temporary = result
    return float(flops), float(nbytes), int(temporary), False, symbolic


def kind_times(cluster: Cluster, nodes: Sequence[Node]) -> tuple[dict[str, np.ndarray], list[int]]:
    """Roofline seconds of ``nodes`` on each device kind of ``cluster`` (kinds sorted), and their temporaries.

    For passes that create nodes after profiling (operation splitting, data-parallel replicas) and
    need their analytical costs on the module's cluster.
    """
    estimates = [estimate_node(n) for n in nodes]
    flops = np.asarray([e[0] for e in estimates], dtype=np.float64)
    nbytes = np.asarray([e[1] for e in estimates], dtype=np.float64)
    times = {}
    for kind in sorted(cluster.kinds):
        device = cluster.kind_device(kind)
        times[kind] = roofline(flops, nbytes, device.peak_flops, device.mem_bandwidth, device.launch_overhead)
    return times, [e[2] for e in estimates]


def analyze_graph(graph: Graph, nodes: Sequence[Node] | None = None) -> GraphWork:
    """FLOPs, bytes and memory of every node, in ``graph.index()`` order unless ``nodes`` is given.

    Shared constants are attributed to their first user in that order (see the module docstring).
    """
    if nodes is None:
        nodes = graph.index().nodes
    n = len(nodes)
    flops = np.zeros(n)
    nbytes = np.zeros(n)
    persistent = np.zeros(n, dtype=np.int64)
    activation = np.zeros(n, dtype=np.int64)
    temporary = np.zeros(n, dtype=np.int64)
    fallback = np.zeros(n, dtype=bool)
    symbolic = np.zeros(n, dtype=bool)
    owned: set[int] = set()
    from graphir.ir import ValueKind

    for i, node in enumerate(nodes):
        f, b, t, fb, sym = estimate_node(node)
        flops[i], nbytes[i], temporary[i], fallback[i], symbolic[i] = f, b, t, fb, sym
        weights = 0
        for value in node.inputs:
            if value.kind is ValueKind.CONSTANT and id(value) not in owned:
                owned.add(id(value))
                weights += value.nbytes
        op = bare_op(node.op)
        out_bytes = sum(v.nbytes for v in node.outputs)
        if op in _VARIABLE_OPS:
            weights += _variable_bytes(node)
            out_bytes = 0
        elif op in _OWNS_VALUE:
            value_param = node.params.get("value")
            weights += out_bytes if out_bytes or not isinstance(value_param, DenseTensor) else len(value_param.data)
            out_bytes = 0
        persistent[i] = weights
        activation[i] = out_bytes
    return GraphWork(flops, nbytes, persistent, activation, temporary, fallback, symbolic)
