"""Import an ONNX model file into a graphir :class:`~graphir.ir.Module`.

Mapping (every ONNX construct lands somewhere; nothing is dropped silently):

* **Ops**: a node of op type ``Conv`` in the default domain becomes ``onnx.Conv``; other domains
  keep their name, ``onnx.<domain>.<OpType>`` (``onnx.com.microsoft.FusedConv``).
* **Params**: the ONNX attributes in their stored order. INT → ``int``, FLOAT → ``float`` (the
  shortest decimal that reads back to the same float32, so ``1e-3`` stays ``0.001``), STRING →
  ``str`` (UTF-8; undecodable bytes become ``Opaque("onnx.bytes", ...)``), INTS/FLOATS/STRINGS →
  tuples, TENSOR → :class:`~graphir.attributes.DenseTensor`, TENSORS → tuple of them, GRAPH /
  SPARSE_TENSOR / TYPE_PROTO → ``Opaque("onnx.GraphProto" | "onnx.SparseTensorProto" |
  "onnx.TypeProto", serialized bytes)`` and their plural forms → tuples of ``Opaque``.
* **Absent optional operands**: ONNX writes ``""`` for a missing optional input or output. Trailing
  empty names are dropped (they mean the same as omission); interior ones are dropped from the IR
  operand list and their ONNX positions recorded in the params ``_absent_inputs = [k, ...]`` /
  ``_absent_outputs = [k, ...]``, so a lowering re-inserts ``""`` exactly where it was.
* **Subgraphs**: values of the outer graph that a node's subgraphs read implicitly are appended as
  extra operands (the param ``_captured_inputs = N`` counts these trailing operands) so data
  dependencies stay exact for scheduling. The bodies of default-domain ``If``/``Loop``/``Scan``
  become **regions** (:mod:`graphir.regions`): each GRAPH attribute is a
  :class:`~graphir.regions.Region` param whose graph takes the subgraph's inputs then the captured
  values, holds its initializers and nodes (nested subgraphs imported the same way) and returns
  its outputs; types come from shape inference, which annotates subgraphs too. An ``If`` of the main
  graph whose condition is a compile-time constant (an initializer, ``Shape``/``Size`` of a static
  value, constants combined by ordinary ops) is replaced by its taken branch before typing
  (:mod:`graphir.importers.onnx_fold`), so its results get the branch's own types. Any other node with
  a GRAPH attribute stays opaque (its bodies ``Opaque`` params), with a warning naming it.
* **Initializers** become constants: up to :data:`graphir.attributes.INLINE_ELEMENTS` elements as
  a :class:`~graphir.attributes.DenseTensor`; larger ones as an :class:`~graphir.ir.ExternalTensor`
  whose loader converts the held ``TensorProto`` on demand (no weight bytes are copied at import).
  Graph inputs that are also initializers are constants, not inputs. Sparse initializers are
  constants too, densified by their loader.
* **External data** is not read at import: every referenced file is checked (exists, inside the
  model directory, long enough) so a missing file fails early with a clear error, and the loaders
  read the bytes lazily through ``onnx.numpy_helper.to_array(tensor, base_dir)``.
* **Types** come from ``onnx.shape_inference.infer_shapes(..., data_prop=True)``, run on a copy of
  the model that omits the data of large initializers (declared as typed inputs instead), so a
  multi-GB model is never re-serialized. When inference fails, a warning is printed and the
  declared ``value_info`` is used. A value with no inferred type gets ``TensorType(dtype, None)``
  (``f32[*]`` if even the dtype is unknown) and one summary warning line is printed. Symbolic
  dimensions keep their name when it is an identifier, else a sanitized unique one. Sequence, map
  and optional values are typed ``variant[*]``. ONNX element types graphir lacks (FNUZ float8,
  float4, float6, 2-bit ints) are imported as ``u8`` (same byte size per element) with a warning.
* **Text**: ONNX requires every name to be UTF-8; protobuf hands an undecodable one over as
  ``bytes``. Policy: such a model is refused before anything is built, with one line naming the
  node (or tensor) and the offending field, its undecodable bytes shown as hexadecimal escapes.
  Replacing the bytes instead would invent names that no longer match the model a lowering
  writes back.
* **Sizes**: a negative dimension, or a tensor beyond :data:`graphir.types.MAX_TENSOR_BYTES`
  (initializer, input, inferred value), is refused with the tensor's name.
* **Names**: value names are the ONNX names. A node keeps its ONNX name when that is non-empty and
  unique, else it is named after its first output (made unique by the graph).
* **Module**: named after the file stem (sanitized to an identifier); metadata ``producer``
  (when set), ``opset`` (``"ai.onnx:13"``, several domains comma-separated, default domain first,
  then sorted) and, when the model has local functions, ``functions`` (tuple of
  ``Opaque("onnx.FunctionProto", ...)``).

Warnings go to standard error, one line each, as ``<file>: warning: ...``. The input checks live in
:mod:`graphir.importers.onnx_checks`, the attribute conversion in :mod:`graphir.importers.onnx_attrs`.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from graphir.attributes import INLINE_ELEMENTS, DenseTensor, Opaque, ParamValue, dtype_from_numpy
from graphir.errors import ImportError_, Location, describe_exception, one_line_text
from graphir.gcpause import gc_paused
from graphir.importers.onnx_attrs import _AttributeConversion
from graphir.importers.onnx_checks import DATA_PROPAGATION_MAX_ELEMENTS as DATA_PROPAGATION_MAX_ELEMENTS
from graphir.importers.onnx_checks import _display, _InputChecks, _vectors_are_short
from graphir.importers.onnx_fold import resolve_constant_ifs
from graphir.ir import ExternalTensor, Graph, Module, Node, Value
from graphir.regions import Region
from graphir.types import Dim, DType, TensorType

__all__ = ["import_onnx"]

_DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.F32,
    TensorProto.UINT8: DType.U8,
    TensorProto.INT8: DType.I8,
    TensorProto.UINT16: DType.U16,
    TensorProto.INT16: DType.I16,
    TensorProto.INT32: DType.I32,
    TensorProto.INT64: DType.I64,
    TensorProto.STRING: DType.STRING,
    TensorProto.BOOL: DType.BOOL,
    TensorProto.FLOAT16: DType.F16,
    TensorProto.DOUBLE: DType.F64,
    TensorProto.UINT32: DType.U32,
    TensorProto.UINT64: DType.U64,
    TensorProto.COMPLEX64: DType.C64,
    TensorProto.COMPLEX128: DType.C128,
    TensorProto.BFLOAT16: DType.BF16,
    TensorProto.FLOAT8E4M3FN: DType.F8E4M3,
    TensorProto.FLOAT8E5M2: DType.F8E5M2,
    TensorProto.UINT4: DType.U4,
    TensorProto.INT4: DType.I4,
}
_STAND_IN_DTYPE = DType.U8
"""Used for ONNX element types graphir has no name for; every one of them is at most 1 byte."""

SHAPE_INFERENCE_DATA_ELEMENTS = 1024
"""Initializers up to this many elements keep their data in the model given to shape inference
(shape tensors, axes, pads... that data propagation needs); larger ones are passed as typed inputs."""

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NOT_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")
_DEFAULT_DOMAINS = ("", "ai.onnx")
_REGION_OPS = ("If", "Loop", "Scan")
"""Default-domain ops whose GRAPH attributes are imported as regions."""
_MAX_NAMES_IN_WARNING = 5


def import_onnx(path: Path) -> Module:
    """Read the ONNX model at ``path`` (protobuf, optionally with external data) as a Module.

    Args:
        path: the ``.onnx`` file; external data files are looked up relative to its directory.

    Returns:
        The module: one graph, named after the file stem, with ``producer``/``opset`` metadata.

    Raises:
        ImportError_: the file is missing, is not an ONNX model, references missing external data,
            defines a value twice or uses an undefined value (one-line message naming the file
            and, where relevant, the node).
    """
    with gc_paused():
        return _OnnxImporter(Path(path)).run()


def _sanitize_identifier(text: str, default: str) -> str:
    out = _NOT_IDENT_CHAR.sub("_", text)
    if not out:
        return default
    return "_" + out if out[0].isdigit() else out


def _op_name(domain: str, op_type: str) -> str:
    if domain in _DEFAULT_DOMAINS:
        return "onnx." + op_type
    return f"onnx.{domain}.{op_type}"


def _opset_text(model: onnx.ModelProto) -> str:
    entries = {("ai.onnx" if o.domain in _DEFAULT_DOMAINS else o.domain): o.version for o in model.opset_import}
    ordered = sorted(entries, key=lambda d: (d != "ai.onnx", d))
    return ",".join(f"{domain}:{entries[domain]}" for domain in ordered)


def _num_elements(dims: Iterable[int]) -> int:
    count = 1
    for dim in dims:
        count *= dim
    return count


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            graphs.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            graphs.extend(attr.graphs)
    return graphs


def nested_nodes(body: Opaque) -> list[tuple[str, str, str]]:
    """``(node name, domain, op type)`` of every node of a serialized subgraph or local function, nested ones too.

    ``body`` is an ``Opaque`` of kind ``onnx.GraphProto`` (an ``If``/``Loop``/``Scan`` body) or
    ``onnx.FunctionProto``; what cannot be parsed is one entry of domain ``"<unreadable>"``.
    """
    proto: onnx.GraphProto | onnx.FunctionProto
    proto = onnx.FunctionProto() if body.kind == "onnx.FunctionProto" else onnx.GraphProto()
    try:
        proto.ParseFromString(body.data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        return [(body.kind, "<unreadable>", body.kind)]
    out: list[tuple[str, str, str]] = []
    pending: list[Iterable[onnx.NodeProto]] = [proto.node]
    while pending:
        for node in pending.pop():
            out.append((node.name or node.op_type, node.domain, node.op_type))
            pending.extend(graph.node for graph in _subgraphs(node))
    return out


def function_names(body: Opaque) -> set[tuple[str, str]]:
    """``{(domain, name)}`` of a serialized ``onnx.FunctionProto`` (empty when unreadable)."""
    function = onnx.FunctionProto()
    try:
        function.ParseFromString(body.data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        return set()
    return {(function.domain, function.name)}


def _outer_references(graph: onnx.GraphProto) -> list[str]:
    """Names a subgraph reads without defining them (its implicit inputs), in first-use order."""
    defined: set[str] = {v.name for v in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    for node in graph.node:
        defined.update(node.output)
    found: dict[str, None] = {}
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                found.setdefault(name, None)
        for inner in _subgraphs(node):
            for name in _outer_references(inner):
                if name not in defined:
                    found.setdefault(name, None)
    for value in graph.output:
        if value.name and value.name not in defined:
            found.setdefault(value.name, None)
    return list(found)


def _densify(sparse: onnx.SparseTensorProto, base_dir: str) -> np.ndarray:
    """A dense numpy array of a sparse tensor (indices are [NNZ] linear or [NNZ, rank])."""
    values = numpy_helper.to_array(sparse.values, base_dir)
    indices = numpy_helper.to_array(sparse.indices, base_dir).astype(np.int64)
    shape = tuple(sparse.dims)
    dense = np.zeros(_num_elements(shape), dtype=values.dtype)
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape) if len(indices) else indices.reshape(-1)
    dense[indices.reshape(-1)] = values.reshape(-1)
    return dense.reshape(shape)


class _OnnxImporter(_InputChecks, _AttributeConversion):
    """One import: the file, the loaded model, the graph being built and the type caches."""

    def __init__(self, path: Path):
        self.path = path
        self.file = str(path)
        self.base_dir = str(path.parent)
        self._type_cache: dict[bytes, TensorType] = {}
        self._tensor_type_cache: dict[tuple[int, tuple[int, ...] | None], TensorType] = {}
        self._symbols: dict[str, str] = {}
        self._symbol_names: set[str] = set()
        self._warned_dtypes: set[int] = set()
        self._untyped: list[str] = []

    # ----------------------------------------------------------------- diagnostics
    def error(self, message: str, node: str | None = None) -> ImportError_:
        return ImportError_(message, Location(file=self.file, node=node))

    def warn(self, message: str, node: str | None = None) -> None:
        where = self.file if node is None else f"{self.file}:node '{node}'"
        sys.stderr.write(one_line_text(f"{where}: warning: {message}") + "\n")  # names may hold newlines

    # ----------------------------------------------------------------- driver
    def run(self) -> Module:
        model = self.load()
        self.check_text(model)
        self.check_sizes(model)
        self.check_external_data(model)
        resolve_constant_ifs(model, lambda: self.infer_types(model, quiet=True))
        types = self.infer_types(model)
        graph = self.build_graph(model, types)
        if self._untyped:
            shown = ", ".join(f"'{n}'" for n in self._untyped[:_MAX_NAMES_IN_WARNING])
            more = "" if len(self._untyped) <= _MAX_NAMES_IN_WARNING else ", ..."
            self.warn(
                f"{len(self._untyped)} value(s) have no inferred shape ({shown}{more}); "
                "imported with unknown rank (f32 when the element type is unknown too)"
            )
        metadata: dict[str, ParamValue] = {}
        producer = " ".join(p for p in (model.producer_name, model.producer_version) if p)
        if producer:
            metadata["producer"] = producer
        metadata["opset"] = _opset_text(model)
        if model.functions:
            metadata["functions"] = tuple(Opaque("onnx.FunctionProto", f.SerializeToString()) for f in model.functions)
        return Module(_sanitize_identifier(self.path.stem, "model"), graph, None, metadata)

    def load(self) -> onnx.ModelProto:
        if not self.path.exists():
            raise self.error("no such file")
        if not self.path.is_file():
            raise self.error("not a file")
        try:
            model = onnx.load_model(self.file, load_external_data=False)
        except Exception as exc:  # protobuf DecodeError, UnicodeDecodeError, OSError...
            raise self.error(f"not a readable ONNX model ({describe_exception(exc)})") from None
        if model.ir_version <= 0 or not model.HasField("graph"):
            raise self.error("not an ONNX model (no IR version or no graph)")
        return model

    # ----------------------------------------------------------------- types
    def infer_types(self, model: onnx.ModelProto, quiet: bool = False) -> dict[str, onnx.TypeProto]:
        """Types of every named value: shape inference on a data-light copy, else the declared ones.

        ``quiet``: no warning when inference fails (a first, tentative typing; the final one warns).
        """
        try:
            copy = self.inference_copy(model)
            inferred = onnx.shape_inference.infer_shapes(
                copy, check_type=False, strict_mode=False, data_prop=_vectors_are_short(copy)
            )
        except Exception as exc:  # inference is best effort: any failure falls back to value_info
            if not quiet:
                self.warn(f"shape inference failed, using the declared value_info ({describe_exception(exc)})")
            inferred = model
        types: dict[str, onnx.TypeProto] = {}
        pending = [inferred.graph]
        while pending:  # the main graph, then every subgraph (ONNX forbids shadowing outer names)
            graph = pending.pop()
            for infos in (graph.value_info, graph.output, graph.input):
                for info in infos:
                    if not info.name or not info.HasField("type"):
                        continue
                    known = types.get(info.name)
                    if known is None or not _has_shape(known):
                        types[info.name] = info.type
            pending.extend(sub for node in graph.node for sub in _subgraphs(node))
        return types

    def inference_copy(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """The model without the data of large initializers (declared as typed inputs instead).

        Shape inference serializes its argument; weights would be copied twice and a model over
        2 GB would not serialize at all. Only small tensors (shapes, axes) matter to inference.
        """
        source = model.graph
        copy = onnx.ModelProto(
            ir_version=max(model.ir_version, 4),  # IR >= 4: initializers need not be graph inputs
            opset_import=model.opset_import,
            functions=model.functions,
        )
        graph = copy.graph
        graph.name = source.name
        graph.node.extend(source.node)
        graph.input.extend(source.input)
        graph.output.extend(source.output)
        graph.value_info.extend(source.value_info)
        declared = {v.name for v in source.input}
        for tensor in source.initializer:
            small = _num_elements(tensor.dims) <= SHAPE_INFERENCE_DATA_ELEMENTS
            if small and tensor.data_location != TensorProto.EXTERNAL:
                graph.initializer.append(tensor)
            elif small and (loaded := self._loaded_copy(tensor)) is not None:
                graph.initializer.append(loaded)
            elif tensor.name not in declared:
                graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims))
        for sparse in source.sparse_initializer:
            if sparse.values.name not in declared:
                graph.input.append(
                    onnx.helper.make_tensor_value_info(sparse.values.name, sparse.values.data_type, sparse.dims)
                )
        return copy

    def _loaded_copy(self, tensor: TensorProto) -> TensorProto | None:
        """A copy of a small external tensor with its data inline (``None`` when it cannot be read)."""
        try:
            return numpy_helper.from_array(self.tensor_array(tensor), tensor.name)
        except Exception:  # inference then sees its type only; the constant itself reports errors
            return None

    def dtype(self, elem_type: int) -> DType | None:
        dtype = _DTYPES.get(elem_type)
        if dtype is not None or elem_type == TensorProto.UNDEFINED:
            return dtype
        if elem_type not in self._warned_dtypes:
            self._warned_dtypes.add(elem_type)
            name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
            self.warn(f"ONNX element type {name} has no graphir dtype; imported as {_STAND_IN_DTYPE.short} (same size)")
        return _STAND_IN_DTYPE

    def symbol(self, name: str) -> str:
        """A symbolic dimension as an identifier; distinct ONNX names stay distinct."""
        self.check_utf8(name, "symbolic dimension")
        known = self._symbols.get(name)
        if known is not None:
            return known
        symbol = name if _IDENT.match(name) else _sanitize_identifier(name, "dim")
        base, k = symbol, 0
        while symbol in self._symbol_names:
            k += 1
            symbol = f"{base}_{k}"
        self._symbols[name] = symbol
        self._symbol_names.add(symbol)
        return symbol

    def value_type(self, name: str, type_proto: onnx.TypeProto | None) -> TensorType:
        """The TensorType of a value (cached per distinct TypeProto); records untyped values."""
        if type_proto is None:
            self._untyped.append(name)
            return self.tensor_type(TensorProto.FLOAT, None)
        key = type_proto.SerializeToString()
        cached = self._type_cache.get(key)
        if cached is None:
            cached = self._convert_type(type_proto)
            self._type_cache[key] = cached
            problem = cached.size_error()
            if problem is not None:
                raise self.error(f"value '{name}': {problem}")
        if cached.shape is None and cached.dtype is not DType.VARIANT:
            self._untyped.append(name)
        return cached

    def _convert_type(self, type_proto: onnx.TypeProto) -> TensorType:
        kind = type_proto.WhichOneof("value")
        if kind not in ("tensor_type", "sparse_tensor_type"):
            return TensorType(DType.VARIANT, None)  # sequence, map, optional: not a plain tensor
        tensor = getattr(type_proto, kind)
        dtype = self.dtype(tensor.elem_type) or DType.F32
        if not tensor.HasField("shape"):
            return TensorType(dtype, None)
        dims: list[Dim] = []
        for dim in tensor.shape.dim:
            which = dim.WhichOneof("value")
            if which == "dim_value" and dim.dim_value >= 0:
                dims.append(dim.dim_value)
            elif which == "dim_param" and dim.dim_param:
                dims.append(self.symbol(dim.dim_param))
            else:
                dims.append(None)
        return TensorType(dtype, tuple(dims))

    def tensor_type(self, elem_type: int, dims: tuple[int, ...] | None) -> TensorType:
        key = (elem_type, dims)
        cached = self._tensor_type_cache.get(key)
        if cached is None:
            cached = TensorType(self.dtype(elem_type) or DType.F32, dims)
            self._tensor_type_cache[key] = cached
        return cached

    # ----------------------------------------------------------------- tensors
    def tensor_array(self, tensor: TensorProto) -> np.ndarray:
        """The tensor's data (external data read now, relative to the model directory)."""
        return numpy_helper.to_array(tensor, self.base_dir)

    def dense(self, tensor: TensorProto, tensor_type: TensorType | None = None) -> DenseTensor:
        """A DenseTensor copy of ``tensor`` (raw bytes kept for dtypes numpy cannot name)."""
        array = self.tensor_array(tensor)
        tensor_type = tensor_type or self.tensor_type(tensor.data_type, tuple(tensor.dims))
        if tensor_type.dtype is DType.STRING:
            return DenseTensor(tensor_type, tuple(str(s) for s in array.reshape(-1)))
        try:
            dtype_from_numpy(array.dtype)
        except KeyError:  # bf16, float8, int4 through ml_dtypes: keep the element bytes
            return DenseTensor(tensor_type, np.ascontiguousarray(array).tobytes())
        return DenseTensor.from_numpy(array)

    def tensor_loader(self, tensor: TensorProto) -> Callable[[], np.ndarray]:
        base_dir = self.base_dir

        def load() -> np.ndarray:
            try:
                return numpy_helper.to_array(tensor, base_dir)
            except (ValueError, TypeError, OSError) as exc:  # data that does not fill the declared dims...
                raise self.error(
                    f"initializer '{tensor.name}' cannot be read as declared ({describe_exception(exc)})"
                ) from None

        return load

    def sparse_loader(self, sparse: onnx.SparseTensorProto) -> Callable[[], np.ndarray]:
        base_dir = self.base_dir

        def load() -> np.ndarray:
            try:
                return _densify(sparse, base_dir)
            except (ValueError, TypeError, IndexError, OSError) as exc:
                name = sparse.values.name
                raise self.error(
                    f"sparse initializer '{name}' cannot be read as declared ({describe_exception(exc)})"
                ) from None

        return load

    # ----------------------------------------------------------------- graph
    def build_graph(self, model: onnx.ModelProto, types: dict[str, onnx.TypeProto]) -> Graph:
        """Constants, inputs, nodes and outputs of the model's main graph."""
        source = model.graph
        graph = Graph(source.name or "main")
        values: dict[str, Value] = {}

        def check_new(name: str, what: str, node: str | None = None) -> None:
            if name in values:
                raise self.error(f"value '{name}' is defined twice: by {_definer(values[name])} and by {what}", node)

        for tensor in source.initializer:
            check_new(tensor.name, f"initializer '{tensor.name}'")
            tensor_type = self.initializer_type(tensor.name, tensor.data_type, tensor.dims, "initializer")
            data: DenseTensor | ExternalTensor
            if _num_elements(tensor.dims) <= INLINE_ELEMENTS:
                try:
                    data = self.dense(tensor, tensor_type)
                except Exception as exc:  # malformed tensor payload
                    raise self.error(
                        f"initializer '{tensor.name}' cannot be read ({describe_exception(exc)})"
                    ) from None
            else:
                data = ExternalTensor(tensor_type, self.tensor_loader(tensor))
            values[tensor.name] = graph.add_constant(tensor.name, tensor_type, data)
        for sparse in source.sparse_initializer:
            name = sparse.values.name
            check_new(name, f"sparse initializer '{name}'")
            tensor_type = self.initializer_type(name, sparse.values.data_type, sparse.dims, "sparse initializer")
            values[name] = graph.add_constant(
                name, tensor_type, ExternalTensor(tensor_type, self.sparse_loader(sparse))
            )
        constants = set(values)
        for info in source.input:
            if info.name in constants:
                continue  # an initializer listed as input (IR < 4, or an overridable default): a constant
            check_new(info.name, f"graph input '{info.name}'")
            values[info.name] = graph.add_input(info.name, self.value_type(info.name, types.get(info.name)))

        self.add_nodes(source, graph, types, values)

        outputs: list[Value] = []
        for info in source.output:
            value = values.get(info.name)
            if value is None:
                raise self.error(f"graph output '{info.name}' is not defined by any node, input or initializer")
            outputs.append(value)
        graph.set_outputs(outputs)
        return graph

    def add_nodes(
        self,
        source: onnx.GraphProto,
        graph: Graph,
        types: dict[str, onnx.TypeProto],
        values: dict[str, Value],
    ) -> None:
        """Create every node; operands defined further down the file are wired at the end.

        ``values`` maps every name defined so far to its value and is extended with the results.
        """
        name_counts = Counter(node.name for node in source.node)
        op_names: dict[tuple[str, str], str] = {}
        deferred: list[tuple[Node, list[str], str]] = []
        for onnx_node in source.node:
            outputs = list(onnx_node.output)
            inputs = list(onnx_node.input)
            label = onnx_node.name
            if type(label) is bytes:
                raise self.node_text_error(onnx_node)
            if label and name_counts[label] != 1:
                label = ""
            params: dict[str, ParamValue] = {}
            if onnx_node.attribute:
                display = _display(label, outputs, onnx_node.op_type)
                params = self.node_params(onnx_node, inputs, display, types, values)
            if (inputs and not inputs[-1]) or "" in inputs:
                while inputs and not inputs[-1]:
                    inputs.pop()
                if "" in inputs:
                    params["_absent_inputs"] = tuple(k for k, n in enumerate(inputs) if not n)
                    inputs = [n for n in inputs if n]
            if (outputs and not outputs[-1]) or "" in outputs:
                while outputs and not outputs[-1]:
                    outputs.pop()
                if "" in outputs:
                    params["_absent_outputs"] = tuple(k for k, n in enumerate(outputs) if not n)
                    outputs = [n for n in outputs if n]
            for out in outputs:
                if type(out) is bytes:
                    raise self.node_text_error(onnx_node)
                if out in values or (len(outputs) > 1 and outputs.count(out) > 1):
                    display = _display(label, outputs, onnx_node.op_type)
                    previous = _definer(values[out]) if out in values else f"node '{display}'"
                    raise self.error(f"value '{out}' is defined twice: by {previous} and by node '{display}'", display)
            op_key = (onnx_node.domain, onnx_node.op_type)
            op = op_names.get(op_key)
            if op is None:
                if bytes in (type(onnx_node.domain), type(onnx_node.op_type)):
                    raise self.node_text_error(onnx_node)
                op = op_names[op_key] = _op_name(*op_key)
            operands = [values.get(n) for n in inputs]
            ready = None not in operands
            node = graph.add_node(
                op,
                cast(list[Value], operands) if ready else (),  # ready: no None among them
                [self.value_type(out, types.get(out)) for out in outputs],
                name=label or (outputs[0] if outputs else None),
                output_names=outputs,
                params=params,
            )
            display = _display(label, outputs, onnx_node.op_type)
            node.loc = Location(file=self.file, node=display)  # graph-level errors (cycles) name file and node
            if not ready:
                deferred.append((node, inputs, display))
            values.update(zip(outputs, node.outputs, strict=True))
        for node, inputs, display in deferred:
            for name in inputs:
                value = values.get(name)
                if value is None:
                    self.check_utf8(name, "operand name", display)
                    raise self.error(f"'{node.op}' uses undefined value '{name}'", display)
                node.add_input(value)

    def node_params(
        self,
        onnx_node: onnx.NodeProto,
        inputs: list[str],
        display: str,
        types: dict[str, onnx.TypeProto] | None = None,
        values: dict[str, Value] | None = None,
    ) -> dict[str, ParamValue]:
        """The params of a node with attributes; subgraph captures are appended to ``inputs``.

        The subgraphs of ``If``/``Loop``/``Scan`` become regions (``types``: every value's inferred
        type; ``values``: the values defined so far in the enclosing graph, which captures name).
        """
        if any(type(attr.name) is bytes for attr in onnx_node.attribute):
            raise self.node_text_error(onnx_node)
        try:
            params = self.params(onnx_node)
        except Exception as exc:  # a malformed TENSOR attribute, unreadable external data...
            message = f"cannot read the attributes of '{onnx_node.op_type}' ({describe_exception(exc)})"
            raise self.error(message, display) from None
        subgraphs = _subgraphs(onnx_node)
        if not subgraphs:
            return params
        as_regions = onnx_node.domain in _DEFAULT_DOMAINS and onnx_node.op_type in _REGION_OPS and values is not None
        if not as_regions:
            self.warn(f"'{onnx_node.op_type}' has {len(subgraphs)} subgraph(s); imported as an opaque node", display)
        # Every name a subgraph reads from outside, even one the node also takes as an operand:
        # a region sees nothing of the enclosing graph but its captures.
        captured = list(dict.fromkeys(n for g in subgraphs for n in _outer_references(g)))
        inlined: dict[str, DenseTensor] = {}
        if not as_regions:
            local = set(inputs)
            captured = [n for n in captured if n not in local]
        else:
            assert values is not None
            for name in captured:
                data = _small_constant(values.get(name))
                if data is not None:
                    inlined[name] = data
            captured = [n for n in captured if n not in inlined]
        if captured:
            params["_captured_inputs"] = len(captured)
            while inputs and not inputs[-1]:
                inputs.pop()  # trailing "" are dropped anyway; interior ones stay recorded
            inputs.extend(captured)
        if as_regions:
            assert values is not None
            for attr in onnx_node.attribute:
                if attr.type == AttributeProto.GRAPH:
                    region = self.build_region(attr.name, attr.g, captured, inlined, types or {}, values, display)
                    params[attr.name] = Region(region)
        return params

    def build_region(
        self,
        name: str,
        source: onnx.GraphProto,
        captured: list[str],
        inlined: dict[str, DenseTensor],
        types: dict[str, onnx.TypeProto],
        outer: dict[str, Value],
        display: str,
    ) -> Graph:
        """The region graph of subgraph ``source``: its inputs, then the ``captured`` outer values, its nodes.

        Small outer constants the subgraph reads (``inlined``: axes, shapes, scalars) are copied into
        the region as its own constants rather than captured, so ops that need them as static data
        (``Unsqueeze``'s axes, ``Reshape``'s shape) still see constants.
        """
        graph = Graph(name)
        values: dict[str, Value] = {}
        for capture, data in inlined.items():
            values[capture] = graph.add_constant(capture, data.type, data)
        for info in source.input:
            declared = info.type if info.HasField("type") else None
            values[info.name] = graph.add_input(info.name, self.value_type(info.name, types.get(info.name, declared)))
        for capture in captured:
            value = outer.get(capture)
            if value is None:
                raise self.error(
                    f"a subgraph of '{display}' reads '{capture}', which is not defined before it", display
                )
            if capture in values:
                raise self.error(f"a subgraph of '{display}' redefines the outer value '{capture}'", display)
            values[capture] = graph.add_input(capture, value.type)
        for tensor in source.initializer:
            tensor_type = self.initializer_type(tensor.name, tensor.data_type, tensor.dims, "initializer")
            values[tensor.name] = graph.add_constant(tensor.name, tensor_type, self.dense(tensor, tensor_type))
        self.add_nodes(source, graph, types, values)
        outputs = []
        for info in source.output:
            value = values.get(info.name)
            if value is None:
                raise self.error(f"subgraph '{name}' output '{info.name}' is not defined", display)
            outputs.append(value)
        graph.set_outputs(outputs)
        return graph


def _small_constant(value: Value | None) -> DenseTensor | None:
    """The data of ``value`` when it is a constant held inline (an initializer or ``Constant`` output)."""
    if value is None:
        return None
    if isinstance(value.const, DenseTensor):
        return value.const
    producer = value.producer
    if producer is not None and producer.op == "onnx.Constant" and len(producer.outputs) == 1:
        data = producer.params.get("value")
        if isinstance(data, DenseTensor) and data.type == value.type:
            return data
    return None


def _definer(value: Value) -> str:
    if value.producer is not None:
        return f"node '{value.producer.name}'"
    return f"{'initializer' if value.const is not None else 'graph input'} '{value.name}'"


def _has_shape(type_proto: onnx.TypeProto) -> bool:
    kind = type_proto.WhichOneof("value")
    return kind in ("tensor_type", "sparse_tensor_type") and getattr(type_proto, kind).HasField("shape")
