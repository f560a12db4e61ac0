"""Rebuild a TensorFlow ``GraphDef`` from a TF-imported module, with every node on its device.

The TF importer (:mod:`graphir.importers.tf`) keeps one node ``tf.<Op>`` per TensorFlow op, named
after it, with the NodeDef's attrs as params; :class:`graphir.importers.tf.AttrWriter` (the inverse of
the importer's attr conversion, shared with ``profile{mode=tf}``) turns the params back into attrs,
with each attr's kind read from the op's registered ``OpDef``.

Large ``Const`` ops became graph constants on import; they are re-emitted as ``Const`` nodes of
the same name, on the device of their first user in topological order (the node the profiler
charges their persistent bytes to). Graph inputs (a module parsed from text may have some) become
``Placeholder`` nodes. ``graphir.split`` / ``graphir.concat`` (operation splitting) become
``SplitV`` / ``ConcatV2`` with their size and axis constants. A ``While``/``If`` holding regions
gets one library function rebuilt from each region (:func:`_region_function`), and its data inputs
are first copied onto its device (:func:`_local_inputs`). Opaque functional control flow
(``Case``...) works when the module metadata ``tf_library`` holds the function library, which the
importer records in that case.

Every node's ``device`` field is the TensorFlow device string of its ``device`` annotation (its
requested ``_device`` param when it is not placed); ``enforce_order`` adds ``^prev`` control
inputs along each device's ``order``.

**Training steps** (variables). A resource variable lives on the device of its ``VarHandleOp`` and
TensorFlow runs every op that takes its handle (``ReadVariableOp``, ``ResourceApplyAdam``...) on that
device, so a placement that puts a handle's user elsewhere cannot run as placed: :func:`build_graphdef`
rejects it (one-line error naming the node). The TF importer puts each variable and its users in one
``colocate`` class (which the placers and fusion honour), so imported training graphs never hit it;
:func:`colocate_resource_users` does the same for modules parsed from text.
The importer keeps a variable's ``dtype``/``shape``/``shared_name`` but not its value, so values come
from the caller: :func:`variables_graphdef` builds a companion GraphDef that re-creates the same
handles (same node name, ``shared_name``, device) and either assigns given values
(``AssignVariableOp`` from a fed ``Placeholder``: the values never enter the GraphDef, whose
protobuf is limited to 2 GB, and the zoo's LSTM step alone holds 3 GB of weights and Adam slots)
or reads them (``ReadVariableOp``). Handles with one
``shared_name`` on one device are one resource in TensorFlow's resource manager, so running the
companion before (or after) the step initialises (or reads) exactly the variables the step uses;
:func:`variable_values` resolves a user's ``{shared_name or node name: array}`` map.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from graphir.attributes import Opaque, ParamValue, numpy_dtype
from graphir.errors import BackendError, Location
from graphir.ir import Module, Node, Value
from graphir.regions import Region, has_regions
from graphir.types import DType, is_static_shape

if TYPE_CHECKING:
    from graphir.importers.tf_attrs import DataTypeEnum

__all__ = [
    "TfGraph",
    "VariablesGraph",
    "build_graphdef",
    "colocate_resource_users",
    "region_function",
    "variable_nodes",
    "variable_values",
    "variables_graphdef",
]


@dataclasses.dataclass
class TfGraph:
    """A rebuilt GraphDef and how to use it.

    Attributes:
        graph_def: the GraphDef, devices set.
        feeds: TF tensor names to feed (``Placeholder`` outputs), in IR order.
        feed_values: IR value names of the feeds.
        fetches: TF tensor names of the graph outputs.
        node_ops: IR node name -> the TF op names emitted for it.
        const_devices: Const op name -> device string (re-emitted graph constants).
        value_tensors: IR value name of every node result -> its TF tensor name.
    """

    graph_def: Any
    feeds: list[str]
    feed_values: list[str]
    fetches: list[str]
    node_ops: dict[str, tuple[str, ...]]
    const_devices: dict[str, str]
    value_tensors: dict[str, str]


def _error(node: Node, message: str) -> BackendError:
    return BackendError(f"'{node.op}' {message}", Location(node=node.name))


def _ref(value: Value) -> str:
    """The GraphDef input reference of an imported value (``n`` for output 0, ``n:k`` otherwise)."""
    if value.producer is None:
        return value.name
    if value.output_index == 0:
        return value.producer.name
    return f"{value.producer.name}:{value.output_index}"


def _tensor_name(ref: str) -> str:
    return ref if ":" in ref else f"{ref}:0"


class _AttrWriter:
    """:class:`graphir.importers.tf.AttrWriter` with errors that name the node (one-line ``BackendError``)."""

    def __init__(self, tf: Any):
        from graphir.importers.tf import AttrWriter

        self.writer = AttrWriter()
        self.tf = tf

    def kinds(self, node: Node, op_type: str) -> dict[str, str]:
        try:
            return self.writer.kinds(op_type)
        except ValueError as exc:
            raise _error(node, f"op: {exc}, so it cannot be re-emitted") from None

    def shape(self, value: Any) -> Any:
        return self.writer.shape(value)

    def attr(self, node: Node, key: str, value: ParamValue, kind: str | None) -> Any:
        try:
            return self.writer.attr(value, kind)
        except ValueError as exc:
            raise _error(node, f"attr '{key}': {exc}") from None


def build_graphdef(
    module: Module,
    sequence: Sequence[Node],
    order_prev: Mapping[Node, Node],
    devices: Mapping[Node, str],
    const_device: Mapping[Value, str],
    tf: Any,
) -> TfGraph:
    """The GraphDef of a TF-imported module (see the module docstring).

    Args:
        module: the module (``tf.*`` nodes, graph constants, optional split/concat nodes).
        sequence: the nodes in lowering order (a topological order).
        order_prev: node -> its predecessor in its device's order (``enforce_order``), else empty.
        devices: node -> TF device string of its placement (absent: unplaced).
        const_device: constant value -> TF device string of its first user.
        tf: the tensorflow module.
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import versions

    writer = _AttrWriter(tf)
    graph = module.graph
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.producer = versions.GRAPH_DEF_VERSION
    library = module.metadata.get("tf_library")
    if isinstance(library, Opaque):
        graph_def.library.ParseFromString(library.data)
    feeds: list[str] = []
    feed_values: list[str] = []
    const_devices: dict[str, str] = {}
    for value in graph.inputs:
        node_def = graph_def.node.add(name=value.name, op="Placeholder")
        node_def.attr["dtype"].type = _value_dtype(tf, value)
        node_def.attr["shape"].shape.CopyFrom(writer.shape(_shape_param(value)))
        feeds.append(f"{value.name}:0")
        feed_values.append(value.name)
    for value in graph.constants:
        if not value.uses:
            continue
        node_def = _emit_constant(graph_def, value, const_device.get(value, ""), tf)
        const_devices[value.name] = node_def.device
    node_ops: dict[str, tuple[str, ...]] = {}
    _check_resource_devices(sequence, devices)
    for node in sequence:
        device = devices.get(node)
        if node.op in ("graphir.split", "graphir.concat"):
            node_ops[node.name] = _split_concat(graph_def, node, device or "", order_prev.get(node))
            continue
        if not node.op.startswith("tf."):
            raise _error(node, "op cannot be emitted into a TensorFlow-imported graph (no TensorFlow lowering)")
        requested = node.params.get("_device")
        device = device if device is not None else (requested if isinstance(requested, str) else "")
        copies = _local_inputs(graph_def, node, device, tf) if has_regions(node) and device else ()
        node_def = _emit_node(graph_def, graph_def.library, node, writer, device, order_prev.get(node), tf)
        for k, copy in enumerate(copies):
            node_def.input[k] = copy
        node_ops[node.name] = (*copies, node.name)
        op_type = node.op[3:]
        if op_type == "Placeholder":
            feeds.append(f"{node.name}:0")
            feed_values.append(node.outputs[0].name)
    fetches = [_tensor_name(_ref(v)) for v in graph.outputs]
    value_tensors = {v.name: _tensor_name(_ref(v)) for node in sequence for v in node.outputs}
    return TfGraph(graph_def, feeds, feed_values, fetches, node_ops, const_devices, value_tensors)


def _emit_node(
    graph_def: Any, library: Any, node: Node, writer: _AttrWriter, device: str, prev: Node | None, tf: Any
) -> Any:
    """Add the NodeDef of ``tf.*`` node ``node`` (its regions as functions added to ``library``)."""
    op_type = node.op[3:]
    kinds = writer.kinds(node, op_type)
    node_def = graph_def.node.add(name=node.name, op=op_type)
    node_def.input.extend(_ref(v) for v in node.inputs)
    controls = [c.name for c in node.control_inputs]
    if prev is not None and prev.name not in controls:
        controls.append(prev.name)
    node_def.input.extend(f"^{name}" for name in controls)
    node_def.device = device
    for key, value in node.params.items():
        if key == "_device":
            continue
        if isinstance(value, Region):
            node_def.attr[key].func.name = region_function(library, node, key, value, writer, tf)
            continue
        node_def.attr[key].CopyFrom(writer.attr(node, key, value, kinds.get(key)))
    return node_def


def _local_inputs(graph_def: Any, node: Node, device: str, tf: Any) -> tuple[str, ...]:
    """``Identity`` copies of a region holder's data inputs on its device (``<node>/graphir_input_<k>``).

    TensorFlow's session lowers a ``While``/``If`` into ``Enter``/``Switch``/``Merge`` ops placed with
    the *producer* of each input, so an input made on another device would keep the loop's machinery
    there, crossing devices on every trip; the copies move each input once, before the loop.
    """
    names = []
    for k, value in enumerate(node.inputs):
        copy = graph_def.node.add(name=f"{node.name}/graphir_input_{k}", op="Identity", device=device)
        copy.input.append(_ref(value))
        copy.attr["T"].type = _value_dtype(tf, value)
        names.append(copy.name)
    return tuple(names)


def region_function(library: Any, holder: Node, key: str, region: Region, writer: Any, tf: Any) -> str:
    """Add the library function of region ``key`` of ``holder`` (a TF ``While``/``If`` body); its name.

    The region's graph is emitted as a GraphDef (a ``Placeholder`` per input, its constants as
    ``Const``, its nodes as :func:`build_graphdef` emits them, without devices: a function body runs
    on its caller's device), imported into a ``tf.Graph`` and turned into a ``FunctionDef`` by
    TensorFlow's ``graph_to_function_def`` (which writes the body's ``node:output_arg:k`` references).
    Nested regions add their own functions first. ``writer``: a :class:`_AttrWriter` (``None``: a new one).
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import graph_to_function_def, versions

    writer = writer or _AttrWriter(tf)
    graph = region.graph
    body = graph_pb2.GraphDef()
    body.versions.producer = versions.GRAPH_DEF_VERSION
    for value in graph.inputs:
        placeholder = body.node.add(name=value.name, op="Placeholder")
        placeholder.attr["dtype"].type = _value_dtype(tf, value)
        placeholder.attr["shape"].shape.CopyFrom(writer.shape(_shape_param(value)))
    for value in graph.constants:
        if value.uses:
            _emit_constant(body, value, "", tf)
    for node in graph.index().nodes:
        if not node.op.startswith("tf."):
            raise _error(node, "op cannot be emitted into a TensorFlow function body (no TensorFlow lowering)")
        _emit_node(body, library, node, writer, "", None, tf)
    body.library.CopyFrom(library)  # the nested regions' functions, for the import below
    imported = tf.Graph()
    with imported.as_default():
        tf.graph_util.import_graph_def(body, name="")
    inputs = [imported.get_tensor_by_name(f"{value.name}:0") for value in graph.inputs]
    outputs = [imported.get_tensor_by_name(_tensor_name(_ref(value))) for value in graph.outputs]
    argument_ops = {t.op for t in inputs}
    operations = [op for op in imported.get_operations() if op not in argument_ops]
    function = graph_to_function_def.graph_to_function_def(imported, operations, inputs, outputs)
    name = _function_name(library, f"graphir_{holder.name}_{key}")
    function.signature.name = name
    library.function.add().CopyFrom(function)
    return name


def _function_name(library: Any, base: str) -> str:
    """A library function name from ``base`` (letters, digits and ``_``), unique in ``library``."""
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
    taken = {f.signature.name for f in library.function}
    name, k = stem, 1
    while name in taken:
        name, k = f"{stem}_{k}", k + 1
    return name


def _emit_constant(graph_def: Any, value: Value, device: str, tf: Any) -> Any:
    """A ``Const`` NodeDef holding graph constant ``value``."""
    try:
        array = np.asarray(value.const.numpy()) if value.const is not None else None
    except ValueError:
        array = None
    if array is None:
        raise BackendError(f"constant '%{value.name}' has no data (it was printed as 'external')")
    node_def = graph_def.node.add(name=value.name, op="Const")
    node_def.attr["dtype"].type = tf.as_dtype(array.dtype).as_datatype_enum
    node_def.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array))
    node_def.device = device
    return node_def


def _value_dtype(tf: Any, value: Value) -> DataTypeEnum:
    from graphir.importers.tf import TF_DTYPE_NAMES

    return tf.as_dtype(TF_DTYPE_NAMES[value.type.dtype]).as_datatype_enum


def _shape_param(value: Value) -> Any:
    if value.type.shape is None:
        return "*"
    return tuple(d if isinstance(d, int) else -1 for d in value.type.shape)


def _split_concat(graph_def: Any, node: Node, device: str, prev: Node | None) -> tuple[str, ...]:
    """``SplitV`` / ``ConcatV2`` (with their constants) for FastT's split and concat nodes."""
    import tensorflow as tf

    axis = node.params.get("axis")
    if not isinstance(axis, int):
        raise _error(node, "needs an integer 'axis'")
    controls = [f"^{prev.name}"] if prev is not None else []
    axis_name = f"{node.name}/axis"
    axis_def = graph_def.node.add(name=axis_name, op="Const", device=device)
    axis_def.attr["dtype"].type = tf.int32.as_datatype_enum
    axis_def.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.int32(axis)))
    dtype = _value_dtype(tf, node.outputs[0])
    if node.op == "graphir.split":
        sizes = []
        for value in node.outputs:
            shape = value.type.shape
            if not is_static_shape(shape):
                raise _error(node, f"result has type {value.type}; splitting needs static shapes")
            sizes.append(int(shape[axis]))
        sizes_name = f"{node.name}/sizes"
        sizes_def = graph_def.node.add(name=sizes_name, op="Const", device=device)
        sizes_def.attr["dtype"].type = tf.int64.as_datatype_enum
        sizes_def.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(sizes, dtype=np.int64)))
        split = graph_def.node.add(name=node.name, op="SplitV", device=device)
        split.input.extend([_ref(node.inputs[0]), sizes_name, axis_name, *controls])
        split.attr["T"].type = dtype
        split.attr["Tlen"].type = tf.int64.as_datatype_enum
        split.attr["num_split"].i = len(node.outputs)
        return (axis_name, sizes_name, node.name)
    concat = graph_def.node.add(name=node.name, op="ConcatV2", device=device)
    concat.input.extend([*(_ref(v) for v in node.inputs), axis_name, *controls])
    concat.attr["T"].type = dtype
    concat.attr["Tidx"].type = tf.int32.as_datatype_enum
    concat.attr["N"].i = len(node.inputs)
    return (axis_name, node.name)


# --------------------------------------------------------------------------------- variables


def _resource_inputs(node: Node) -> list[Value]:
    return [v for v in node.inputs if v.type.dtype is DType.RESOURCE and v.producer is not None]


def _check_resource_devices(sequence: Sequence[Node], devices: Mapping[Node, str]) -> None:
    """A node must run where the resources it takes live (TensorFlow's placer enforces it)."""
    for node in sequence:
        for value in _resource_inputs(node):
            producer = value.producer
            mine, theirs = devices.get(node), devices.get(producer) if producer is not None else None
            if mine is not None and theirs is not None and mine != theirs:
                raise BackendError(
                    f"'{node.op}' is placed on {mine} but takes the resource '%{value.name}' that lives on {theirs}; "
                    "place with the colocate classes the TF importer records (for a module parsed from text, "
                    "run graphir.backends.tf.tf_graphdef.colocate_resource_users before placing)",
                    Location(node=node.name),
                )


def colocate_resource_users(module: Module) -> int:
    """Put every resource-producing node and the nodes taking its handle in one ``colocate`` class.

    The TF importer already does this (:func:`graphir.importers.tf.colocate_resource_users`, the
    one implementation); call it for a module built by hand or parsed from ``.gir`` text, before
    ``fuse``/``place``. On an imported module it changes nothing.

    Returns:
        The number of nodes whose ``colocate`` annotation changed.
    """
    from graphir.importers.tf import colocate_resource_users as colocate

    return colocate(module.graph)


def variable_nodes(module: Module) -> list[Node]:
    """The ``tf.VarHandleOp`` nodes of a TF-imported module, in topological order."""
    return [node for node in module.graph.index().nodes if node.op == "tf.VarHandleOp"]


def _shared_name(node: Node) -> str:
    shared = node.params.get("shared_name")
    return shared if isinstance(shared, str) and shared else node.name


def variable_values(module: Module, variables: Mapping[str, Any]) -> dict[Node, np.ndarray]:
    """Resolve ``{shared_name or VarHandleOp node name: array}`` to the module's variable nodes.

    Raises:
        BackendError: a key that names no variable (or a shared name held by several handles),
            or a value whose shape or dtype disagrees with the variable's.
    """
    from graphir.importers.tf import variable_type

    by_name = {node.name: node for node in variable_nodes(module)}
    by_shared: dict[str, list[Node]] = {}
    for node in by_name.values():
        by_shared.setdefault(_shared_name(node), []).append(node)
    result: dict[Node, np.ndarray] = {}
    for key in sorted(variables):
        targets = [by_name[key]] if key in by_name else by_shared.get(key, [])
        if not targets:
            raise BackendError(f"variables: '{key}' is neither a variable's shared_name nor a VarHandleOp node")
        for node in targets:
            var_type = variable_type(node)
            array = np.asarray(variables[key])
            if var_type is not None:
                want = numpy_dtype(var_type.dtype)
                if var_type.shape is not None and not _shape_matches(array.shape, var_type.shape):
                    raise BackendError(
                        f"variables: '{key}' has shape {list(array.shape)}, the variable {var_type}",
                        Location(node=node.name),
                    )
                array = array.astype(want, copy=False)
            result[node] = array
    return result


def _shape_matches(shape: tuple[int, ...], want: Sequence[Any]) -> bool:
    return len(shape) == len(want) and all(w is None or w == s for s, w in zip(shape, want, strict=True))


@dataclasses.dataclass
class VariablesGraph:
    """A companion GraphDef that assigns or reads a module's variables.

    Attributes:
        graph_def: VarHandleOps (copies of the module's, same devices) and the assign or read ops.
        targets: op names to run (assignments), empty when reading.
        fetches: IR variable node name -> TF tensor name of its value (reading), empty when assigning.
        feeds: TF tensor name of a ``Placeholder`` -> the value to feed when running ``targets``.
    """

    graph_def: Any
    targets: list[str]
    fetches: dict[str, str]
    feeds: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def variables_graphdef(
    module: Module, devices: Mapping[Node, str], tf: Any, values: Mapping[Node, np.ndarray] | None = None
) -> VariablesGraph:
    """Re-create the module's variable handles; assign ``values`` to them, or (``None``) read them all.

    The handles keep their node names, ``shared_name``, ``container`` and device (``devices``, else
    the requested ``_device``), so they address the resources the lowered step uses. Import the
    result under a name scope (``import_graph_def(..., name="init")``) next to the step graph.
    """
    from tensorflow.core.framework import graph_pb2
    from tensorflow.python.framework import versions

    writer = _AttrWriter(tf)
    graph_def = graph_pb2.GraphDef()
    graph_def.versions.producer = versions.GRAPH_DEF_VERSION
    targets: list[str] = []
    fetches: dict[str, str] = {}
    feeds: dict[str, np.ndarray] = {}
    for node in variable_nodes(module):
        if values is not None and node not in values:
            continue
        requested = node.params.get("_device")
        device = devices.get(node, requested if isinstance(requested, str) else "")
        handle = graph_def.node.add(name=node.name, op="VarHandleOp", device=device)
        kinds = writer.kinds(node, "VarHandleOp")
        for key, value in node.params.items():
            if key != "_device" and not key.startswith("_"):
                handle.attr[key].CopyFrom(writer.attr(node, key, value, kinds.get(key)))
        if not handle.attr["shared_name"].s:
            handle.attr["shared_name"].s = node.name.encode()
        dtype = handle.attr["dtype"].type
        if values is None:
            read = graph_def.node.add(name=f"{node.name}/graphir_read", op="ReadVariableOp", device=device)
            read.input.append(node.name)
            read.attr["dtype"].type = dtype
            fetches[node.name] = f"{read.name}:0"
            continue
        value = graph_def.node.add(name=f"{node.name}/graphir_value", op="Placeholder", device=device)
        value.attr["dtype"].type = dtype
        value.attr["shape"].shape.CopyFrom(writer.shape(values[node].shape))
        feeds[f"{value.name}:0"] = values[node]
        assign = graph_def.node.add(name=f"{node.name}/graphir_assign", op="AssignVariableOp", device=device)
        assign.input.extend([node.name, value.name])
        assign.attr["dtype"].type = dtype
        targets.append(assign.name)
    return VariablesGraph(graph_def, targets, fetches, feeds)
