"""FastT operation splitting (FastT §5.2, ``SplitOperation`` of Algorithm 2): one op into n parts.

:func:`split_node` rewrites the graph in place. The op ``op`` becomes ``n`` copies of itself (the
*parts*, nodes ``<op>.part<i>``), each computing a slice of the result along one parallelisable
dimension:

* ``batch``: dim 0 of the activations (data parallelism inside the op). The activation operand is
  cut along its batch axis by a ``graphir.split`` node; weights are *shared* by every part.
* ``channel``: the output channels / output features (model parallelism inside the op). The
  weight is cut: ``onnx.Conv`` ``W[Cout, Cin/g, k...]`` and its bias along axis 0, ``onnx.MatMul``
  ``B[..., K, N]`` along its last axis, ``onnx.Gemm`` ``B`` along N (axis 1, or 0 with
  ``transB``), ``tf.Conv2D`` ``filter[kh, kw, Cin, Cout]`` along axis 3, ``tf.MatMul`` ``b`` along N.
  Activations are shared.
* an integer axis (elementwise ops and pooling): that axis of the result; every operand that has
  the axis (numpy broadcasting, aligned from the right) is cut, size-1 and missing axes are shared.

A ``graphir.concat`` node (``axis`` param) joins the parts' results; it takes over the original
node's name and result name, so every consumer, graph output and printed reference is unchanged.
Parts have balanced sizes (the first ``d mod n`` parts one larger).

Weights that are graph constants are cut into new constants ``<const>.part<i>`` whose data is
sliced lazily: a :class:`~graphir.attributes.DenseTensor` is sliced at once (it is small or already
in memory), an :class:`~graphir.ir.ExternalTensor` gets a loader that loads the parent and slices
it on demand; a constant without data stays without data. A constant left unused is removed.
Weights computed by nodes (ONNX light models build them with ``ConstantOfShape``) are cut by a
``graphir.split`` node like activations.

Params are copied to every part; grouped convolutions (``group = g``) split on channels only
when ``g`` is a multiple of ``n`` (each part then convolves ``g / n`` whole groups over its slice
of the input channels, ``group = g / n``). Ops that cannot be split correctly are refused with a
:class:`SplitError` that says why (multi-result ops, dynamic shapes, training-mode batch
normalisation, fused groups, ops without a rule...).

**Costs and memory** (:func:`annotate_split`): when the original op has a ``cost``, every new node
gets one: a part's time on each device kind is the original's scaled by the part's share of the
analytical roofline time (:mod:`graphir.costmodel`), so measured costs stay consistent and analytical
ones equal the part's own roofline time; split/concat nodes get their analytical copy time. ``mem``
is analytical: ``persistent`` counts the constants a node reads (a weight shared by the parts of a
batch split is counted in every part, a replica per part: conservative when two parts share a
device), ``activation`` the result bytes, ``temporary`` the convolution scratch.

:meth:`SplitResult.undo` restores the original op (same name, operands, params, annotations,
control edges), which OS-DPOS uses to try a split and take it back.

:func:`export_onnx_with_splits` exports a module containing split/concat nodes to ONNX (ONNX
``Split``/``Concat``) through :func:`graphir.passes.profile.export_onnx`, for numerical checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor, ParamValue
from graphir.costmodel import kind_times
from graphir.errors import PassError
from graphir.ir import ExternalTensor, Graph, Module, Node, Value, ValueKind
from graphir.types import TensorType

__all__ = [
    "SPLIT_OP",
    "CONCAT_OP",
    "SplitError",
    "SplitResult",
    "annotate_split",
    "export_onnx_with_splits",
    "parallel_dims",
    "split_node",
    "split_reason",
]

SPLIT_OP = "graphir.split"
CONCAT_OP = "graphir.concat"

Dim = str | int
"""``"batch"``, ``"channel"`` or an integer axis of the op's result."""


class SplitError(PassError):
    """An op cannot be split as asked; the message says why in one line."""


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How to split one op: the result axis and, per operand, ``(axis, sizes)`` or ``None`` (shared)."""

    out_axis: int
    sizes: tuple[int, ...]
    operands: tuple[tuple[int, tuple[int, ...]] | None, ...]
    params: dict[str, ParamValue]


def _balanced(total: int, parts: int) -> tuple[int, ...]:
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def _shape(value: Value) -> tuple[int, ...]:
    assert value.type.shape is not None
    return tuple(int(d) for d in value.type.shape)  # type: ignore[arg-type]


def _int_param(node: Node, key: str, default: int) -> int:
    value = node.params.get(key, default)
    return int(value) if isinstance(value, (int, bool)) else default


# --------------------------------------------------------------------------- op rules
# A rule gets (node, dim, parts) and returns a plan, or raises SplitError with the reason.

Rule = Callable[[Node, Dim, int], _Plan]
RULES: dict[str, Rule] = {}
DIMS: dict[str, tuple[str, ...]] = {}
"""Op -> the named dimensions OS-DPOS tries (``batch``, ``channel``)."""


def _rule(dims: tuple[str, ...], *ops: str) -> Callable[[Rule], Rule]:
    def wrap(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
            DIMS[op] = dims
        return fn

    return wrap


def _broadcast_plan(node: Node, out_axis: int, parts: int, params: dict[str, ParamValue] | None = None) -> _Plan:
    """Cut every operand that carries ``out_axis`` of the result (numpy broadcasting); share the rest."""
    out = _shape(node.outputs[0])
    rank = len(out)
    if not 0 <= out_axis < rank:
        raise SplitError(f"its axis {out_axis} is out of range for result type {node.outputs[0].type}")
    sizes = _balanced(out[out_axis], parts)
    operands: list[tuple[int, tuple[int, ...]] | None] = []
    for k, value in enumerate(node.inputs):
        shape = _shape(value)
        aligned = out_axis - (rank - len(shape))
        if aligned < 0 or shape[aligned] == 1:
            operands.append(None)
        elif shape[aligned] == out[out_axis]:
            operands.append((aligned, sizes))
        else:
            raise SplitError(
                f"its operand #{k} {value.type} does not broadcast to {node.outputs[0].type} on axis {out_axis}"
            )
    return _Plan(out_axis, sizes, tuple(operands), dict(node.params if params is None else params))


def _named_axis(node: Node, dim: Dim, channel_axis: int | None) -> int:
    rank = len(_shape(node.outputs[0]))
    if dim == "batch":
        return 0
    if dim == "channel":
        if channel_axis is None or rank < 2:
            raise SplitError("has no channel dimension")
        return channel_axis
    assert isinstance(dim, int)
    return dim + rank if dim < 0 else dim


_ONNX_ELEMENTWISE = (
    "Relu Sigmoid Tanh Abs Neg Exp Log Sqrt Reciprocal Floor Ceil Erf Softplus Softsign Selu Elu Celu LeakyRelu "
    "HardSigmoid HardSwish Identity Clip Cast Not Sign Round Sin Cos Add Sub Mul Div Pow Max Min Sum Mean PRelu "
    "And Or Xor Equal Less Greater LessOrEqual GreaterOrEqual Where Gelu Mish"
).split()
_TF_ELEMENTWISE = (
    "Relu Relu6 Sigmoid Tanh Abs Neg Exp Log Sqrt Rsqrt Square Identity Elu Selu Softplus AddV2 Add Sub Mul "
    "RealDiv Maximum Minimum SquaredDifference ReluGrad Relu6Grad SigmoidGrad TanhGrad"
).split()


@_rule(("batch", "channel"), *(f"onnx.{op}" for op in _ONNX_ELEMENTWISE))
def _onnx_elementwise(node: Node, dim: Dim, parts: int) -> _Plan:
    """Elementwise ops: any axis of the result (channel = axis 1, NCHW)."""
    return _broadcast_plan(node, _named_axis(node, dim, 1), parts)


@_rule(("batch", "channel"), *(f"tf.{op}" for op in _TF_ELEMENTWISE))
def _tf_elementwise(node: Node, dim: Dim, parts: int) -> _Plan:
    """TF elementwise ops: any axis of the result (channel = the last axis, NHWC)."""
    return _broadcast_plan(node, _named_axis(node, dim, len(_shape(node.outputs[0])) - 1), parts)


@_rule(("batch",), "onnx.BatchNormalization", "onnx.LRN")
def _onnx_batch_only(node: Node, dim: Dim, parts: int) -> _Plan:
    """Batch normalisation (inference: statistics are inputs, shared) and LRN: batch only."""
    if dim != "batch" and dim != 0:
        raise SplitError("splits on the batch only (its channels are normalised together)")
    if _int_param(node, "training_mode", 0):
        raise SplitError("runs in training mode: its batch statistics need the whole batch")
    plan = _broadcast_plan(node, 0, parts)
    operands = (plan.operands[0],) + (None,) * (len(node.inputs) - 1)
    return dataclasses.replace(plan, operands=operands)


@_rule(("batch", "channel"), "onnx.MaxPool", "onnx.AveragePool", "onnx.GlobalAveragePool", "onnx.GlobalMaxPool")
def _onnx_pool(node: Node, dim: Dim, parts: int) -> _Plan:
    """Pooling works per image and per channel: batch or channel (axis 1)."""
    axis = _named_axis(node, dim, 1)
    if axis > 1:
        raise SplitError("splits on the batch or the channels only (its window spans the spatial axes)")
    return _broadcast_plan(node, axis, parts)


@_rule(("batch", "channel"), "onnx.Conv")
def _onnx_conv(node: Node, dim: Dim, parts: int) -> _Plan:
    """ONNX Conv ``X[N, Cin, ...] * W[Cout, Cin/g, k...] (+ B[Cout])``: batch or output channels."""
    x, w = _shape(node.inputs[0]), _shape(node.inputs[1])
    out = _shape(node.outputs[0])
    group = _int_param(node, "group", 1)
    bias = len(node.inputs) > 2
    if dim in ("batch", 0):
        if x[0] != out[0]:
            raise SplitError(f"its input batch {x[0]} differs from its result batch {out[0]}")
        sizes = _balanced(out[0], parts)
        return _Plan(0, sizes, ((0, sizes), None) + ((None,) if bias else ()), dict(node.params))
    if dim not in ("channel", 1):
        raise SplitError(f"splits on the batch or the output channels, not axis {dim}")
    if w[0] != out[1]:
        raise SplitError(f"its weight {node.inputs[1].type} does not give the result's {out[1]} channels")
    params = dict(node.params)
    if group == 1:
        sizes = _balanced(out[1], parts)
        operands: tuple[tuple[int, tuple[int, ...]] | None, ...] = (None, (0, sizes))
    else:
        if group % parts:
            raise SplitError(
                f"has group={group}, not a multiple of parts={parts}: a part would cut a group of channels"
            )
        sizes = (out[1] // parts,) * parts
        operands = ((1, (x[1] // parts,) * parts), (0, sizes))
        params["group"] = group // parts
    return _Plan(1, sizes, operands + (((0, sizes),) if bias else ()), params)


@_rule(("batch", "channel"), "onnx.MatMul")
def _onnx_matmul(node: Node, dim: Dim, parts: int) -> _Plan:
    """ONNX MatMul ``A[..., M, K] @ B[..., K, N]``: batch (A's dim 0) or output features (B's N)."""
    a, b = _shape(node.inputs[0]), _shape(node.inputs[1])
    out = _shape(node.outputs[0])
    if len(a) < 2 or len(b) < 2:
        raise SplitError("has a 1-D operand: no batch rows or feature columns to split")
    if dim in ("channel", len(out) - 1, -1):
        sizes = _balanced(out[-1], parts)
        return _Plan(len(out) - 1, sizes, (None, (len(b) - 1, sizes)), dict(node.params))
    if dim not in ("batch", 0):
        raise SplitError(f"splits on the batch or the output features, not axis {dim}")
    if len(b) > len(a):
        raise SplitError(f"its operand {node.inputs[1].type} broadcasts leading dims over {node.inputs[0].type}")
    sizes = _balanced(out[0], parts)
    b_plan: tuple[int, tuple[int, ...]] | None = None
    if len(b) == len(a) and len(a) > 2 and b[0] != 1:
        b_plan = (0, sizes)
    return _Plan(0, sizes, ((0, sizes), b_plan), dict(node.params))


def _bias_plan(bias: tuple[int, ...], out: tuple[int, ...], axis: int, sizes: tuple[int, ...]) -> Any:
    aligned = axis - (len(out) - len(bias))
    if aligned < 0 or bias[aligned] == 1:
        return None
    return (aligned, sizes)


@_rule(("batch", "channel"), "onnx.Gemm")
def _onnx_gemm(node: Node, dim: Dim, parts: int) -> _Plan:
    """ONNX Gemm ``alpha·A'·B' + beta·C``: batch rows (A's M) or output features (B's N); C follows."""
    out = _shape(node.outputs[0])
    trans_a, trans_b = _int_param(node, "transA", 0), _int_param(node, "transB", 0)
    if dim in ("batch", 0):
        axis, operand, operand_axis = 0, 0, 1 if trans_a else 0
    elif dim in ("channel", 1, -1):
        axis, operand, operand_axis = 1, 1, 0 if trans_b else 1
    else:
        raise SplitError(f"splits on the batch rows or the output features, not axis {dim}")
    sizes = _balanced(out[axis], parts)
    operands: list[Any] = [None, None]
    operands[operand] = (operand_axis, sizes)
    if len(node.inputs) > 2:
        operands.append(_bias_plan(_shape(node.inputs[2]), out, axis, sizes))
    return _Plan(axis, sizes, tuple(operands), dict(node.params))


@_rule(("batch", "channel"), "tf.Conv2D")
def _tf_conv2d(node: Node, dim: Dim, parts: int) -> _Plan:
    """TF Conv2D ``input * filter[kh, kw, Cin, Cout]``: batch or output channels (NHWC or NCHW)."""
    out = _shape(node.outputs[0])
    channel = 1 if node.params.get("data_format") == "NCHW" else 3
    if dim in ("batch", 0):
        sizes = _balanced(out[0], parts)
        return _Plan(0, sizes, ((0, sizes), None), dict(node.params))
    if dim not in ("channel", channel):
        raise SplitError(f"splits on the batch or the output channels, not axis {dim}")
    f = _shape(node.inputs[1])
    x = _shape(node.inputs[0])
    if f[2] != x[channel]:
        raise SplitError(f"is a grouped convolution (filter {node.inputs[1].type}): not supported")
    sizes = _balanced(out[channel], parts)
    return _Plan(channel, sizes, (None, (3, sizes)), dict(node.params))


@_rule(("batch", "channel"), "tf.MatMul")
def _tf_matmul(node: Node, dim: Dim, parts: int) -> _Plan:
    """TF MatMul ``op(a)[M, K] @ op(b)[K, N]`` (``transpose_a``/``transpose_b``): rows or features."""
    out = _shape(node.outputs[0])
    trans_a = bool(node.params.get("transpose_a", False))
    trans_b = bool(node.params.get("transpose_b", False))
    if dim in ("batch", 0):
        sizes = _balanced(out[0], parts)
        return _Plan(0, sizes, ((1 if trans_a else 0, sizes), None), dict(node.params))
    if dim not in ("channel", 1, -1):
        raise SplitError(f"splits on the batch rows or the output features, not axis {dim}")
    sizes = _balanced(out[1], parts)
    return _Plan(1, sizes, (None, (0 if trans_b else 1, sizes)), dict(node.params))


def _plan(node: Node, dim: Dim, parts: int) -> _Plan:
    """The split plan of ``node``, or :class:`SplitError` naming why it cannot be split."""
    if node.graph is None:
        raise SplitError("is not in a graph")
    rule = RULES.get(node.op)
    if rule is None:
        raise SplitError("has no splitting rule (supported: Conv, MatMul, Gemm, pooling, elementwise ops)")
    if parts < 2:
        raise SplitError(f"needs parts >= 2, got {parts}")
    if len(node.outputs) != 1:
        raise SplitError(f"has {len(node.outputs)} results: only single-result ops can be split")
    if node.group is not None:
        raise SplitError(f"is in fusion group {node.group}: split before 'fuse'")
    for value in [*node.inputs, *node.outputs]:
        if not value.type.is_static:
            raise SplitError(f"has a non-static type {value.type} ('%{value.name}')")
    positional = sorted(k for k in ("_absent_inputs", "_absent_outputs", "_captured_inputs") if k in node.params)
    if positional:
        raise SplitError(f"has importer operand bookkeeping ({', '.join(positional)}) that a part cannot keep")
    plan = rule(node, dim, parts)
    total = _shape(node.outputs[0])[plan.out_axis]
    if total < parts or min(plan.sizes) < 1:
        raise SplitError(f"has size {total} along axis {plan.out_axis}: too small for {parts} parts")
    if all(entry is None for entry in plan.operands):
        raise SplitError("has no operand carrying the split dimension")
    return plan


def split_reason(node: Node, dim: Dim, parts: int) -> str | None:
    """Why ``node`` cannot be split on ``dim`` into ``parts`` (``None``: it can)."""
    try:
        _plan(node, dim, parts)
    except SplitError as exc:
        return exc.message
    return None


def parallel_dims(node: Node) -> tuple[str, ...]:
    """The named parallelisable dimensions of ``node``'s op (``()`` when it has no rule)."""
    return DIMS.get(node.op, ())


# --------------------------------------------------------------------------- the rewrite


@dataclasses.dataclass
class SplitResult:
    """What :func:`split_node` created, and what it needs to undo the split.

    Attributes:
        name: the split op's name (now the concat node's name).
        dim: the dimension split (``batch``, ``channel`` or an axis).
        parts: the part nodes, in order.
        splits: the ``graphir.split`` nodes inserted on operands.
        concat: the ``graphir.concat`` node producing the original result.
        constants: the new sliced constants.
    """

    name: str
    dim: Dim
    parts: list[Node]
    splits: list[Node]
    concat: Node
    constants: list[Value]
    _op: str = ""
    _inputs: list[Value] = dataclasses.field(default_factory=list)
    _params: dict[str, ParamValue] = dataclasses.field(default_factory=dict)
    _annotations: dict[str, Any] = dataclasses.field(default_factory=dict)
    _control_inputs: list[Node] = dataclasses.field(default_factory=list)
    _removed_constants: list[tuple[int, Value]] = dataclasses.field(default_factory=list)
    _out_type: TensorType | None = None
    _out_name: str = ""

    @property
    def new_nodes(self) -> list[Node]:
        """Every node the split created: split nodes, parts, then the concat."""
        return [*self.splits, *self.parts, self.concat]

    def undo(self) -> Node:
        """Put the original op back (same name, operands, params, annotations); returns it."""
        graph = self.concat.graph
        assert graph is not None and self._out_type is not None
        for index, value in self._removed_constants:
            data = value.const
            restored = graph.add_constant(value.name, value.type, data)
            graph.constants.insert(index, graph.constants.pop())
            self._inputs = [restored if v is value else v for v in self._inputs]
        tmp = graph.add_input(graph.unique_name(f"{self.name}.undo"), self._out_type)
        self.concat.outputs[0].replace_all_uses_with(tmp)
        control_users = list(self.concat.control_users)
        for user in control_users:
            user.remove_control_input(self.concat)
        for node in reversed(self.new_nodes):
            graph.remove_node(node)
        for value in self.constants:
            graph.remove_value(value)
        node = graph.add_node(
            self._op, self._inputs, [self._out_type], name=self.name, output_names=[self._out_name], params=self._params
        )
        for key, value in self._annotations.items():
            node.set_annotation(key, value)
        for control in self._control_inputs:
            node.add_control_input(control)
        for user in control_users:
            user.add_control_input(node)
        tmp.replace_all_uses_with(node.outputs[0])
        graph.remove_value(tmp)
        return node


def _slice_data(data: Any, axis: int, begin: int, end: int, part_type: TensorType) -> Any:
    """The slice ``[begin:end]`` along ``axis`` of constant data, lazily for external data."""
    index = (slice(None),) * axis + (slice(begin, end),)
    if isinstance(data, DenseTensor):
        return DenseTensor.from_numpy(np.ascontiguousarray(data.numpy()[index]))
    if isinstance(data, ExternalTensor):
        if data.loader is None:
            return ExternalTensor(part_type, None)
        parent = data

        def load() -> Any:
            return np.ascontiguousarray(np.asarray(parent.numpy())[index])

        return ExternalTensor(part_type, load)
    return None


def _with_dim(value_type: TensorType, axis: int, size: int) -> TensorType:
    assert value_type.shape is not None
    shape = list(value_type.shape)
    shape[axis] = size
    return TensorType(value_type.dtype, tuple(shape))


def split_node(node: Node, dim: Dim, parts: int) -> SplitResult:
    """Split ``node`` into ``parts`` parts along ``dim``, in place (see the module docstring).

    Args:
        node: a single-result op with a splitting rule, in a graph.
        dim: ``"batch"``, ``"channel"`` or an integer axis of the result.
        parts: number of parts (at least 2, at most the size of the split dimension).

    Returns:
        The created nodes and constants, with :meth:`SplitResult.undo`.

    Raises:
        SplitError: the op cannot be split that way (the message names the op and the reason).
    """
    try:
        plan = _plan(node, dim, parts)
    except SplitError as exc:
        raise SplitError(
            f"cannot split '{node.name}' ({node.op}) on {dim} into {parts} parts: it {exc.message}"
        ) from None
    graph = node.graph
    assert graph is not None
    name = node.name
    original = node.outputs[0]
    result = SplitResult(
        name=name,
        dim=dim,
        parts=[],
        splits=[],
        concat=node,
        constants=[],
        _op=node.op,
        _inputs=list(node.inputs),
        _params=dict(node.params),
        _annotations=dict(node.annotations),
        _control_inputs=list(node.control_inputs),
        _out_type=original.type,
        _out_name=original.name,
    )
    # Per operand, the value each part reads.
    per_part: list[list[Value]] = [[] for _ in range(parts)]
    for k, (value, entry) in enumerate(zip(node.inputs, plan.operands, strict=True)):
        if entry is None:
            for row in per_part:
                row.append(value)
            continue
        axis, sizes = entry
        types = [_with_dim(value.type, axis, size) for size in sizes]
        if value.kind is ValueKind.CONSTANT:
            begin = 0
            for i, (size, part_type) in enumerate(zip(sizes, types, strict=True)):
                piece = graph.add_constant(
                    graph.unique_name(f"{value.name}.part{i}"),
                    part_type,
                    _slice_data(value.const, axis, begin, begin + size, part_type),
                )
                result.constants.append(piece)
                per_part[i].append(piece)
                begin += size
            continue
        split = graph.add_node(
            SPLIT_OP,
            [value],
            types,
            name=f"{name}.split{k}",
            output_names=[graph.unique_name(f"{name}.split{k}.{i}") for i in range(parts)],
            params={"axis": axis},
        )
        result.splits.append(split)
        for i in range(parts):
            per_part[i].append(split.outputs[i])
    part_types = [_with_dim(original.type, plan.out_axis, size) for size in plan.sizes]
    for i in range(parts):
        part_name = graph.unique_name(f"{name}.part{i}", for_node=True)
        part = graph.add_node(
            node.op,
            per_part[i],
            [part_types[i]],
            name=part_name,
            output_names=[graph.unique_name(part_name)],
            params=plan.params,
        )
        for key in ("affinity", "colocate"):
            if node.annotations.get(key) is not None:
                part.set_annotation(key, node.annotations[key])
        for control in node.control_inputs:
            part.add_control_input(control)
        result.parts.append(part)
    # Hand the original name over to the concat: park the uses on a temporary input meanwhile.
    tmp = graph.add_input(graph.unique_name(f"{name}.tmp"), original.type)
    original.replace_all_uses_with(tmp)
    control_users = list(node.control_users)
    for user in control_users:
        user.remove_control_input(node)
    graph.remove_node(node)
    concat = graph.add_node(
        CONCAT_OP,
        [p.outputs[0] for p in result.parts],
        [original.type],
        name=name,
        output_names=[original.name],
        params={"axis": plan.out_axis},
    )
    for key in ("affinity", "colocate"):
        if result._annotations.get(key) is not None:
            concat.set_annotation(key, result._annotations[key])
    for user in control_users:
        user.add_control_input(concat)
    tmp.replace_all_uses_with(concat.outputs[0])
    graph.remove_value(tmp)
    result.concat = concat
    for position, value in reversed(list(enumerate(graph.constants))):
        if value in result._inputs and not value.uses and not any(v is value for v in graph.outputs):
            result._removed_constants.insert(0, (position, value))
            graph.remove_value(value)
    return result


# --------------------------------------------------------------------------- costs


def _round(seconds: float) -> float:
    return float(f"{seconds:.12g}")


def annotate_split(module: Module, result: SplitResult) -> None:
    """Annotate the new nodes of ``result`` with ``cost`` and ``mem`` (see the module docstring).

    Nothing is written when the original op had no ``cost`` and no ``mem`` (an unprofiled graph).
    """
    original_cost: Cost | None = result._annotations.get("cost")
    if original_cost is None and result._annotations.get("mem") is None:
        return
    nodes = result.new_nodes
    times, temporaries = kind_times(module.cluster, nodes)
    # The original op's analytical time, to scale the parts' shares of its (possibly measured) cost.
    whole_graph = Graph("split-probe")
    probe_inputs = [whole_graph.add_input(f"in{k}", v.type) for k, v in enumerate(result._inputs)]
    probe = whole_graph.add_node(result._op, probe_inputs, [result._out_type], params=result._params)  # type: ignore[list-item]
    whole, _ = kind_times(module.cluster, [probe])
    for i, node in enumerate(nodes):
        kinds: dict[str, float] = {}
        for kind, seconds in times.items():
            t = float(seconds[i])
            if node in result.parts and original_cost is not None:
                measured = original_cost.time(kind)
                base = float(whole[kind][0])
                if measured is not None and base > 0:
                    t = measured * t / base
            kinds[kind] = _round(t)
        if original_cost is not None:
            node.cost = Cost(kinds)
        persistent = sum(v.nbytes for v in node.inputs if v.kind is ValueKind.CONSTANT)
        node.mem = Mem(persistent, sum(v.nbytes for v in node.outputs), temporaries[i])


# --------------------------------------------------------------------------- ONNX export


def export_onnx_with_splits(module: Module, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """:func:`graphir.passes.profile.export_onnx` with ``graphir.split``/``concat`` as ONNX Split/Concat.

    The split nodes' op names are swapped for the export only and restored afterwards; each ONNX
    ``Split`` gets its part sizes (the ``split`` input from opset 13, the attribute before).
    """
    from onnx import helper, numpy_helper

    from graphir.passes.profile import export_onnx

    graph = module.graph
    swapped = [(n, n.op) for n in graph.nodes if n.op in (SPLIT_OP, CONCAT_OP)]
    sizes: dict[str, list[int]] = {}
    for node, op in swapped:
        if op == SPLIT_OP:
            axis = int(node.params["axis"])  # type: ignore[arg-type]
            sizes[node.name] = [int(v.type.shape[axis]) for v in node.outputs]  # type: ignore[index,arg-type]
        node.op = "onnx.Split" if op == SPLIT_OP else "onnx.Concat"
    try:
        model, feeds = export_onnx(module, rng)
    finally:
        for node, op in swapped:
            node.op = op
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    for proto in model.graph.node:
        if proto.op_type != "Split" or proto.name not in sizes:
            continue
        if opset >= 13:
            name = f"{proto.name}.sizes"
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes[proto.name], np.int64), name))
            proto.input.append(name)
        else:
            proto.attribute.append(helper.make_attribute("split", sizes[proto.name]))
    return model, feeds
