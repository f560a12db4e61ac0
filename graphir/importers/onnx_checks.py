"""Input checks of the ONNX importer, run before anything is built (see :mod:`graphir.importers.onnx`).

* **Text**: every name must be UTF-8 (protobuf hands an undecodable one over as ``bytes``); such a
  model is refused with one line naming the node or tensor and the field.
* **Sizes**: negative dimensions and tensors beyond :data:`graphir.types.MAX_TENSOR_BYTES`
  (initializers, declared inputs, outputs and value_info) are refused by name, before ONNX shape
  inference allocates along them; :func:`_vectors_are_short` decides whether data propagation is safe.
* **External data**: every referenced file must exist inside the model directory and be long enough.

:class:`_InputChecks` is a mixin of the importer class; it uses the importer's ``path``, ``error``,
``tensor_type`` and ``_convert_type``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto
from onnx.external_data_helper import ExternalDataInfo

from graphir.errors import ImportError_, describe_exception
from graphir.types import TensorType

__all__ = ["DATA_PROPAGATION_MAX_ELEMENTS"]


class _InputChecks:
    """The checks of :class:`graphir.importers.onnx._OnnxImporter` on the loaded model."""

    path: Path

    if TYPE_CHECKING:

        def error(self, message: str, node: str | None = None) -> ImportError_: ...

        def tensor_type(self, elem_type: int, dims: tuple[int, ...] | None) -> TensorType: ...

        def _convert_type(self, type_proto: onnx.TypeProto) -> TensorType: ...

    def check_text(self, model: onnx.ModelProto) -> None:
        """Refuse names that are not UTF-8 (protobuf returns them as ``bytes``), naming where.

        Covers the model, graph, initializer, input and output names here; a node's own names are
        checked where :meth:`add_nodes` reads them (one type test each, so large models pay
        nothing), symbolic dimensions in :meth:`symbol`.
        """
        for field in ("producer_name", "producer_version", "domain"):
            self.check_utf8(getattr(model, field), f"model {field.replace('_', ' ')}")
        for opset in model.opset_import:
            self.check_utf8(opset.domain, "opset domain")
        graph = model.graph
        self.check_utf8(graph.name, "graph name")
        for tensor in graph.initializer:
            self.check_utf8(tensor.name, "initializer name")
        for sparse in graph.sparse_initializer:
            self.check_utf8(sparse.values.name, "sparse initializer name")
        for what, infos in (("graph input", graph.input), ("graph output", graph.output)):
            for info in infos:
                self.check_utf8(info.name, f"{what} name")

    def check_utf8(self, value: object, what: str, node: str | None = None) -> None:
        """The text policy: a name protobuf could not decode (``bytes``) is an error naming ``what``."""
        if isinstance(value, bytes):
            shown = value.decode("utf-8", "backslashreplace")
            raise self.error(f"{what} '{shown}' is not valid UTF-8", node)

    def node_text_error(self, onnx_node: onnx.NodeProto) -> ImportError_:
        """The error for a node with an undecodable name, op type, domain, operand, result or attribute."""
        outputs = [o for o in onnx_node.output if type(o) is str]
        label = onnx_node.name if type(onnx_node.name) is str else ""
        op_type = onnx_node.op_type if type(onnx_node.op_type) is str else "?"
        where = _display(label, outputs, op_type)
        fields = [("node name", onnx_node.name), ("op type", onnx_node.op_type), ("op domain", onnx_node.domain)]
        fields += [("operand name", name) for name in onnx_node.input]
        fields += [("result name", name) for name in onnx_node.output]
        fields += [("attribute name", attr.name) for attr in onnx_node.attribute]
        for what, value in fields:
            self.check_utf8(value, what, where)
        raise AssertionError("node_text_error called on a node whose text is valid")

    def check_sizes(self, model: onnx.ModelProto) -> None:
        """Refuse negative or oversized initializers and declared types before shape inference sees them.

        ONNX shape inference allocates along declared dims: a value_info of 2**62 elements made it
        exhaust memory (std::bad_alloc) before any graphir check ran.
        """
        graph = model.graph
        for tensor in graph.initializer:
            self.initializer_type(tensor.name, tensor.data_type, tensor.dims, "initializer")
        for sparse in graph.sparse_initializer:
            self.initializer_type(sparse.values.name, sparse.values.data_type, sparse.dims, "sparse initializer")
        for what, infos in (
            ("graph input", graph.input),
            ("graph output", graph.output),
            ("value_info", graph.value_info),
        ):
            for info in infos:
                if info.HasField("type"):
                    problem = self._convert_type(info.type).size_error()
                    if problem is not None:
                        raise self.error(f"{what} '{info.name}': {problem}")

    def initializer_type(self, name: str, elem_type: int, dims: Iterable[int], what: str) -> TensorType:
        """The type of an initializer; negative dims and oversized tensors are refused by name."""
        shape = tuple(dims)
        negative = next((d for d in shape if d < 0), None)
        if negative is not None:
            raise self.error(f"{what} '{name}' has a negative dimension {negative} (dims {list(shape)})")
        tensor_type = self.tensor_type(elem_type, shape)
        problem = tensor_type.size_error()
        if problem is not None:
            raise self.error(f"{what} '{name}': {problem}")
        return tensor_type

    def check_external_data(self, model: onnx.ModelProto) -> None:
        """Fail early, with the tensor and file named, when external data cannot be read later."""
        base = self.path.parent.resolve()
        sizes: dict[Path, int] = {}
        tensors = list(model.graph.initializer)
        tensors.extend(s.values for s in model.graph.sparse_initializer)
        tensors.extend(s.indices for s in model.graph.sparse_initializer)
        for tensor in tensors:
            if tensor.data_location != TensorProto.EXTERNAL:
                continue
            try:
                info = ExternalDataInfo(tensor)
            except ValueError as exc:
                raise self.error(
                    f"initializer '{tensor.name}': bad external data entry ({describe_exception(exc)})"
                ) from None
            if not info.location:
                raise self.error(f"initializer '{tensor.name}': external data without a location")
            target = (base / info.location).resolve()
            if not target.is_relative_to(base):
                raise self.error(
                    f"initializer '{tensor.name}': external data file '{info.location}' is outside the model directory"
                )
            if target not in sizes:
                if not target.is_file():
                    raise self.error(f"initializer '{tensor.name}': external data file '{info.location}' not found")
                sizes[target] = target.stat().st_size
            end = (info.offset or 0) + (info.length or 0)
            if end > sizes[target]:
                raise self.error(
                    f"initializer '{tensor.name}': external data file '{info.location}' has {sizes[target]} bytes, "
                    f"the tensor needs bytes up to {end}"
                )


DATA_PROPAGATION_MAX_ELEMENTS = 1 << 20
"""ONNX data propagation computes the values of rank-1 tensors (shapes) in memory, as many as the
declared length: a rank-1 input of 2**40 elements made it allocate terabytes (std::bad_alloc at
best). Inference runs without data propagation when any declared rank-1 tensor is longer."""


def _vectors_are_short(model: onnx.ModelProto) -> bool:
    """True when no rank-1 tensor declared in ``model`` exceeds :data:`DATA_PROPAGATION_MAX_ELEMENTS`."""
    graph = model.graph
    for tensor in graph.initializer:
        if len(tensor.dims) == 1 and tensor.dims[0] > DATA_PROPAGATION_MAX_ELEMENTS:
            return False
    for infos in (graph.input, graph.value_info, graph.output):
        for info in infos:
            dims = info.type.tensor_type.shape.dim if info.type.HasField("tensor_type") else ()
            if len(dims) == 1 and dims[0].dim_value > DATA_PROPAGATION_MAX_ELEMENTS:
                return False
    return True


def _display(label: str, outputs: list[str], op_type: str) -> str:
    """How messages name a node: its unique ONNX name, else its first output, else its op type."""
    return label or next((o for o in outputs if o), op_type)
