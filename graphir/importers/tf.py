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
  output producers. Functional ``While``/``StatelessWhile`` and ``If``/``StatelessIf`` keep
  their functions as **regions** (:mod:`graphir.importers.tf_regions`: ``cond``/``body``,
  ``then_branch``/``else_branch``, each imported like a graph, nested control flow included), so
  profiling charges their bodies and the lowering rebuilds the functions from them. Other
  functional ops (``Case``...), and a ``While``/``If`` whose function cannot be imported, are kept
  as an opaque node (its ``NameAttrList`` params are ``Opaque``; a warning names it) and the module
  metadata ``tf_library`` then holds the serialized ``FunctionDefLibrary`` so a backend can re-emit it.
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
  A GraphDef written from a traced function's graph (``concrete.graph.as_graph_def()``,
  ``tf.io.write_graph``) has bare ``Placeholder`` handles instead: the importer recovers their
  dtype and shape from the handle's uses and rewrites them into ``VarHandleOp`` nodes named after
  the placeholder (:mod:`graphir.importers.tf_resources`; a note counts them, a warning names any
  it could not size). What the graph cannot fix (a ``SAME`` kernel's size, a sparse-label class
  count) comes from the training checkpoint when given (``variables=``, ``--tf-variables``).
* **Graph outputs**: the signature's / concrete function's outputs. A GraphDef has no field for
  outputs, so :func:`concrete_function_graphdef` records them on the producing nodes as the attr
  ``_graphir_outputs = ["<position>:<output index>", ...]`` (TensorFlow ignores ``_``-prefixed
  attrs; the importer drops it from params): the zoo's ``.pb`` files import with the same outputs as
  :func:`from_concrete_function`. A GraphDef without that attr (any TF-written file) gets every
  result of every sink node (a node with no data or control user), in node order.

Code: this module holds the entry points (files, SavedModels, concrete functions) and pruning;
:mod:`graphir.importers.tf_inline` flattens function calls, :mod:`graphir.importers.tf_convert`
turns the flat graph into a Module (shape inference, params, colocation), and
:mod:`graphir.importers.tf_attrs` holds the attr and dtype conversions both ways (:class:`AttrWriter`)
and :func:`load_tensorflow`. Their public names are importable from here.

TensorFlow is imported lazily, inside the functions: importing this module does not load it. The
first import (:func:`load_tensorflow`) sets ``TF_CPP_MIN_LOG_LEVEL=3`` unless set and silences
standard error meanwhile: TensorFlow's native start-up banners (oneDNN, CUDA) would otherwise break
the driver's one-line errors.
Warnings go to standard error, one line each, as ``<source>: warning: ...``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphir.errors import ImportError_, Location, describe_exception
from graphir.gcpause import gc_paused
from graphir.importers.tf_attrs import (
    TF_DTYPE_NAMES,
    VARIABLE_OPS,
    AttrWriter,
    load_tensorflow,
    persistent_bytes,
    variable_type,
)
from graphir.importers.tf_checkpoint import read_variables
from graphir.importers.tf_convert import (
    OUTPUTS_ATTR,
    _TfImporter,
    colocate_resource_users,
)
from graphir.importers.tf_inline import CALL_OPS, _Flattener, _split_ref
from graphir.importers.tf_resources import recover_resource_variables
from graphir.ir import Module, Value

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2, node_def_pb2

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


_NOT_IDENT_CHAR = re.compile(r"[^A-Za-z0-9_]")


# --------------------------------------------------------------------------------- public helpers


def tf_tensor_name(value: Value) -> str:
    """TensorFlow's name ``node:k`` of an imported value (``%n`` is ``n:0``, ``%n#k`` is ``n:k``)."""
    if value.producer is None:
        return f"{value.name}:0"
    return f"{value.producer.name}:{value.output_index}"


# --------------------------------------------------------------------------------- entry points


def import_graphdef_file(path: Path, variables: Path | None = None) -> Module:
    """Read a ``GraphDef`` file (binary ``.pb`` or text ``.pbtxt``) as a Module.

    Text policy (the same as the ONNX importer's): names must be UTF-8. GraphDef is proto3, whose
    parser already refuses an undecodable string, so such a file fails here as not readable.

    Args:
        path: the file.
        variables: the training checkpoint (see :func:`import_graphdef`).

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
    return import_graphdef(graph_def, name=_sanitize_identifier(path.stem, "graph"), source=file, variables=variables)


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
    variables: Path | None = None,
) -> Module:
    """Import a ``GraphDef`` (with its function library) as a Module.

    Args:
        graph_def: the graph; not modified.
        name: the module name.
        source: how diagnostics name the input (a file name).
        outputs: TF tensor names (``node:k``) of the graph outputs; default: those recorded in
            :data:`OUTPUTS_ATTR` attrs, else every sink's results.
        variables: the training checkpoint (prefix, directory or SavedModel) whose variable shapes
            complete resource placeholders the graph alone cannot size
            (:mod:`graphir.importers.tf_checkpoint`).

    Raises:
        ImportError_: an undefined input, an unknown op or function, a graph TensorFlow rejects, or
            an unreadable checkpoint.
    """
    load_tensorflow("importing a TensorFlow graph")
    catalog = None if variables is None else read_variables(Path(variables))
    if outputs is None:
        outputs = _recorded_outputs(graph_def, source)
    with gc_paused():
        flattener = _Flattener(graph_def, source)
        flat = flattener.run()
        if outputs is not None:
            outputs = [flattener.flat_output(ref) for ref in outputs]
        recover_resource_variables(flat, source, variables=catalog, variables_source=f"'{variables}'")
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


# --------------------------------------------------------------------------------- conversion
