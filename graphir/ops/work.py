"""Work and memory of one op from its shapes: the cost facet's shared machinery.

**Work per op.** Each op kind's cost estimator (the ``cost`` facet of its :class:`~graphir.ops.OpDef`,
found by :func:`graphir.ops.cost_of`: the qualified name first, then the bare op type, so
``tf.Conv2DBackpropInput`` uses ``Conv2DBackpropInput``) computes

* ``flops``: floating-point operations, counting a multiply-add as 2 (convolution:
  ``2 · |out| · Cin/g · prod(kernel)``; matrix product: ``2 · |out| · K``; pooling: ``|out| · prod(kernel)``;
  elementwise ops a small per-element constant, e.g. 5 for softmax, 4 for GELU's erf);
* ``bytes``: bytes of DRAM traffic, read and written once (inputs + outputs), except ops that
  touch only part of an input (gathers and slices read what they return; optimizers read and
  write their slots; reshape-like ops are metadata changes and move nothing);
* ``temporary``: scratch memory where known (the im2col buffer of a convolution on one image,
  an upper bound for CPU and cuDNN's implicit-GEMM kernels).

Symbolic dimensions count as 1. An op kind without an estimator, or one whose estimator needs a
shape that is unknown, falls back to a bytes-only estimate: ``bytes = inputs + outputs`` and
``flops = |outputs|``; :func:`estimate_node` reports it, and the profile pass counts and lists these
ops (``fallback-ops``), so a missing estimator never passes silently as zero.

This module holds the generic estimator families the op families share (metadata-only, elementwise,
copies, gathers, slices, scatters, producers, reductions), :func:`estimate_node`, and the memory
facts of op kinds: which ops own their value (:func:`owns_value`) and which are variables
(:func:`is_variable`, :func:`variable_bytes`). The roofline and the whole-graph analysis that use
them are in :mod:`graphir.passes.profile.roofline`.
"""

# Its private helpers serve this package's op families, which import them (unused here).
# pyright: reportUnusedFunction=false
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from graphir.ops.registry import Estimate, Estimator, Shape, bare_op, cost_of
from graphir.types import DType, TensorType, is_static_shape

if TYPE_CHECKING:
    from graphir.ir import Node

__all__ = [
    "estimate_node",
    "fallback_count",
    "is_variable",
    "owns_value",
    "static_shape",
    "variable_bytes",
]


def _elems(shape: Shape | None) -> int:
    return math.prod(shape) if shape is not None else 0


def _param_ints(node: Node, key: str) -> tuple[int, ...] | None:
    value = node.params.get(key)
    if isinstance(value, tuple) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def int_params(node: Node, key: str) -> tuple[int, ...]:
    """``node.params[key]`` as a tuple of ints (a list attribute: ONNX ``ints``); empty when absent or not ints."""
    return _param_ints(node, key) or ()


def float_params(node: Node, key: str) -> tuple[float, ...]:
    """``node.params[key]`` as a tuple of floats (ONNX ``floats``); empty when absent or not numbers."""
    value = node.params.get(key)
    if isinstance(value, tuple) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return tuple(float(v) for v in value)
    return ()


def _param_int(node: Node, key: str, default: int) -> int:
    value = node.params.get(key, default)
    return value if isinstance(value, int) else default


def _itemsize(node: Node) -> int:
    for value in node.outputs:
        size = value.type.dtype.itemsize
        if size:
            return size
    return 4


# --------------------------------------------------------------------------- generic families

_NEVER_NONE: set[Estimator] = set()
"""Estimators that always return an estimate (never ``None``): their nodes never fall back, so
:func:`fallback_count` need not call them. Only the generic families below whose bodies have no
``return None`` are listed, by :func:`_never_none`."""


def _never_none(estimator: Estimator) -> Estimator:
    """Record that ``estimator`` never returns ``None`` (its body has no other return)."""
    _NEVER_NONE.add(estimator)
    return estimator


@_never_none
def _zero(*_: Any) -> Estimate:
    """Metadata-only ops (reshape, shape queries, identity, control flow markers): no work."""
    return 0.0, 0.0, 0


def _elementwise(flops_per_element: float) -> Estimator:
    """Pointwise ops, broadcasting: ``k · |out| · (n_inputs - 1)`` FLOPs (at least one pass)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        n_out = sum(_elems(s) for s in outs)
        return flops_per_element * n_out * max(1, len(ins) - 1), float(sum(ib) + sum(ob)), 0

    estimate.__doc__ = f"Pointwise: ``{flops_per_element:g} · |out| · max(1, inputs - 1)`` FLOPs, bytes in + out."
    return _never_none(estimate)


@_never_none
def _copy(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Data movement reading every input once and writing every output (concat, transpose, pad...)."""
    return 0.0, float(sum(ib) + sum(ob)), 0


@_never_none
def _gather(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Reads only the rows it returns (plus the indices) and writes them: ``2·|out| + indices``."""
    return 0.0, float(2 * sum(ob) + sum(ib[1:])), 0


@_never_none
def _slice(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Slices read what they return: ``2·|out|`` (index operands are tiny)."""
    return 0.0, float(2 * sum(ob)), 0


@_never_none
def _scatter(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Scatter/segment ops: write the output, read the updates and indices."""
    return float(sum(_elems(s) for s in ins[1:])), float(sum(ob) + sum(ib[1:])), 0


def _produce(flops_per_element: float) -> Estimator:
    """Ops that only write their output (fills, ranges, random generators)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        return flops_per_element * sum(_elems(s) for s in outs), float(sum(ob)), 0

    estimate.__doc__ = f"Writes its output only: ``{flops_per_element:g} · |out|`` FLOPs, bytes out."
    return _never_none(estimate)


def _reduce(flops_per_element: float) -> Estimator:
    """Reductions over the first input: ``k · |in|`` FLOPs, reading inputs and writing outputs."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        if not ins or ins[0] is None:
            return None
        return flops_per_element * _elems(ins[0]), float(sum(ib) + sum(ob)), 0

    estimate.__doc__ = f"Reduction: ``{flops_per_element:g} · |in|`` FLOPs, bytes in + out."
    return estimate


def _over_input(flops_per_element: float) -> Estimator:
    """Ops whose work is proportional to the first input (normalisations, softmax, their grads)."""

    def estimate(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]):
        if not ins or ins[0] is None:
            return None
        return flops_per_element * _elems(ins[0]), float(sum(ib) + sum(ob)), 0

    estimate.__doc__ = f"Over the first input: ``{flops_per_element:g} · |in|`` FLOPs, bytes in + out."
    return estimate


# --------------------------------------------------------------------------- one node


def static_shape(type_: TensorType) -> tuple[Shape | None, bool]:
    """(shape with symbols as 1, True when a symbol was replaced); shape None when unknown."""
    shape = type_.shape
    if shape is None:
        return None, False
    if is_static_shape(shape):  # integers only (nearly every type of a real graph): its own static shape
        return shape, False
    symbolic = False
    out: list[int] = []
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


def _static_facts(type_: TensorType) -> tuple[Shape | None, bool, int]:
    """(:func:`static_shape`'s shape, whether a symbol was replaced, its bytes) of ``type_``."""
    shape, symbolic = static_shape(type_)
    return shape, symbolic, _shape_bytes(type_, shape)


def estimate_node(node: Node) -> tuple[float, float, int, bool, bool]:
    """(flops, bytes, temporary, used_fallback, had_symbolic_dims) of one node."""
    return _estimate_with(node, cost_of(node.op))


def _estimate_with(node: Node, estimator: Estimator | None) -> tuple[float, float, int, bool, bool]:
    """:func:`estimate_node` with the node's estimator (``cost_of(node.op)``) already looked up."""
    ins: list[Shape | None] = []
    ib: list[int] = []
    symbolic = False
    for value in node.inputs:
        shape, sym, nbytes = _static_facts(value.type)
        symbolic |= sym
        ins.append(shape)
        ib.append(nbytes)
    outs: list[Shape | None] = []
    ob: list[int] = []
    for value in node.outputs:
        shape, sym, nbytes = _static_facts(value.type)
        symbolic |= sym
        outs.append(shape)
        ob.append(nbytes)
    result = estimator(node, ins, outs, ib, ob) if estimator is not None else None
    if result is None:
        # Bytes-based fallback: read every input, write every output, one FLOP per output element.
        return float(sum(_elems(s) for s in outs)), float(sum(ib) + sum(ob)), 0, True, symbolic
    flops, nbytes, temporary = result
    return float(flops), float(nbytes), int(temporary), False, symbolic


def fallback_count(nodes: Iterable[Node]) -> int:
    """How many of ``nodes`` :func:`estimate_node` costs by its bytes-only fallback.

    The same answer as ``sum(estimate_node(n)[3] for n in nodes)``, without estimating every
    node: an op kind with no estimator always falls back, and an estimator that never returns
    ``None`` (the generic families of :data:`_NEVER_NONE`) is not called at all. The others are
    called once per node. (A memo of the answer by op and operand types saved nothing on the zoo's
    graphs and cost a third more where every tensor has its own type.)
    """
    count = 0
    estimators: dict[str, Estimator | None] = {}
    for node in nodes:
        op = node.op
        if op in estimators:
            estimator = estimators[op]
        else:
            estimator = estimators[op] = cost_of(op)
        if estimator is None:
            count += 1
        elif estimator not in _NEVER_NONE:
            count += _estimate_with(node, estimator)[3]
    return count


# --------------------------------------------------------------------------- memory facts

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "_VarHandlesOp"})
"""Bare op types of TensorFlow variables: persistent memory of the size their params give
(``_VarHandlesOp``, Grappler's batch of handles, has list params and sizes to 0). The one list: the
TF importer's :func:`graphir.importers.tf_attrs.is_variable_op` reads it too."""
OWNS_VALUE_OPS = frozenset({"Constant", "Const"})
"""Bare op types that own their value (ONNX ``Constant``, TF ``Const``): their result is persistent."""


def is_variable(op: str) -> bool:
    """True when ``op`` (any dialect) is a TensorFlow variable (a bare type in :data:`VARIABLE_OPS`)."""
    return bare_op(op) in VARIABLE_OPS


def owns_value(op: str) -> bool:
    """True when ``op`` (any dialect) holds its result as a constant (``Constant``, ``Const``)."""
    return bare_op(op) in OWNS_VALUE_OPS


def variable_bytes(node: Node) -> int:
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
