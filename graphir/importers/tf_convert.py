"""The conversion step of the TensorFlow importer: a flat, shape-inferred ``GraphDef`` into a Module.

:class:`_TfImporter` runs TensorFlow's shape inference on the flattened graph and turns every node
into a ``tf.<OpType>`` node (large ``Const`` ops into graph constants), its attrs into params and its
``_class`` into the ``colocate`` annotation; :func:`colocate_resource_users` adds TensorFlow's rule
that resource users run with the resource's producer. :data:`OUTPUTS_ATTR` is the attr that records
graph outputs in a GraphDef file. The mapping is documented in :mod:`graphir.importers.tf`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from graphir.attributes import INLINE_ELEMENTS, Opaque, ParamValue
from graphir.errors import ImportError_, Location, describe_exception
from graphir.importers.tf_attrs import (
    _dtype,
    _flat_params,
    _float32,
    _num_elements,
    _shape_param,
    _string,
    _tensor_loader,
    _tensor_param,
)
from graphir.importers.tf_regions import REGION_ATTRS, function_region
from graphir.ir import ExternalTensor, Graph, Module, Node, Value
from graphir.types import DType, TensorType
from graphir.unionfind import DisjointSets

if TYPE_CHECKING:
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2


OUTPUTS_ATTR = "_graphir_outputs"
"""NodeDef attr recording graph outputs in a GraphDef file: ``["<position>:<output index>", ...]``."""


_DROPPED_ATTRS = frozenset({"_output_shapes", "_class", OUTPUTS_ATTR})


_MAX_NAMES_IN_WARNING = 5


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

    links = [
        (node, value.producer)
        for node in nodes
        for value in node.inputs
        if value.type.dtype is DType.RESOURCE and value.producer is not None
    ]
    if not links:  # most graphs: no resource edge, no key per node needed
        return 0
    keys = {node: key(node) for node in nodes}
    for node, producer in links:
        sets.union(keys[node], keys[producer])
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


OutputInfo = tuple[int, tuple[int | None, ...] | None]
"""What shape inference says of one op output: its dtype enum and its dims (``None`` for an unknown
rank; ``-1`` or ``None`` for an unknown size)."""


def _shape_param_dims(shape: Any) -> tuple[int | None, ...] | None:
    """A ``TensorShapeProto`` as IR dims (``None``: an unknown rank or size)."""
    if shape.unknown_rank:
        return None
    return tuple(d.size if d.size >= 0 else None for d in shape.dim)


def _inferred_outputs(graph_def: Any) -> dict[str, list[OutputInfo]]:
    """Each op's inferred outputs, by op name: ``graph_def`` imported into a fresh ``tf.Graph``.

    TensorFlow's import infers the type of every output.

    Raises:
        ValueError, tf.errors.InvalidArgumentError: TensorFlow rejects the graph (naming the node).
    """
    import tensorflow as tf

    graph = tf.Graph()  # kept alive while the fast path reads it
    found = _inferred_outputs_fast(graph, graph_def)
    if found is not None:
        return found
    graph = tf.Graph()  # the fast path may have filled the other one before its API failed
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    result: dict[str, list[OutputInfo]] = {}
    for op in graph.get_operations():
        infos: list[OutputInfo] = []
        for tensor in op.outputs:
            shape = tensor.shape
            infos.append((tensor.dtype.as_datatype_enum, None if shape.rank is None else tuple(shape.as_list())))
        result[op.name] = infos
    return result


def _inferred_outputs_fast(graph: Any, graph_def: Any) -> dict[str, list[OutputInfo]] | None:
    """:func:`_inferred_outputs` through TensorFlow's internal API; ``None`` where that API differs.

    ``tf.graph_util.import_graph_def`` runs the same C import (which infers every shape) and then
    gives each new op a full Python ``Operation``: it registers the op with the graph, wraps each
    output in a ``SymbolicTensor`` (a unique id, a ``DType`` object), sets its device and
    colocation, and walks its inputs for control dependencies and control-flow contexts (a fresh
    graph has neither). That is most of its time on a 100k-node graph, and none of it is read
    here. Each op is wrapped instead in the bare C++ ``PyOperation`` over the imported
    ``TF_Operation``, its outputs in a bare ``PyTensor`` subclass (the dtype enum as given, no
    id): ``PyTensor._shape`` reads the inferred shape from the C graph as ``(dims, unknown rank)``
    without a ``TensorShape``. The wrappers are not added to the graph, which the caller keeps
    alive while they are read. This uses the internal import API as ``import_graph_def`` calls
    it; when that API or the wrappers' differ (another TensorFlow version) the caller falls back
    to the public function on a fresh graph.
    """
    try:
        # TensorFlow's private C API: no stub (types-tensorflow), so imported by name, untyped.
        c_api: Any = importlib.import_module("tensorflow.python.client.pywrap_tf_session")
        from tensorflow.python.framework import c_api_util, errors, importer

        py_operation = c_api.PyOperation
        py_tensor = c_api.PyTensor
        options = c_api_util.ScopedTFImportGraphDefOptions()
        importer._PopulateTFImportGraphDefOptions(options.options, "", {}, None, True)  # noqa: SLF001
        mutation_lock = graph._mutation_lock  # noqa: SLF001
        c_graph_handle = graph._c_graph  # noqa: SLF001
        new_operations = graph.new_operations
    except (ImportError, AttributeError, TypeError):
        return None

    class _Output(py_tensor):
        """A bare tensor wrapper: what ``Operation._init_outputs`` builds for each output."""

        def __new__(cls, op: Any, index: int, dtype: int) -> Any:
            return py_tensor.__new__(cls, op, index, dtype, 0)

    buffer = c_api.TF_NewBufferFromString(graph_def.SerializeToString())
    try:
        with mutation_lock():
            with c_graph_handle.get() as c_graph:
                try:
                    results = c_api.TF_GraphImportGraphDefWithResults(c_graph, buffer, options.options)
                except errors.InvalidArgumentError as exc:
                    raise ValueError(str(exc)) from None
            c_api_util.ScopedTFImportGraphDefResults(results)
            c_ops = new_operations()
    finally:
        c_api.TF_DeleteBuffer(buffer)
    found: dict[str, list[OutputInfo]] = {}
    try:
        for c_op in c_ops:
            op = py_operation(c_op, _Output)
            op.graph = graph  # what a tensor's _shape reads the C graph from
            op._init_outputs()  # noqa: SLF001
            infos: list[OutputInfo] = []
            for tensor in op.outputs:
                dims, unknown_rank = tensor._shape  # noqa: SLF001
                infos.append((tensor._dtype, None if unknown_rank else tuple(dims)))  # noqa: SLF001
            found[op.name] = infos
    except (AttributeError, TypeError, ValueError):  # the wrappers' API differs in this TensorFlow
        return None
    return found


class _TfImporter:
    """Build the graphir graph from a flat GraphDef, with types from TensorFlow's shape inference."""

    def __init__(self, flat: graph_pb2.GraphDef, source: str):
        self.flat = flat
        self.source = source
        self._types: dict[OutputInfo, TensorType] = {}  # keyed by what inference said
        self._untyped: list[str] = []
        self._opaque_ops: dict[str, list[str]] = {}

    def error(self, message: str, node: str | None = None) -> ImportError_:
        return ImportError_(message, Location(file=self.source, node=node))

    def warn(self, message: str, node: str | None = None) -> None:
        where = self.source if node is None else f"{self.source}:node '{node}'"
        sys.stderr.write(f"{where}: warning: {message}\n")

    def run(self, name: str, outputs: Sequence[str] | None) -> Module:
        graph = self.convert("main", outputs)
        opaque_ops = self._opaque_ops
        for op_type, names in sorted(opaque_ops.items()):
            shown = ", ".join(f"'{n}'" for n in names[:_MAX_NAMES_IN_WARNING])
            more = "" if len(names) <= _MAX_NAMES_IN_WARNING else ", ..."
            self.warn(f"{len(names)} '{op_type}' op(s) call functions kept opaque (not inlined): {shown}{more}")
        metadata: dict[str, ParamValue] = {"producer": f"tensorflow graphdef {self.flat.versions.producer}"}
        if opaque_ops:
            metadata["tf_library"] = Opaque("tf.FunctionDefLibrary", self.flat.library.SerializeToString())
        return Module(name, graph, None, metadata)

    def convert(self, graph_name: str, outputs: Sequence[str] | None, arguments: Sequence[str] = ()) -> Graph:
        """The graph of the flat GraphDef; the ``Placeholder`` ops named in ``arguments`` become its inputs.

        ``While``/``If`` ops whose functions are in the library get them as regions
        (:mod:`graphir.importers.tf_regions`); other function-calling ops stay opaque (recorded for
        :meth:`run`'s warning and library metadata).
        """
        inferred = self.shape_inference()
        graph = Graph(graph_name)
        # Every value under the name the flat GraphDef refers to it by: "n" for output 0, else "n:k"
        # (the flattening writes every data input and every graph output so: tf_inline._ref_text).
        values: dict[str, Value] = {}
        nodes: dict[str, Node] = {}
        opaque_ops = self._opaque_ops
        regional: list[node_def_pb2.NodeDef] = []
        source = self.source
        for argument in arguments:
            values[argument] = graph.add_input(argument, self.output_types(argument, inferred[argument])[0])
        for node_def in self.flat.node:
            node_name = node_def.name
            if node_name in values:  # an argument
                continue
            out_types = self.output_types(node_name, inferred[node_name])
            if node_def.op == "Const" and _num_elements(node_def.attr["value"].tensor) > INLINE_ELEMENTS:
                const_type = out_types[0]
                values[node_name] = graph.add_constant(
                    node_name, const_type, ExternalTensor(const_type, _tensor_loader(node_def.attr["value"].tensor))
                )
                continue
            params = self.params(node_def)
            if node_def.op in REGION_ATTRS:
                regional.append(node_def)
            elif any(isinstance(p, Opaque) and p.kind == "tf.NameAttrList" for p in _flat_params(params)):
                opaque_ops.setdefault(node_def.op, []).append(node_name)
            # The names add_node would give: the node's own and its results' "name", "name#1", ...
            # They are free: the flattening refused a name defined twice, and shape inference a
            # name with a '#' (TensorFlow's node names cannot hold one).
            result_names = [f"{node_name}#{k}" if k else node_name for k in range(len(out_types))]
            loc = Location(file=source, node=node_name)
            node = graph.add_node_unchecked("tf." + node_def.op, node_name, result_names, out_types, params, {}, loc)
            nodes[node_name] = node
            results = node.outputs
            if results:
                values[node_name] = results[0]
                for k in range(1, len(results)):
                    values[f"{node_name}:{k}"] = results[k]
        for node_def in self.flat.node:
            node = nodes.get(node_def.name)
            if node is None:
                continue
            controls: list[Node] = []
            for ref in node_def.input:
                if ref[:1] == "^":
                    other = nodes.get(ref[1:])
                    if other is not None:  # None: a large Const turned into a constant
                        controls.append(other)
                    continue
                value = values.get(ref)
                if value is None:
                    raise self.error(f"uses undefined value '{ref}'", node_def.name)
                node.add_input(value)
            if controls:
                node.add_control_inputs(controls)  # one call: a sink may wait on thousands of nodes
        for node_def in regional:
            self.attach_regions(node_def, nodes[node_def.name])
        graph.touch_all(())  # the nodes added unchecked (no annotations yet)
        self.set_outputs(graph, outputs, values)
        self.colocate(nodes)
        colocate_resource_users(graph)
        if self._untyped:
            shown = ", ".join(f"'{n}'" for n in self._untyped[:_MAX_NAMES_IN_WARNING])
            more = "" if len(self._untyped) <= _MAX_NAMES_IN_WARNING else ", ..."
            self.warn(f"{len(self._untyped)} value(s) have unknown rank after TF shape inference ({shown}{more})")
        # Every operand above was connected by Node.add_input with a value of this graph, which
        # appends its use in step (as the `.gir` parser does): the verifier's use-list check is
        # redundant at this version.
        graph._uses_exact_version = graph._version  # noqa: SLF001
        self._untyped = []
        return graph

    def attach_regions(self, node_def: node_def_pb2.NodeDef, node: Node) -> None:
        """Replace the function attrs of a ``While``/``If`` node by regions (see :mod:`graphir.importers.tf_regions`).

        A ``While``'s regions take the loop variables with their shape invariants (``output_shapes``,
        when given: a loop variable may change shape between trips); an ``If``'s branches take the
        operands after the condition. A function the importer cannot turn into a region leaves the
        node opaque, with a warning naming the reason.
        """
        from graphir.regions import Region

        operand_types = [value.type for value in node.inputs]
        is_while = "While" in node_def.op
        if is_while:
            invariants = node_def.attr["output_shapes"].list.shape if "output_shapes" in node_def.attr else ()
            if len(invariants) == len(operand_types):
                operand_types = [
                    TensorType(t.dtype, _shape_param_dims(shape))
                    for t, shape in zip(operand_types, invariants, strict=True)
                ]
        arg_types = operand_types if is_while else operand_types[1:]
        regions: dict[str, Region] = {}
        for key in REGION_ATTRS[node_def.op]:
            function = node_def.attr[key].func.name if key in node_def.attr else ""
            try:
                graph = function_region(
                    self.flat.library, function, key, arg_types, self.source, node.name, _convert_region
                )
            except ImportError_ as exc:
                self.warn(f"'{node_def.op}' kept opaque: {exc.one_line()}", node.name)
                self._opaque_ops.setdefault(node_def.op, []).append(node.name)
                return
            regions[key] = Region(graph)
        node.params = {key: regions.get(key, value) for key, value in node.params.items()}

    def shape_inference(self) -> dict[str, list[OutputInfo]]:
        """Each node's inferred output types, by node name (TensorFlow's shape inference)."""
        names = {node.name for node in self.flat.node}
        for node in self.flat.node:  # colocation with a node that is not part of the graph (pruned)
            if "_class" in node.attr:
                kept = [
                    c
                    for c in node.attr["_class"].list.s
                    if not c.startswith(b"loc:@") or c[5:].decode("utf-8", "replace") in names
                ]
                del node.attr["_class"].list.s[:]
                node.attr["_class"].list.s.extend(kept)
        try:
            return _inferred_outputs(self.flat)
        except Exception as exc:  # ValueError/InvalidArgumentError naming the node
            raise self.error(f"TensorFlow rejects the graph ({describe_exception(exc)})") from None

    def output_types(self, node_name: str, infos: list[OutputInfo]) -> list[TensorType]:
        """The shared types of one node's inferred outputs (unknown ranks noted for the warning)."""
        types = self._types
        out: list[TensorType] = []
        for info in infos:
            cached = types.get(info)
            if cached is None:
                dtype_enum, dims = info
                known = None if dims is None else tuple(None if d is None or d < 0 else d for d in dims)
                cached = types[info] = TensorType(_dtype(dtype_enum)[0], known)
            if info[1] is None and cached.dtype not in (DType.RESOURCE, DType.VARIANT):
                k = len(out)
                self._untyped.append(f"{node_name}:{k}")
            out.append(cached)
        return out

    def set_outputs(self, graph: Graph, outputs: Sequence[str] | None, values: dict[str, Value]) -> None:
        """The graph outputs: ``outputs`` as the flat graph names them (``_Flattener.flat_output``), else the sinks."""
        if outputs is None:
            sinks: list[Value] = []
            for node in graph.nodes:
                if not node.control_users and all(not v.uses for v in node.outputs):
                    sinks.extend(node.outputs)
            graph.set_outputs(sinks)
            return
        chosen: list[Value] = []
        for ref in outputs:
            value = values.get(ref)
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


def _convert_region(flat: Any, source: str, name: str, outputs: Sequence[str], arguments: Sequence[str]) -> Graph:
    """A region's one-call graph converted by the importer itself (see :func:`.tf_regions.function_region`)."""
    return _TfImporter(flat, source).convert(name, outputs, arguments)
