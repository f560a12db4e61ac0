"""TensorFlow attr values and dtypes as graphir params and types, both ways, and loading TensorFlow.

Part of the TensorFlow importer (:mod:`graphir.importers.tf` documents the mapping): decoding a
``NodeDef`` attr into a param (:func:`_tensor_param`, :func:`_shape_param`, the dtype tables),
:class:`AttrWriter` for the way back (params to ``AttrValue`` protos, used to re-export a module as a
GraphDef), the variable helpers :func:`variable_type` and :func:`persistent_bytes`, and
:func:`load_tensorflow`, the one quiet way in which graphir imports TensorFlow (the ``tf`` extra).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from graphir.attributes import DenseTensor, Opaque, ParamValue, dtype_from_numpy, numpy_dtype
from graphir.extras import require
from graphir.ir import Node
from graphir.ops.work import VARIABLE_OPS, variable_bytes
from graphir.types import DType, TensorType

if TYPE_CHECKING:
    from tensorflow.core.framework import types_pb2

    DataTypeEnum = types_pb2.DataType.ValueType


def _to_int(value: object) -> int:
    """``int(value)`` of a param (bool, int, float or numeric string); the same TypeError otherwise."""
    if isinstance(value, (int, float, str)):
        return int(value)
    kind = type(value).__name__
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, not '{kind}'")


def _to_float(value: object) -> float:
    """``float(value)`` of a param (bool, int, float or numeric string); the same TypeError otherwise."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def is_variable_op(op: str) -> bool:
    """Whether ``op`` is a TF variable op (``tf.`` + one of :data:`VARIABLE_OPS`)."""
    return op.startswith("tf.") and op[3:] in VARIABLE_OPS


UNKNOWN_RANK = "*"
"""How a ``shape`` param of unknown rank is written."""


# TF DataType enum -> (graphir dtype of values, param text). Filled on first use from tf.dtypes.
_DTYPES: dict[int, tuple[DType, str]] = {}


_GRAPHIR_BY_TF_NAME: dict[str, DType] = {
    "float16": DType.F16,
    "bfloat16": DType.BF16,
    "float32": DType.F32,
    "float64": DType.F64,
    "int8": DType.I8,
    "int16": DType.I16,
    "int32": DType.I32,
    "int64": DType.I64,
    "uint8": DType.U8,
    "uint16": DType.U16,
    "uint32": DType.U32,
    "uint64": DType.U64,
    "bool": DType.BOOL,
    "complex64": DType.C64,
    "complex128": DType.C128,
    "string": DType.STRING,
    "resource": DType.RESOURCE,
    "variant": DType.VARIANT,
    "float8_e4m3fn": DType.F8E4M3,
    "float8_e5m2": DType.F8E5M2,
    "int4": DType.I4,
    "uint4": DType.U4,
    # Quantized types: same element size, kept under their TF name in params.
    "qint8": DType.I8,
    "quint8": DType.U8,
    "qint16": DType.I16,
    "quint16": DType.U16,
    "qint32": DType.I32,
}


TF_DTYPE_NAMES: dict[DType, str] = {d: n for n, d in _GRAPHIR_BY_TF_NAME.items() if not n.startswith("q")}
"""graphir dtype -> TensorFlow dtype name (the inverse of the import mapping, quantized names aside)."""


def variable_type(node: Node) -> TensorType | None:
    """The type of the variable a handle-creating node holds, or ``None`` when it is not one.

    A node is a variable when its op is in :data:`VARIABLE_OPS` (``tf.VarHandleOp``...) and its
    params have a ``dtype`` and a ``shape``. Unknown dims are ``None`` in the result.
    """
    if not is_variable_op(node.op):
        return None
    dtype_text = node.params.get("dtype")
    shape = node.params.get("shape")
    if not isinstance(dtype_text, str) or shape is None:
        return None
    dtype = _dtype_from_param(dtype_text)
    if dtype is None:
        return None
    if shape == UNKNOWN_RANK or not isinstance(shape, tuple):
        return TensorType(dtype, None)
    return TensorType(dtype, tuple(None if d < 0 else d for d in shape))


def persistent_bytes(node: Node) -> int:
    """Bytes of the variable ``node`` creates (0 for other nodes or a variable of unknown shape).

    The op library's :func:`graphir.ops.variable_bytes` sizes it, as the profile does.
    """
    return variable_bytes(node) if is_variable_op(node.op) else 0


def _dtype_from_param(text: str) -> DType | None:
    try:
        return DType.from_short(text)
    except KeyError:
        return _GRAPHIR_BY_TF_NAME.get(text)


def load_tensorflow(what: str = "TensorFlow support") -> Any:
    """Import TensorFlow quietly (native start-up log lines dropped) and return the module.

    Args:
        what: the feature that needs TensorFlow, named in the error when it is missing.

    Raises:
        MissingExtraError: TensorFlow (the ``tf`` extra) is not installed or fails to import.
    """
    module = sys.modules.get("tensorflow")
    if module is not None:
        return module
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        return require("tensorflow", "tf", what)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _op_def_registry() -> Any:
    """TensorFlow's ``op_def_registry`` module (TensorFlow imported).

    Imported by name: types-tensorflow has no stub for it, and a ``from ... import`` of it would make
    pyright resolve the rest of ``tensorflow`` in this module without the stubs.
    """
    return importlib.import_module("tensorflow.python.framework.op_def_registry")


def tf_op_registered(op_type: str) -> bool:
    """Whether this TensorFlow registers the op type ``op_type`` (its ``OpDef`` is in the registry)."""
    load_tensorflow("checking a model's ops against TensorFlow's registry")
    op_def_registry = _op_def_registry()

    return op_def_registry.get(op_type) is not None


def library_nodes(data: bytes) -> list[tuple[str, str, str, dict[str, Any]]]:
    """``(function, node, op type, string params)`` of every node of a serialized ``FunctionDefLibrary``.

    The params are the node's ``string`` and ``list(string)`` attrs (what the run guard's
    parameter rules read, :mod:`graphir.runguard`); an unreadable library is one entry of op
    ``"<unreadable FunctionDefLibrary>"``, which no registry holds.
    """
    load_tensorflow("checking a model's function library")
    from tensorflow.core.framework import function_pb2

    library = function_pb2.FunctionDefLibrary()
    try:
        library.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        return [("<library>", "<library>", "<unreadable FunctionDefLibrary>", {})]
    out: list[tuple[str, str, str, dict[str, Any]]] = []
    for function in library.function:
        for node in function.node_def:
            params: dict[str, Any] = {}
            for key, attr in node.attr.items():
                if attr.WhichOneof("value") == "s":
                    params[key] = attr.s.decode("utf-8", "replace")
                elif attr.WhichOneof("value") == "list" and attr.list.s:
                    params[key] = tuple(item.decode("utf-8", "replace") for item in attr.list.s)
            out.append((function.signature.name, node.name, node.op, params))
    return out


class AttrWriter:
    """IR params back to TensorFlow ``AttrValue``s: the inverse of the import conversion (see *Params*).

    Params lost their attr kind on import (a ``type`` attr ``"f32"`` and a ``string`` attr look alike,
    a ``shape`` and a ``list(int)`` too), so the kind comes from the op's registered ``OpDef``
    (:meth:`kinds`); private attrs (``_...``), which no OpDef declares, get the kind their Python value
    suggests. Conversions: ``type`` / ``list(type)`` from graphir short names (``"f32"``) or TensorFlow
    names (``"qint8"``); ``shape`` from a tuple of dims (``-1`` unknown) or ``"*"`` (unknown rank);
    ``tensor`` from a :class:`~graphir.attributes.DenseTensor` (raw bytes for bf16/float8/int4) or
    ``Opaque("tf.TensorProto")``; ``func`` from ``Opaque("tf.NameAttrList")``; other opaque values
    (``tf.AttrValue``, ``tf.bytes``) byte for byte. One builder serves the TF lowering
    (:mod:`graphir.backends.tf.tf_graphdef`) and ``profile{mode=tf}`` (:mod:`graphir.backends.tf.measure`).

    Methods raise ``ValueError`` with a message naming the problem; callers add the node and turn it
    into their own error kind.
    """

    def __init__(self) -> None:
        self.tf = load_tensorflow("importing a TensorFlow graph")
        from tensorflow.core.framework import attr_value_pb2, tensor_pb2, tensor_shape_pb2

        op_def_registry = _op_def_registry()

        self._attr_value_pb2 = attr_value_pb2
        self._tensor_pb2 = tensor_pb2
        self._tensor_shape_pb2 = tensor_shape_pb2
        self._registry = op_def_registry

    def kinds(self, op_type: str) -> dict[str, str]:
        """Attr name -> OpDef kind (``"int"``, ``"list(type)"``...) of a registered op."""
        op_def = self._registry.get(op_type)
        if op_def is None:
            raise ValueError(f"TensorFlow has no op '{op_type}' registered")
        return {attr.name: attr.type for attr in op_def.attr}

    def dtype_enum(self, text: Any) -> DataTypeEnum:
        """The ``DataType`` enum of a dtype param (``"f32"``, ``"resource"``, ``"qint8"``...)."""
        if not isinstance(text, str):
            raise ValueError(f"type attr {text!r} is not a dtype name")
        try:
            name = TF_DTYPE_NAMES[DType.from_short(text)]
        except KeyError:
            name = text  # quantized and other TensorFlow-only names are kept as TensorFlow spells them
        try:
            return self.tf.as_dtype(name).as_datatype_enum
        except TypeError:
            raise ValueError(f"unknown dtype '{text}'") from None

    def shape(self, value: Any) -> Any:
        """A ``TensorShapeProto`` from a tuple of dims (``-1``: unknown) or ``"*"`` (unknown rank)."""
        proto = self._tensor_shape_pb2.TensorShapeProto()
        if value == UNKNOWN_RANK:
            proto.unknown_rank = True
            return proto
        for dim in value:
            proto.dim.add(size=int(dim))
        return proto

    def tensor(self, value: Any) -> Any:
        """A ``TensorProto`` from a :class:`~graphir.attributes.DenseTensor` or ``Opaque("tf.TensorProto")``."""
        if isinstance(value, Opaque):
            proto = self._tensor_pb2.TensorProto()
            proto.ParseFromString(value.data)
            return proto
        if not isinstance(value, DenseTensor):
            raise ValueError(f"tensor attr of unexpected kind {type(value).__name__}")
        if isinstance(value.data, tuple):
            shape = cast(tuple[int, ...], value.type.shape or ())  # a dense tensor's type is static
            return self.tf.make_tensor_proto(np.array([s.encode() for s in value.data], dtype=object).reshape(shape))
        try:
            numpy_dtype(value.type.dtype)
        except KeyError:  # bf16, float8, int4: the element bytes as tensor_content
            proto = self._tensor_pb2.TensorProto(dtype=self.dtype_enum(value.type.dtype.short))
            proto.tensor_shape.CopyFrom(self.shape(value.type.shape or ()))
            proto.tensor_content = value.data
            return proto
        return self.tf.make_tensor_proto(value.numpy())

    def _func(self, value: Any) -> Any:
        proto = self._attr_value_pb2.NameAttrList()
        proto.ParseFromString(value.data)
        return proto

    def attr(self, value: ParamValue, kind: str | None) -> Any:
        """One ``AttrValue``; ``kind`` is the OpDef kind (``None``: guess it from the value)."""
        attr = self._attr_value_pb2.AttrValue()
        if isinstance(value, Opaque) and value.kind == "tf.AttrValue":
            attr.ParseFromString(value.data)
            return attr
        if kind is None:
            kind = _guess_kind(value)
        if kind.startswith("list("):
            inner = kind[5:-1]
            items = value if isinstance(value, tuple) else (value,)
            target = attr.list
            target.SetInParent()
            for item in items:
                if inner == "type":
                    target.type.append(self.dtype_enum(item))
                elif inner == "shape":
                    target.shape.add().CopyFrom(self.shape(item))
                elif inner == "int":
                    target.i.append(_to_int(item))
                elif inner == "float":
                    target.f.append(_to_float(item))
                elif inner == "bool":
                    target.b.append(bool(item))
                elif inner == "string":
                    target.s.append(item.data if isinstance(item, Opaque) else str(item).encode())
                elif inner == "tensor":
                    target.tensor.add().CopyFrom(self.tensor(item))
                elif inner == "func":
                    target.func.add().CopyFrom(self._func(item))
                else:
                    raise ValueError(f"unsupported attr kind {kind}")
            return attr
        if kind == "type":
            attr.type = self.dtype_enum(value)
        elif kind == "shape":
            attr.shape.CopyFrom(self.shape(value))
        elif kind == "int":
            attr.i = _to_int(value)
        elif kind == "float":
            attr.f = _to_float(value)
        elif kind == "bool":
            attr.b = bool(value)
        elif kind == "string":
            attr.s = value.data if isinstance(value, Opaque) else str(value).encode()
        elif kind == "tensor":
            attr.tensor.CopyFrom(self.tensor(value))
        elif kind == "func":
            attr.func.CopyFrom(self._func(value))
        else:
            raise ValueError(f"unsupported attr kind {kind}")
        return attr


def _guess_kind(value: ParamValue) -> str:
    """The attr kind a private attr's value suggests (no OpDef declares ``_``-prefixed attrs)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, DenseTensor) or (isinstance(value, Opaque) and value.kind == "tf.TensorProto"):
        return "tensor"
    if isinstance(value, Opaque) and value.kind == "tf.NameAttrList":
        return "func"
    if isinstance(value, tuple):
        first = value[0] if value else ""
        return f"list({_guess_kind(first)})"
    return "string"


def _flat_params(params: dict[str, ParamValue]) -> Iterator[Any]:
    for value in params.values():
        if isinstance(value, tuple):
            yield from value
        else:
            yield value


def _dtype(enum: int) -> tuple[DType, str]:
    """(graphir dtype for values, param text) of a TF DataType enum."""
    cached = _DTYPES.get(enum)
    if cached is not None:
        return cached
    import tensorflow as tf

    base = enum - 100 if enum > 100 else enum  # *_REF types (TF1 variables) use the base type
    try:
        name = tf.dtypes.as_dtype(base).name
    except TypeError:
        name = f"dtype{base}"
    dtype = _GRAPHIR_BY_TF_NAME.get(name, DType.VARIANT)
    text = dtype.short if name in _GRAPHIR_BY_TF_NAME and not name.startswith("q") else name
    _DTYPES[enum] = (dtype, text)
    return dtype, text


def _string(data: bytes) -> str | Opaque:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return Opaque("tf.bytes", bytes(data))


def _float32(value: float) -> float:
    """The shortest decimal reading back to the same float32 (TF stores attr floats as float32)."""
    return float(str(np.float32(value)))


def _shape_param(shape: Any) -> ParamValue:
    if shape.unknown_rank:
        return UNKNOWN_RANK
    return tuple(int(d.size) if d.size >= 0 else -1 for d in shape.dim)


def _num_elements(tensor: Any) -> int:
    count = 1
    for dim in tensor.tensor_shape.dim:
        count *= max(int(dim.size), 0)
    return count


def _tensor_param(tensor: Any) -> ParamValue:
    import tensorflow as tf

    dtype, _ = _dtype(tensor.dtype)
    if dtype in (DType.RESOURCE, DType.VARIANT):
        return Opaque("tf.TensorProto", tensor.SerializeToString())
    array = tf.make_ndarray(tensor)
    if dtype is DType.STRING:
        try:
            return DenseTensor(
                TensorType(DType.STRING, array.shape), tuple(s.decode("utf-8") for s in array.reshape(-1))
            )
        except (UnicodeDecodeError, AttributeError):
            return Opaque("tf.TensorProto", tensor.SerializeToString())
    try:
        dtype_from_numpy(array.dtype)
    except KeyError:  # bfloat16, float8, int4 (ml_dtypes): keep the element bytes
        return DenseTensor(TensorType(dtype, array.shape), np.ascontiguousarray(array).tobytes())
    return DenseTensor.from_numpy(array)


def _tensor_loader(tensor: Any) -> Callable[[], np.ndarray]:
    def load() -> np.ndarray:
        import tensorflow as tf

        return tf.make_ndarray(tensor)

    return load
