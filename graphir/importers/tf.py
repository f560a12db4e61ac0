"""Import TensorFlow graphs into a graphir :class:`~graphir.ir.Module`.

Three sources, one code path (each yields a ``GraphDef`` with its function library, which is then
flattened, shape-inferred by TensorFlow and converted):

* :func:`import_graphdef_file`: a frozen or plain ``GraphDef`` file (``.pb`` binary, ``.pbtxt`` text).
  A file called ``saved_model.pb`` is read as the SavedModel of its directory.
* :func:`import_saved_model`: a SavedModel directory. Its ``saved_model.pb`` is parsed directly
  (variables are never restored, so no weight is read): the meta graph tagged ``serve`` (else the
  first), the signature ``serving_default`` (else the first by name), and the part of the graph
  the signature's outputs depend on (data and control inputs); save/restore machinery is dropped.
* :func:`from_concrete_function`: the graph of a ``tf.function`` concrete function. Captured
  variables become ``VarHandleOp`` nodes (see *Variables*), captured eager constants ``Const`` nodes.

Mapping:

* **Ops**: every TF op becomes one node ``tf.<OpType>`` (``tf.Conv2DBackpropInput``,
  ``tf.ResourceApplyAdam``), named after the TF node. The one exception are weights: a ``Const``
  with more than :data:`graphir.attributes.INLINE_ELEMENTS` elements becomes a graph constant of the
  same name holding an :class:`~graphir.ir.ExternalTensor` (read lazily with ``tf.make_ndarray``),
  exactly like ONNX initializers; control edges into or out of such a constant are dropped (a
  constant is always ready). Hence ``len(graph) == ops - large Consts`` after inlining.
* **Functions** (``PartitionedCall``, ``StatefulPartitionedCall`` and direct calls of library
  functions, nested to any depth) are inlined, so the IR is one flat DAG. An inlined node is named
  ``<call node>/<body node>``; it inherits the call's device when it has none. The call's control
  inputs go to every body node that has no producer inside the body (except ``Const``), and a
  control dependency on the call (``^call``) becomes one on each of the body's control outputs and
  output producers. Functional control flow (``While``, ``If``, ``Case``...) is kept as an opaque
  node (its ``NameAttrList`` params are ``Opaque``; a warning names it) and the module metadata
  ``tf_library`` then holds the serialized ``FunctionDefLibrary`` so a backend can re-emit it.
* **Names**: output 0 of node ``n`` is the value ``%n``; output ``k > 0`` is ``%n#k``. TensorFlow's
  tensor name ``n:k`` is therefore ``n`` for ``k = 0`` and ``n#k`` otherwise (see
  :func:`tf_tensor_name`). TF node names never contain ``#``, so this never collides, and names
  print unquoted (``/``, ``.``, ``-`` and ``#`` are bare name characters in `.gir`).
* **Types**: from TensorFlow's shape inference, run by ``import_graph_def`` on the flattened graph
  (so shapes flow through inlined bodies and variable handles): unknown dims print ``?``, unknown
  rank ``[*]``. Resource handles are ``resource[]`` values (0 bytes), variants ``variant``.
* **Control inputs** (``^name``) become IR control dependencies (``ctrl(@name)``, zero-byte control
  edges in :meth:`graphir.ir.Graph.index`).
* **Params**: the node's attrs sorted by name. ``i`` -> int, ``f`` -> float (shortest float32
  text), ``b`` -> bool, ``s`` -> str (UTF-8; else ``Opaque("tf.bytes")``), ``type`` -> the graphir
  dtype short name (``"f32"``, ``"resource"``; TF names such as ``"qint8"`` for the few graphir
  lacks), ``shape`` -> tuple of dims with ``-1`` for an unknown dim (``"*"`` for unknown rank),
  ``tensor`` -> :class:`~graphir.attributes.DenseTensor` (``Opaque("tf.TensorProto")`` for
  resource/variant/undecodable strings), ``func`` -> ``Opaque("tf.NameAttrList")``, ``list`` ->
  tuple. The requested device (``NodeDef.device``) is the param ``_device``; ``_output_shapes``
  is dropped (the types carry it) and ``_class`` becomes the ``colocate`` annotation.
* **Colocation**: ``_class = ["loc:@X"]`` puts the node in X's colocation group; groups are closed
  transitively (union-find) and every member, X included, gets ``colocate = "<name>"`` where the
  name is the smallest ``loc:@`` target of the group (X for an ordinary group). TensorFlow also runs
  every op that takes a resource handle (``ReadVariableOp``, ``ResourceApplyAdam``...) on the device
  of the handle's producer, whatever the GraphDef requests, so the importer records that rule too:
  :func:`colocate_resource_users` merges each resource producer and its users into one class. A
  training graph can therefore be fused and placed as imported; a placement that split a variable
  from its users could not run as placed.
* **Variables**: a resource variable is the node creating its handle (``tf.VarHandleOp``,
  ``tf.VariableV2``...) whose params keep the variable's ``dtype`` and ``shape``; its output is a
  ``resource[]`` value. :func:`variable_type` returns the variable's ``TensorType`` for such a
  node and :func:`persistent_bytes` its size: a profile pass sums these as persistent memory.
* **Graph outputs**: the signature's / concrete function's outputs. A GraphDef has no field for
  outputs, so :func:`concrete_function_graphdef` records them on the producing nodes as the attr
  ``_graphir_outputs = ["<position>:<output index>", ...]`` (TensorFlow ignores ``_``-prefixed
  attrs; the importer drops it from params): the zoo's ``.pb`` files import with the same outputs as
  :func:`from_concrete_function`. A GraphDef without that attr (any TF-written file) gets every
  result of every sink node (a node with no data or control user), in node order.

TensorFlow is imported lazily, inside the functions: importing this module does not load it. The
first import (:func:`load_tensorflow`) sets ``TF_CPP_MIN_LOG_LEVEL=3`` unless set and silences
standard error meanwhile: TensorFlow's native start-up banners (oneDNN, CUDA) would otherwise break
the driver's one-line errors.
Warnings go to standard error, one line each, as ``<source>: warning: ...``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphir.attributes import INLINE_ELEMENTS, DenseTensor, Opaque, ParamValue, dtype_from_numpy, numpy_dtype
from graphir.errors import ImportError_, Location, describe_exception
from graphir.extras import require
from graphir.gcpause import gc_paused
from graphir.ir import ExternalTensor, Graph, Module, Node, Value
from graphir.types import Dim, DType, TensorType
from graphir.unionfind import DisjointSets

if TYPE_CHECKING:
    from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2

__all__ = [
    "CALL_OPS",
    "OUTPUTS_ATTR",
    "TF_DTYPE_NAMES",
    "AttrWriter",
    "VARIABLE_OPS",
    "colocate_resource_users",
    "concrete_function_graphdef",
    "from_concrete_function",
    "import_graphdef",
    "import_graphdef_file",
    "import_saved_model",
    "load_tensorflow",
    "persistent_bytes",
    "tf_tensor_name",
    "variable_type",
]

CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
"""Ops that call a library function through their ``f`` attr; they are inlined."""

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "_VarHandlesOp"})
"""Ops whose ``dtype``/``shape`` params describe a variable (persistent memory)."""

UNKNOWN_RANK = "*"
"""How a ``shape`` param of unknown rank is written."""

OUTPUTS_ATTR = "_graphir_outputs"
"""NodeDef attr recording graph outputs in a GraphDef file: ``["<position>:<output index>", ...]``."""

_DROPPED_ATTRS = frozenset({"_output_shapes", "_class", OUTPUTS_ATTR})
_NOT_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")
_MAX_NAMES_IN_WARNING = 5

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


# --------------------------------------------------------------------------------- public helpers


def tf_tensor_name(value: Value) -> str:
    """TensorFlow's name ``node:k`` of an imported value (``%n`` is ``n:0``, ``%n#k`` is ``n:k``)."""
    if value.producer is None:
        return f"{value.name}:0"
    return f"{value.producer.name}:{value.output_index}"


def variable_type(node: Node) -> TensorType | None:
    """The type of the variable a handle-creating node holds, or ``None`` when it is not one.

    A node is a variable when its op is in :data:`VARIABLE_OPS` (``tf.VarHandleOp``...) and its
    params have a ``dtype`` and a ``shape``. Unknown dims are ``None`` in the result.
    """
    if not node.op.startswith("tf.") or node.op[3:] not in VARIABLE_OPS:
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


def colocate_resource_users(graph: Graph) -> int:
    """Put every resource-producing node and the nodes taking its handle in one ``colocate`` class.

    TensorFlow places an op that takes a resource handle on the device where the resource lives
    (the device of the handle's producer), so a variable, every read and update of it, and any
    ``Identity`` passing its handle on must share a device. Existing classes (the ``_class`` groups)
    are merged with the new ones. A merged class keeps the smallest existing class name; a class
    without one is named after its smallest resource root (a node that produces a resource and takes
    none: the variable), so the result is deterministic and a second call changes nothing. The
    importer runs it on every graph; :func:`graphir.backends.tf.tf_graphdef.colocate_resource_users`
    exposes it for modules parsed from text.

    Returns:
        The number of nodes whose ``colocate`` annotation changed.
    """
    # Keys (0, class) | (1, resource root) | (2, other node): the smallest key names the class.
    sets: DisjointSets[tuple[int, str]] = DisjointSets()
    nodes = list(graph.nodes)  # the result does not depend on the order

    def key(node: Node) -> tuple[int, str]:
        takes_resource = any(v.type.dtype is DType.RESOURCE for v in node.inputs)
        makes_resource = any(v.type.dtype is DType.RESOURCE for v in node.outputs)
        return (1 if makes_resource and not takes_resource else 2, node.name)

    keys = {node: key(node) for node in nodes}
    linked = False
    for node in nodes:
        for value in node.inputs:
            if value.type.dtype is DType.RESOURCE and value.producer is not None:
                sets.union(keys[node], keys[value.producer])
                linked = True
    if not linked:
        return 0
    for node in nodes:  # every member of a class, so that two classes merged by a variable stay whole
        if node.colocate is not None:
            sets.union(keys[node], (0, node.colocate))
    changed = 0
    for node in nodes:
        if keys[node] not in sets:
            continue
        name = sets.find(keys[node])[1]
        if node.colocate != name:
            node.colocate = name
            changed += 1
    return changed


def persistent_bytes(node: Node) -> int:
    """Bytes of the variable ``node`` creates (0 for other nodes or a variable of unknown shape)."""
    var_type = variable_type(node)
    return 0 if var_type is None else var_type.nbytes_or(0)


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


# --------------------------------------------------------------------------------- entry points


def import_graphdef_file(path: Path) -> Module:
    """Read a ``GraphDef`` file (binary ``.pb`` or text ``.pbtxt``) as a Module.

    Raises:
        ImportError_: the file is missing, is not a GraphDef, or TensorFlow rejects the graph.
    """
    path = Path(path)
    if path.name == "saved_model.pb" and (path.parent / "variables").is_dir():
        return import_saved_model(path.parent)
    file = str(path)
    if not path.is_file():
        raise ImportError_("no such file" if not path.exists() else "not a file", Location(file=file))
    load_tensorflow("importing a TensorFlow graph")
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    graph_def = graph_pb2.GraphDef()
    try:
        data = path.read_bytes()
        if path.suffix == ".pbtxt":
            text_format.Parse(data.decode("utf-8"), graph_def)
        else:
            graph_def.ParseFromString(data)
    except Exception as exc:  # DecodeError, ParseError, UnicodeDecodeError, OSError
        raise ImportError_(
            f"not a readable TensorFlow GraphDef ({describe_exception(exc)})", Location(file=file)
        ) from None
    _check_graphdef(graph_def, file)
    return import_graphdef(graph_def, name=_sanitize_identifier(path.stem, "graph"), source=file)


def import_saved_model(path: Path, signature: str | None = None) -> Module:
    """Read a SavedModel directory (without restoring its variables) as a Module.

    Args:
        path: the SavedModel directory (holding ``saved_model.pb`` or ``saved_model.pbtxt``).
        signature: the signature key; default ``serving_default``, else the first key by name.

    Raises:
        ImportError_: not a SavedModel, no signatures, an unknown signature, or a broken graph.
    """
    path = Path(path)
    file = str(path)
    loc = Location(file=file)
    if not path.exists():
        raise ImportError_("no such file or directory", loc)
    binary, text = path / "saved_model.pb", path / "saved_model.pbtxt"
    if not binary.is_file() and not text.is_file():
        raise ImportError_("not a SavedModel directory (no saved_model.pb or saved_model.pbtxt)", loc)
    load_tensorflow("importing a TensorFlow graph")
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    try:
        if binary.is_file():
            saved.ParseFromString(binary.read_bytes())
        else:
            text_format.Parse(text.read_text(), saved)
    except Exception as exc:
        raise ImportError_(f"not a readable SavedModel ({describe_exception(exc)})", loc) from None
    if not saved.meta_graphs:
        raise ImportError_("SavedModel has no meta graph", loc)
    meta = next((m for m in saved.meta_graphs if "serve" in m.meta_info_def.tags), saved.meta_graphs[0])
    signatures = {k: v for k, v in meta.signature_def.items() if not k.startswith("__")}
    if not signatures:
        raise ImportError_("SavedModel has no signatures (save it with tf.saved_model.save(..., signatures=...))", loc)
    if signature is None:
        signature = "serving_default" if "serving_default" in signatures else sorted(signatures)[0]
    if signature not in signatures:
        known = ", ".join(sorted(signatures))
        raise ImportError_(f"SavedModel has no signature '{signature}' (known: {known})", loc)
    sig = signatures[signature]
    outputs = [sig.outputs[key].name for key in sorted(sig.outputs)]
    _check_graphdef(meta.graph_def, file)
    graph_def = _prune(meta.graph_def, outputs, file)
    module = import_graphdef(
        graph_def, name=_sanitize_identifier(path.resolve().name, "saved_model"), source=file, outputs=outputs
    )
    module.metadata["signature"] = signature
    return module


def from_concrete_function(concrete_function: Any, name: str | None = None) -> Module:
    """Import the graph of a ``tf.function`` concrete function (``fn.get_concrete_function(...)``).

    Captured resource variables become ``VarHandleOp`` nodes (named after the capture placeholder,
    with ``shared_name`` the variable's name and its ``dtype``/``shape``); captured eager tensors
    become ``Const`` nodes. The outputs are the function's flattened outputs.

    Args:
        concrete_function: a ``ConcreteFunction``.
        name: module name (default: the function's name, sanitized).
    """
    graph_def = concrete_function_graphdef(concrete_function)
    outputs = [t.name for t in concrete_function.outputs]
    module_name = name or _function_module_name(concrete_function.name)
    return import_graphdef(graph_def, name=module_name, source=f"<function {module_name}>", outputs=outputs)


def concrete_function_graphdef(concrete_function: Any) -> graph_pb2.GraphDef:
    """The self-contained ``GraphDef`` of a concrete function: captures turned into graph nodes.

    The function's outputs are recorded in the attr :data:`OUTPUTS_ATTR` of their producers, so
    the result can be saved as a ``.pb`` and imported later with the same result as
    :func:`from_concrete_function` (that is how the model zoo stores training graphs).
    """
    import tensorflow as tf
    from tensorflow.python.ops import resource_variable_ops

    graph = concrete_function.graph
    graph_def = graph.as_graph_def()
    try:
        variables = concrete_function.variables
    except AssertionError:  # the variables were garbage-collected: fall back to the handle data
        variables = ()
    by_handle = {id(v.handle): v for v in variables}
    replacements: dict[str, node_def_pb2.NodeDef] = {}
    for outer, inner in graph.captures:
        node = tf.compat.v1.NodeDef(name=inner.op.name)
        if inner.dtype == tf.resource:
            variable = by_handle.get(id(outer))
            handle_data = resource_variable_ops.get_resource_handle_data(inner)
            shapes = list(getattr(handle_data, "shape_and_type", []))
            if variable is None and not shapes:
                continue  # a non-variable resource (table, iterator): stays a Placeholder
            node.op = "VarHandleOp"
            if variable is not None:
                dtype, shape = variable.dtype.as_datatype_enum, variable.shape.as_proto()
                shared_name = variable.name.split(":")[0]
            else:
                dtype, shape = shapes[0].dtype, shapes[0].shape
                shared_name = inner.op.name
            node.attr["dtype"].type = dtype
            node.attr["shape"].shape.CopyFrom(shape)
            node.attr["shared_name"].s = shared_name.encode()
            node.attr["container"].s = b""
        else:
            try:
                array = outer.numpy()
            except Exception:  # a symbolic capture from an enclosing graph: keep the placeholder
                continue
            node.op = "Const"
            node.attr["dtype"].type = inner.dtype.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array))
        replacements[node.name] = node
    marks: dict[str, list[str]] = {}
    for position, tensor in enumerate(concrete_function.outputs):
        marks.setdefault(tensor.op.name, []).append(f"{position}:{tensor.value_index}")
    for node in graph_def.node:
        replacement = replacements.get(node.name)
        if replacement is not None:
            device = node.device
            node.Clear()
            node.CopyFrom(replacement)
            node.device = device
        if node.name in marks:
            node.attr[OUTPUTS_ATTR].list.s.extend(mark.encode() for mark in marks[node.name])
    return graph_def


def import_graphdef(
    graph_def: graph_pb2.GraphDef,
    *,
    name: str = "graph",
    source: str = "<graphdef>",
    outputs: Sequence[str] | None = None,
) -> Module:
    """Import a ``GraphDef`` (with its function library) as a Module.

    Args:
        graph_def: the graph; not modified.
        name: the module name.
        source: how diagnostics name the input (a file name).
        outputs: TF tensor names (``node:k``) of the graph outputs; default: those recorded in
            :data:`OUTPUTS_ATTR` attrs, else every sink's results.

    Raises:
        ImportError_: an undefined input, an unknown op or function, or a graph TensorFlow rejects.
    """
    load_tensorflow("importing a TensorFlow graph")
    if outputs is None:
        outputs = _recorded_outputs(graph_def, source)
    with gc_paused():
        flattener = _Flattener(graph_def, source)
        flat = flattener.run()
        if outputs is not None:
            outputs = [flattener.flat_output(ref) for ref in outputs]
        return _TfImporter(flat, source).run(name, outputs)


# --------------------------------------------------------------------------------- utilities


def _sanitize_identifier(text: str, default: str) -> str:
    out = _NOT_IDENT_CHAR.sub("_", text)
    if not out:
        return default
    return "_" + out if out[0].isdigit() else out


def _function_module_name(raw: str | bytes) -> str:
    """``__inference_train_step_123`` -> ``train_step`` (the counter differs between traces)."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    text = re.sub(r"^__inference_", "", text)
    text = re.sub(r"_\d+$", "", text)
    return _sanitize_identifier(text, "function")


def _recorded_outputs(graph_def: graph_pb2.GraphDef, source: str) -> list[str] | None:
    """The outputs recorded in :data:`OUTPUTS_ATTR` attrs (``None`` when no node has one)."""
    found: dict[int, str] = {}
    for node in graph_def.node:
        if OUTPUTS_ATTR not in node.attr:
            continue
        for mark in node.attr[OUTPUTS_ATTR].list.s:
            text = mark.decode("utf-8", "replace")
            position, _, index = text.partition(":")
            if not position.isdigit() or not index.isdigit() or int(position) in found:
                raise ImportError_(f"bad {OUTPUTS_ATTR} entry '{text}'", Location(file=source, node=node.name))
            found[int(position)] = f"{node.name}:{index}"
    if not found:
        return None
    if sorted(found) != list(range(len(found))):
        raise ImportError_(f"{OUTPUTS_ATTR} attrs do not number the outputs 0..{len(found) - 1}", Location(file=source))
    return [found[k] for k in range(len(found))]


def _check_graphdef(graph_def: graph_pb2.GraphDef, file: str) -> None:
    """Reject protobufs that parsed but are no GraphDef (protobuf parsing is very lenient)."""
    if not graph_def.node:
        raise ImportError_("not a TensorFlow GraphDef (it has no nodes)", Location(file=file))
    for position, node in enumerate(graph_def.node):
        if not node.name or not node.op:
            what = "name" if not node.name else "op type"
            raise ImportError_(f"not a TensorFlow GraphDef (node #{position} has no {what})", Location(file=file))


def _split_ref(ref: str) -> tuple[str, int]:
    """``"n"`` -> ``("n", 0)``, ``"n:2"`` -> ``("n", 2)`` (GraphDef tensor references)."""
    head, sep, tail = ref.rpartition(":")
    if sep and tail.isdigit():
        return head, int(tail)
    return ref, 0


def _prune(graph_def: graph_pb2.GraphDef, outputs: Sequence[str], file: str) -> graph_pb2.GraphDef:
    """The nodes ``outputs`` depend on (data and control inputs), in their original order."""
    from tensorflow.core.framework import graph_pb2

    by_name = {node.name: node for node in graph_def.node}
    keep: set[str] = set()
    stack = [_split_ref(ref)[0] for ref in outputs]
    while stack:
        node_name = stack.pop()
        if node_name in keep:
            continue
        node = by_name.get(node_name)
        if node is None:
            raise ImportError_(f"signature output refers to undefined node '{node_name}'", Location(file=file))
        keep.add(node_name)
        stack.extend(_split_ref(ref.lstrip("^"))[0] for ref in node.input)
    pruned = graph_pb2.GraphDef()
    pruned.versions.CopyFrom(graph_def.versions)
    pruned.library.CopyFrom(graph_def.library)
    pruned.node.extend(node for node in graph_def.node if node.name in keep)
    return pruned


# --------------------------------------------------------------------------------- inlining


Ref = tuple[str, int]
"""A tensor reference during flattening: (node or alias name, output index)."""


class _Flattener:
    """Inline every function call of a GraphDef into one flat GraphDef.

    Body nodes are copied with scoped names; references to call results and to function arguments
    go through an alias table resolved once every scope has been expanded, so node order in the
    GraphDef and in function bodies does not matter.
    """

    def __init__(self, graph_def: graph_pb2.GraphDef, source: str):
        self.graph_def = graph_def
        self.source = source
        self.library: dict[str, function_pb2.FunctionDef] = {f.signature.name: f for f in graph_def.library.function}
        self.nodes: list[node_def_pb2.NodeDef] = []
        self.pending: list[tuple[node_def_pb2.NodeDef, list[Ref], list[str]]] = []
        self.alias: dict[Ref, Ref] = {}
        self.ctrl_alias: dict[str, tuple[list[str], list[Ref]]] = {}
        self.emitted: set[str] = set()
        self._output_offsets: dict[tuple[str, str], dict[str, int]] = {}

    def error(self, message: str, node: str | None = None) -> ImportError_:
        return ImportError_(message, Location(file=self.source, node=node))

    def flat_output(self, ref: str) -> str:
        """Map a tensor name of the original graph to the flat graph (call results resolved)."""
        target = self.resolve(_split_ref(ref), None)
        return f"{target[0]}:{target[1]}"

    def function_of(self, node: node_def_pb2.NodeDef) -> function_pb2.FunctionDef | None:
        """The library function a node calls (through ``f`` or as its op type), else ``None``."""
        if node.op in CALL_OPS:
            fname = node.attr["f"].func.name
            fdef = self.library.get(fname)
            if fdef is None:
                raise self.error(f"'{node.op}' calls function '{fname}', which is not in the library", node.name)
            return fdef
        return self.library.get(node.op)

    def run(self) -> graph_pb2.GraphDef:
        from tensorflow.core.framework import graph_pb2

        self.expand(self.graph_def.node, "", None, [], "", 0)
        for node, data_refs, ctrl_names in self.pending:
            del node.input[:]
            for ref in data_refs:
                target = self.resolve(ref, node.name)
                node.input.append(target[0] if target[1] == 0 else f"{target[0]}:{target[1]}")
            seen: dict[str, None] = {}
            for ctrl in ctrl_names:
                for target in self.resolve_ctrl(ctrl, node.name):
                    seen.setdefault(target, None)
            node.input.extend("^" + n for n in seen)
        flat = graph_pb2.GraphDef()
        flat.versions.CopyFrom(self.graph_def.versions)
        flat.library.CopyFrom(self.graph_def.library)
        flat.node.extend(self.nodes)
        return flat

    def resolve(self, ref: Ref, user: str | None) -> Ref:
        hops = 0
        while ref in self.alias:
            ref = self.alias[ref]
            hops += 1
            if hops > 10_000:
                raise self.error(f"cyclic function references at '{ref[0]}'", user)
        if ref[0] not in self.emitted:
            shown = ref[0] if ref[1] == 0 else f"{ref[0]}:{ref[1]}"
            raise self.error(f"uses undefined value '{shown}'", user)
        return ref

    def resolve_ctrl(self, name: str, user: str) -> list[str]:
        """Real node names a control dependency on ``name`` (maybe an inlined call) stands for."""
        if name in self.emitted:
            return [name]
        entry = self.ctrl_alias.get(name)
        if entry is None:
            raise self.error(f"control input '^{name}' refers to an undefined node", user)
        names, refs = entry
        out: list[str] = []
        for inner in names:
            out.extend(self.resolve_ctrl(inner, user))
        for ref in refs:
            out.append(self.resolve(ref, user)[0])
        return out

    def output_offset(self, node: node_def_pb2.NodeDef, out_arg: str, scope: str) -> int:
        """Flat index of the first tensor of output arg ``out_arg`` of a body node."""
        key = (scope, node.name)
        offsets = self._output_offsets.get(key)
        if offsets is None:
            offsets = self._output_offsets[key] = self.compute_offsets(node)
        offset = offsets.get(out_arg)
        if offset is None:
            raise self.error(f"'{node.op}' has no output '{out_arg}'", f"{scope}/{node.name}" if scope else node.name)
        return offset

    def compute_offsets(self, node: node_def_pb2.NodeDef) -> dict[str, int]:
        fdef = self.library.get(node.op)
        if fdef is not None:
            return {arg.name: k for k, arg in enumerate(fdef.signature.output_arg)}
        from tensorflow.python.framework import op_def_registry

        op_def = op_def_registry.get(node.op)
        if op_def is None:
            raise self.error(f"op type '{node.op}' is not registered in TensorFlow", node.name)
        defaults = {a.name: a.default_value for a in op_def.attr if a.HasField("default_value")}

        def attr(name: str) -> attr_value_pb2.AttrValue | None:
            return node.attr[name] if name in node.attr else defaults.get(name)

        offsets: dict[str, int] = {}
        position = 0
        for arg in op_def.output_arg:
            offsets[arg.name] = position
            if arg.number_attr:
                value = attr(arg.number_attr)
                position += value.i if value is not None else 1
            elif arg.type_list_attr:
                value = attr(arg.type_list_attr)
                position += len(value.list.type) if value is not None else 1
            else:
                position += 1
        return offsets

    def expand(
        self,
        body: Sequence[node_def_pb2.NodeDef],
        prefix: str,
        fdef: function_pb2.FunctionDef | None,
        call_ctrl: list[str],
        call_device: str,
        depth: int,
    ) -> None:
        """Copy the nodes of one scope (the graph, or a function body called by ``prefix``)."""
        if depth > 64:
            raise self.error(f"function calls nested more than 64 deep at '{prefix}'")
        arg_names = {arg.name for arg in fdef.signature.input_arg} if fdef is not None else set()
        local = {node.name: node for node in body} if fdef is not None else {}

        def scoped(name: str) -> str:
            return f"{prefix}/{name}" if prefix else name

        def translate(ref: str) -> Ref:
            if fdef is None:
                return _split_ref(ref)
            parts = ref.split(":")
            if parts[0] in arg_names:
                return (f"{prefix}:arg:{parts[0]}", int(parts[1]) if len(parts) == 2 else 0)
            if len(parts) != 3 or parts[0] not in local:
                raise self.error(f"function '{fdef.signature.name}' uses undefined value '{ref}'", prefix)
            return (scoped(parts[0]), self.output_offset(local[parts[0]], parts[1], prefix) + int(parts[2]))

        for node in body:
            flat_name = scoped(node.name)
            data_refs: list[Ref] = []
            ctrl_names: list[str] = []
            in_body_producer = False
            for ref in node.input:
                if ref.startswith("^"):
                    ctrl_names.append(scoped(ref[1:]))
                    in_body_producer = True
                    continue
                translated = translate(ref)
                data_refs.append(translated)
                if fdef is not None and ":arg:" not in translated[0]:
                    in_body_producer = True
            inherit = fdef is not None and not in_body_producer and node.op != "Const"
            if inherit:
                ctrl_names.extend(call_ctrl)
            device = node.device or call_device
            callee = self.function_of(node)
            if callee is not None:
                self.inline_call(node, callee, flat_name, data_refs, ctrl_names, device, depth)
                continue
            copy = type(node)()
            copy.CopyFrom(node)
            copy.name = flat_name
            copy.device = device
            if prefix and "_class" in copy.attr:
                classes = [c.decode("utf-8", "replace") for c in copy.attr["_class"].list.s]
                del copy.attr["_class"].list.s[:]
                for entry in classes:
                    target = entry[5:] if entry.startswith("loc:@") else None
                    copy.attr["_class"].list.s.append((f"loc:@{scoped(target)}" if target else entry).encode())
            if flat_name in self.emitted:
                raise self.error("node name defined twice", flat_name)
            self.emitted.add(flat_name)
            self.nodes.append(copy)
            self.pending.append((copy, data_refs, ctrl_names))

    def inline_call(
        self,
        node: node_def_pb2.NodeDef,
        fdef: function_pb2.FunctionDef,
        flat_name: str,
        data_refs: list[Ref],
        ctrl_names: list[str],
        device: str,
        depth: int,
    ) -> None:
        signature = fdef.signature
        if len(data_refs) != len(signature.input_arg):
            raise self.error(
                f"call of '{signature.name}' passes {len(data_refs)} inputs, the function takes "
                f"{len(signature.input_arg)}",
                flat_name,
            )
        for arg, ref in zip(signature.input_arg, data_refs, strict=True):
            self.alias[(f"{flat_name}:arg:{arg.name}", 0)] = ref
        self.expand(fdef.node_def, flat_name, fdef, ctrl_names, device, depth + 1)
        local = {n.name: n for n in fdef.node_def}
        arg_names = {arg.name for arg in signature.input_arg}
        ret_refs: list[Ref] = []
        for k, arg in enumerate(signature.output_arg):
            ret = fdef.ret.get(arg.name)
            if ret is None:
                raise self.error(f"function '{signature.name}' does not define its output '{arg.name}'", flat_name)
            parts = ret.split(":")
            if parts[0] in arg_names:
                target: Ref = (f"{flat_name}:arg:{parts[0]}", 0)
            elif len(parts) == 3 and parts[0] in local:
                target = (
                    f"{flat_name}/{parts[0]}",
                    self.output_offset(local[parts[0]], parts[1], flat_name) + int(parts[2]),
                )
            else:
                raise self.error(f"function '{signature.name}' returns undefined value '{ret}'", flat_name)
            self.alias[(flat_name, k)] = target
            ret_refs.append(target)
        control_nodes = [f"{flat_name}/{fdef.control_ret[key]}" for key in sorted(fdef.control_ret)]
        self.ctrl_alias[flat_name] = (control_nodes, ret_refs)


# --------------------------------------------------------------------------------- conversion


class _TfImporter:
    """Build the graphir graph from a flat GraphDef, with types from TensorFlow's shape inference."""

    def __init__(self, flat: graph_pb2.GraphDef, source: str):
        self.flat = flat
        self.source = source
        self._types: dict[tuple[int, tuple[Dim, ...] | None], TensorType] = {}
        self._untyped: list[str] = []

    def error(self, message: str, node: str | None = None) -> ImportError_:
        return ImportError_(message, Location(file=self.source, node=node))

    def warn(self, message: str, node: str | None = None) -> None:
        where = self.source if node is None else f"{self.source}:node '{node}'"
        sys.stderr.write(f"{where}: warning: {message}\n")

    def run(self, name: str, outputs: Sequence[str] | None) -> Module:
        tf_graph = self.shape_inference()
        graph = Graph("main")
        values: dict[str, Value] = {}
        nodes: dict[str, Node] = {}
        by_name = {op.name: op for op in tf_graph.get_operations()}
        opaque_ops: dict[str, list[str]] = {}
        for node_def in self.flat.node:
            op = by_name[node_def.name]
            out_types = [self.tensor_type(t.dtype.as_datatype_enum, t.shape, t.name) for t in op.outputs]
            if node_def.op == "Const" and _num_elements(node_def.attr["value"].tensor) > INLINE_ELEMENTS:
                const_type = out_types[0]
                values[f"{node_def.name}:0"] = graph.add_constant(
                    node_def.name, const_type, ExternalTensor(const_type, _tensor_loader(node_def.attr["value"].tensor))
                )
                continue
            params = self.params(node_def)
            if any(isinstance(p, Opaque) and p.kind == "tf.NameAttrList" for p in _flat_params(params)):
                opaque_ops.setdefault(node_def.op, []).append(node_def.name)
            node = graph.add_node("tf." + node_def.op, (), out_types, name=node_def.name, params=params)
            node.loc = Location(file=self.source, node=node_def.name)
            nodes[node_def.name] = node
            for k, value in enumerate(node.outputs):
                values[f"{node_def.name}:{k}"] = value
        for node_def in self.flat.node:
            node = nodes.get(node_def.name)
            if node is None:
                continue
            for ref in node_def.input:
                if ref.startswith("^"):
                    other = nodes.get(ref[1:])
                    if other is not None:  # None: a large Const turned into a constant
                        node.add_control_input(other)
                    continue
                producer, index = _split_ref(ref)
                value = values.get(f"{producer}:{index}")
                if value is None:
                    raise self.error(f"uses undefined value '{ref}'", node_def.name)
                node.add_input(value)
        self.set_outputs(graph, outputs, values)
        self.colocate(nodes)
        colocate_resource_users(graph)
        for op_type, names in sorted(opaque_ops.items()):
            shown = ", ".join(f"'{n}'" for n in names[:_MAX_NAMES_IN_WARNING])
            more = "" if len(names) <= _MAX_NAMES_IN_WARNING else ", ..."
            self.warn(f"{len(names)} '{op_type}' op(s) call functions kept opaque (not inlined): {shown}{more}")
        if self._untyped:
            shown = ", ".join(f"'{n}'" for n in self._untyped[:_MAX_NAMES_IN_WARNING])
            more = "" if len(self._untyped) <= _MAX_NAMES_IN_WARNING else ", ..."
            self.warn(f"{len(self._untyped)} value(s) have unknown rank after TF shape inference ({shown}{more})")
        metadata: dict[str, ParamValue] = {"producer": f"tensorflow graphdef {self.flat.versions.producer}"}
        if opaque_ops:
            metadata["tf_library"] = Opaque("tf.FunctionDefLibrary", self.flat.library.SerializeToString())
        return Module(name, graph, None, metadata)

    def shape_inference(self) -> Any:
        """Import the flat graph into a fresh ``tf.Graph``: TensorFlow infers every output type."""
        import tensorflow as tf

        names = {node.name for node in self.flat.node}
        for node in self.flat.node:  # colocation with a node that is not part of the graph (pruned)
            if "_class" in node.attr:
                kept = [c for c in node.attr["_class"].list.s if not c.startswith(b"loc:@") or c[5:].decode() in names]
                del node.attr["_class"].list.s[:]
                node.attr["_class"].list.s.extend(kept)
        graph = tf.Graph()
        try:
            with graph.as_default():
                tf.graph_util.import_graph_def(self.flat, name="")
        except Exception as exc:  # ValueError/InvalidArgumentError naming the node
            raise self.error(f"TensorFlow rejects the graph ({describe_exception(exc)})") from None
        return graph

    def tensor_type(self, dtype_enum: int, shape: Any, name: str) -> TensorType:
        dims: tuple[Dim, ...] | None = None if shape.rank is None else tuple(shape.as_list())
        key = (dtype_enum, dims)
        cached = self._types.get(key)
        if cached is None:
            cached = self._types[key] = TensorType(_dtype(dtype_enum)[0], dims)
        if dims is None and cached.dtype not in (DType.RESOURCE, DType.VARIANT):
            self._untyped.append(name)
        return cached

    def set_outputs(self, graph: Graph, outputs: Sequence[str] | None, values: dict[str, Value]) -> None:
        if outputs is None:
            sinks: list[Value] = []
            for node in graph.nodes:
                if not node.control_users and all(not v.uses for v in node.outputs):
                    sinks.extend(node.outputs)
            graph.set_outputs(sinks)
            return
        chosen: list[Value] = []
        for ref in outputs:
            producer, index = _split_ref(ref)
            value = values.get(f"{producer}:{index}")
            if value is None:
                raise self.error(f"graph output '{ref}' is not defined by any node")
            chosen.append(value)
        graph.set_outputs(chosen)

    def colocate(self, nodes: dict[str, Node]) -> None:
        """Turn ``_class = ["loc:@X"]`` attrs into ``colocate`` annotations (groups closed transitively)."""
        sets: DisjointSets[str] = DisjointSets()
        targets: list[str] = []
        for node_def in self.flat.node:
            if "_class" not in node_def.attr:
                continue
            for entry in node_def.attr["_class"].list.s:
                if not entry.startswith(b"loc:@"):
                    continue
                target = entry[5:].decode("utf-8", "replace")
                targets.append(target)
                sets.union(node_def.name, target)
        if not len(sets):
            return
        group_name: dict[str, str] = {}
        for target in targets:
            root = sets.find(target)
            if root not in group_name or target < group_name[root]:
                group_name[root] = target
        for member in sorted(sets):
            node = nodes.get(member)
            if node is not None:
                node.colocate = group_name[sets.find(member)]

    # ----------------------------------------------------------------- params
    def params(self, node_def: node_def_pb2.NodeDef) -> dict[str, ParamValue]:
        params: dict[str, ParamValue] = {}
        for key in sorted(node_def.attr):
            if key in _DROPPED_ATTRS:
                continue
            try:
                params[key] = self.attr_value(node_def.attr[key])
            except Exception as exc:  # a malformed tensor payload
                raise self.error(
                    f"cannot read attr '{key}' of '{node_def.op}' ({describe_exception(exc)})", node_def.name
                ) from None
        if node_def.device:
            params["_device"] = node_def.device
        return params

    def attr_value(self, attr: attr_value_pb2.AttrValue) -> ParamValue:
        kind = attr.WhichOneof("value")
        if kind == "s":
            return _string(attr.s)
        if kind == "i":
            return int(attr.i)
        if kind == "f":
            return _float32(attr.f)
        if kind == "b":
            return bool(attr.b)
        if kind == "type":
            return _dtype(attr.type)[1]
        if kind == "shape":
            return _shape_param(attr.shape)
        if kind == "tensor":
            return _tensor_param(attr.tensor)
        if kind == "func":
            return Opaque("tf.NameAttrList", attr.func.SerializeToString())
        if kind == "list":
            items = attr.list
            if items.s:
                return tuple(_string(s) for s in items.s)
            if items.i:
                return tuple(int(i) for i in items.i)
            if items.f:
                return tuple(_float32(f) for f in items.f)
            if items.b:
                return tuple(bool(b) for b in items.b)
            if items.type:
                return tuple(_dtype(t)[1] for t in items.type)
            if items.shape:
                return tuple(_shape_param(s) for s in items.shape)
            if items.tensor:
                return tuple(_tensor_param(t) for t in items.tensor)
            if items.func:
                return tuple(Opaque("tf.NameAttrList", f.SerializeToString()) for f in items.func)
            return ()
        return Opaque("tf.AttrValue", attr.SerializeToString())  # placeholder attrs (function bodies)


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
        from tensorflow.python.framework import op_def_registry

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

    def dtype_enum(self, text: Any) -> int:
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
            return self.tf.make_tensor_proto(
                np.array([s.encode() for s in value.data], dtype=object).reshape(value.type.shape or ())
            )
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
                    target.i.append(int(item))  # type: ignore[arg-type]
                elif inner == "float":
                    target.f.append(float(item))  # type: ignore[arg-type]
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
            attr.i = int(value)  # type: ignore[arg-type]
        elif kind == "float":
            attr.f = float(value)  # type: ignore[arg-type]
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
