"""ONNX attributes as graphir params: the attribute half of the ONNX importer.

:mod:`graphir.importers.onnx` documents the mapping (INT → ``int``, FLOAT → shortest float32
decimal, STRING → ``str`` or ``Opaque("onnx.bytes", ...)``, TENSOR → ``DenseTensor``, GRAPH /
SPARSE_TENSOR / TYPE_PROTO → ``Opaque`` of the serialized proto, plural kinds → tuples).
:class:`_AttributeConversion` is a mixin of the importer class; it uses the importer's ``dense``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto

from graphir.attributes import DenseTensor, Opaque, ParamValue
from graphir.types import TensorType

__all__: list[str] = []


def _float32_param(value: float) -> float:
    """The shortest decimal reading back to the same float32 (ONNX stores FLOAT as float32)."""
    return float(str(np.float32(value)))


class _AttributeConversion:
    """Attribute conversion of :class:`graphir.importers.onnx._OnnxImporter`."""

    if TYPE_CHECKING:

        def dense(self, tensor: TensorProto, tensor_type: TensorType | None = None) -> DenseTensor: ...

    def params(self, node: onnx.NodeProto) -> dict[str, ParamValue]:
        """The node's attributes as params, in their stored order."""
        return {attr.name: self.attribute(attr) for attr in node.attribute}

    def attribute(self, attr: AttributeProto) -> ParamValue:
        """One ONNX attribute as a param value (see the module docstring for the mapping)."""
        kind = attr.type
        if kind == AttributeProto.INT:
            return int(attr.i)
        if kind == AttributeProto.FLOAT:
            return _float32_param(attr.f)
        if kind == AttributeProto.STRING:
            return self.string(attr.s)
        if kind == AttributeProto.INTS:
            return tuple(attr.ints)
        if kind == AttributeProto.FLOATS:
            return tuple(_float32_param(f) for f in attr.floats)
        if kind == AttributeProto.STRINGS:
            return tuple(self.string(s) for s in attr.strings)
        if kind == AttributeProto.TENSOR:
            return self.dense(attr.t)
        if kind == AttributeProto.TENSORS:
            return tuple(self.dense(t) for t in attr.tensors)
        if kind == AttributeProto.GRAPH:
            return Opaque("onnx.GraphProto", attr.g.SerializeToString())
        if kind == AttributeProto.GRAPHS:
            return tuple(Opaque("onnx.GraphProto", g.SerializeToString()) for g in attr.graphs)
        if kind == AttributeProto.SPARSE_TENSOR:
            return Opaque("onnx.SparseTensorProto", attr.sparse_tensor.SerializeToString())
        if kind == AttributeProto.SPARSE_TENSORS:
            return tuple(Opaque("onnx.SparseTensorProto", t.SerializeToString()) for t in attr.sparse_tensors)
        if kind == AttributeProto.TYPE_PROTO:
            return Opaque("onnx.TypeProto", attr.tp.SerializeToString())
        if kind == AttributeProto.TYPE_PROTOS:
            return tuple(Opaque("onnx.TypeProto", t.SerializeToString()) for t in attr.type_protos)
        # UNDEFINED (very old files) or a future kind: keep the whole attribute.
        return Opaque("onnx.AttributeProto", attr.SerializeToString())

    @staticmethod
    def string(data: bytes) -> str | Opaque:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return Opaque("onnx.bytes", bytes(data))
