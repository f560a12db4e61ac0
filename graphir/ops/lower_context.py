"""What an op's TensorFlow lowering receives: :class:`OpContext`, and helpers the lowerings share.

A lowering (the ``lower`` facet of an :class:`~graphir.ops.OpDef`) converts one IR node into
TensorFlow ops and returns one tensor per IR result: ``fn(cx, operands) -> results``, operands in
ONNX positions (``None`` for an absent optional input). TensorFlow reaches it as ``cx.tf``, so no
module of :mod:`graphir.ops` imports TensorFlow. Every tensor keeps ONNX's layout (NCHW for
images). Semantics follow the ONNX operator docs for the module's opset (``cx.opset``).
The driver that walks a module and calls the lowerings is :mod:`graphir.backends.tf.lowering`.
"""

# Its private helpers serve this package's op families, which import them (unused here).
# pyright: reportUnusedFunction=false
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from graphir.attributes import DenseTensor, numpy_dtype
from graphir.errors import BackendError, Location
from graphir.types import TensorType, is_static_shape

if TYPE_CHECKING:
    from graphir.ir import Node, Value

__all__ = ["OpContext", "onnx_inputs", "tf_dtype"]


@dataclasses.dataclass
class OpContext:
    """What a lowering needs besides its operands.

    Attributes:
        tf: the ``tensorflow`` module.
        node: the IR node being lowered.
        opset: the default-domain ONNX opset of the module.
        operands: the TF tensors of the node's ONNX inputs (``None`` for absent ones), when the
            driver passes them: ranks and shapes the IR leaves unknown are then read from the
            tensors' static shapes.
        laid_out: ONNX input position -> the permutation its operand already arrives in: the
            driver stored a large weight in the layout the op's ``weight_layout`` facet asks for
            (the IR type, and so :meth:`static_shape`, still describe ONNX's layout).
    """

    tf: Any
    node: Node
    opset: int
    operands: list[Any] | None = None
    laid_out: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict[int, tuple[int, ...]])

    def error(self, message: str) -> BackendError:
        """A one-line :class:`BackendError` about this node (naming its op and node)."""
        return BackendError(f"'{self.node.op}' {message}", Location(node=self.node.name))

    def param(self, key: str, default: Any = None) -> Any:
        """The node's param ``key`` (``default`` when absent)."""
        return self.node.params.get(key, default)

    def in_type(self, position: int) -> TensorType:
        """The IR type of ONNX input ``position`` (absent inputs already re-inserted)."""
        value = onnx_inputs(self.node)[position]
        if value is None:
            raise self.error(f"input #{position} is absent")
        return value.type

    def _tensor(self, position: int) -> Any:
        if self.operands is None or position >= len(self.operands):
            return None
        return self.operands[position]

    def rank(self, position: int = 0) -> int:
        """The static rank of ONNX input ``position`` (IR type, else the TF tensor's); raises when unknown."""
        rank = self.in_type(position).rank
        if rank is None:
            tensor = self._tensor(position)
            rank = None if tensor is None else tensor.shape.rank
        if rank is None:
            raise self.error(f"input #{position} has unknown rank; lowering needs it")
        return rank

    def axis(self, axis: int, position: int = 0, added: int = 0) -> int:
        """``axis`` of ONNX input ``position`` made non-negative (the input's rank plus ``added`` new axes).

        A non-negative axis is returned as it is, so an input of unknown rank (its rank decided by
        data, as after ``Squeeze`` without axes) can still be lowered; a negative one needs the rank.
        """
        return axis if axis >= 0 else axis + self.rank(position) + added

    def static_shape(self, position: int = 0) -> tuple[int, ...]:
        """The static shape of ONNX input ``position``; raises when a dimension is not a number."""
        tensor_type = self.in_type(position)
        shape = tensor_type.shape
        if not is_static_shape(shape):
            tensor = self._tensor(position)
            if tensor is not None and tensor.shape.is_fully_defined():
                return tuple(int(d) for d in tensor.shape)
            raise self.error(f"input #{position} has type {tensor_type}; lowering needs a static shape")
        return tuple(int(d) for d in shape)

    def maybe_shape(self, position: int = 0) -> tuple[int | None, ...] | None:
        """The shape of ONNX input ``position`` with ``None`` for unknown dims (``None``: unknown rank)."""
        tensor_type = self.in_type(position)
        known: tuple[int | None, ...] | None = None
        if tensor_type.shape is not None:
            known = tuple(d if isinstance(d, int) else None for d in tensor_type.shape)
            if all(d is not None for d in known):
                return known
        tensor = self._tensor(position)
        if tensor is not None and tensor.shape.rank is not None:
            return tuple(tensor.shape.as_list())
        return None if tensor_type.shape is None else known

    def present(self, results: list[Any]) -> list[Any]:
        """``results`` in ONNX output positions -> those of the node's present (named) outputs."""
        absent = set(cast("tuple[int, ...]", self.node.params.get("_absent_outputs", ())))  # positions
        kept = [r for k, r in enumerate(results) if k not in absent]
        return kept[: len(self.node.outputs)]

    def const(self, position: int) -> np.ndarray | None:
        """The value of ONNX input ``position`` when it is a constant (else ``None``)."""
        return _const_array(self, position)

    def unsupported(self, message: str) -> BackendError:
        """A :class:`BackendError` for a case TensorFlow cannot express (the message says why)."""
        return self.error(f"cannot be expressed in TensorFlow: {message}")

    def out_shape(self, position: int = 0) -> tuple[int, ...]:
        """The static shape of result ``position``; raises when it is not static."""
        tensor_type = self.node.outputs[position].type
        shape = tensor_type.shape
        if not is_static_shape(shape):
            raise self.error(f"result #{position} has type {tensor_type}; lowering needs a static shape")
        return tuple(int(d) for d in shape)


def onnx_inputs(node: Node) -> list[Value | None]:
    """The node's operands at their ONNX positions: ``None`` where ``_absent_inputs`` records a gap."""
    absent = node.params.get("_absent_inputs", ())
    if not absent:
        return list(node.inputs)
    gaps = set(cast("tuple[int, ...]", absent))  # positions
    values = iter(node.inputs)
    total = len(node.inputs) + len(gaps)
    return [None if k in gaps else next(values) for k in range(total)]


def tf_dtype(tf: Any, tensor_type: TensorType) -> Any:
    """The TensorFlow dtype of an IR tensor type; ``KeyError`` when numpy has no such type."""
    if tensor_type.dtype.short == "str":
        return tf.string
    if tensor_type.dtype.short == "bf16":
        return tf.bfloat16
    return tf.as_dtype(np.dtype(numpy_dtype(tensor_type.dtype)))


def _onnx_elem_dtype(tf: Any, elem_type: int) -> Any:
    import onnx

    return tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _arg(operands: list[Any], position: int) -> Any:
    return operands[position] if position < len(operands) else None


def _norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _tf_fn(tf: Any, path: str) -> Callable[..., Any]:
    target = tf
    for part in path.split("."):
        target = getattr(target, part)
    return target


def _per_channel(tf: Any, value: Any, rank: int) -> Any:
    """A [C] tensor shaped [C, 1, ...] to broadcast against N,C,... activations."""
    return tf.reshape(value, [-1] + [1] * (rank - 2))


def _axes(cx: OpContext, operands: list[Any], from_input_opset: int) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the constant input #1 (newer ones)."""
    if cx.opset < from_input_opset:
        axes = cx.param("axes")
        return None if axes is None else [int(a) for a in axes]
    value = onnx_inputs(cx.node)[1] if len(onnx_inputs(cx.node)) > 1 else None
    if value is None:
        return None
    array = _const_array(cx, 1)
    if array is not None:
        return [int(a) for a in array.reshape(-1)]
    raise cx.error("needs constant axes to be lowered")


def _axes_or_tensor(cx: OpContext, operands: list[Any], from_input_opset: int) -> list[int] | Any | None:
    """Like :func:`_axes`, but axes computed at run time come back as the (int64) tensor itself."""
    if cx.opset < from_input_opset or _arg(operands, 1) is None:
        return _axes(cx, operands, from_input_opset)
    array = _const_array(cx, 1)
    if array is not None:
        return [int(a) for a in array.reshape(-1)]
    return cx.tf.cast(cx.tf.reshape(operands[1], [-1]), cx.tf.int64)


def _int_vector(cx: OpContext, operands: list[Any], position: int) -> list[int] | Any | None:
    """ONNX input ``position`` as ints when it is a constant, else as a flat int64 tensor (``None``: absent)."""
    if _arg(operands, position) is None:
        return None
    array = _const_array(cx, position)
    if array is not None:
        return [int(v) for v in array.reshape(-1)]
    return cx.tf.cast(cx.tf.reshape(operands[position], [-1]), cx.tf.int64)


def _vector_length(cx: OpContext, position: int) -> int:
    """The static length of the 1-D ONNX input ``position`` (its IR type, else its TF tensor's shape)."""
    shape = cx.maybe_shape(position)
    if shape is None or len(shape) != 1 or shape[0] is None:
        raise cx.error(f"input #{position} needs a static length to be lowered")
    return int(shape[0])


def _const_array(cx: OpContext, position: int) -> np.ndarray | None:
    """The value of ONNX input ``position`` when it is a constant (an initializer or a ``Constant`` node)."""
    inputs = onnx_inputs(cx.node)
    value = inputs[position] if position < len(inputs) else None
    if value is None:
        return None
    if value.const is not None:
        try:
            return np.asarray(value.const.numpy())
        except ValueError:
            return None
    producer = value.producer
    if producer is not None and producer.op == "onnx.Constant":
        data = producer.params.get("value")
        if isinstance(data, DenseTensor):
            return np.asarray(data.numpy())
        for key, dtype in (("value_int", np.int64), ("value_ints", np.int64), ("value_float", np.float32)):
            if key in producer.params:
                return np.asarray(producer.params[key], dtype=dtype)
    return None


def _required_const(cx: OpContext, position: int, what: str) -> list[int]:
    array = _const_array(cx, position)
    if array is None:
        raise cx.error(f"needs constant {what} (input #{position}) to be lowered")
    return [int(v) for v in array.reshape(-1)]
