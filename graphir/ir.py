"""The IR core: values, nodes, graphs and modules, with use lists kept exact under mutation.

A :class:`Graph` is one flat DAG. Its values are graph inputs, constants (weights, with their data
held by reference) and node results. A :class:`Node` is an op (``onnx.Conv``, ``tf.MatMul``,
``graphir.split``) with input values, output values, frozen ``params`` (the op's semantics) and
typed annotations (facts added by passes). Heavy algorithms never walk these objects edge by edge:
they use :meth:`Graph.index`, a cached array snapshot invalidated by every mutation.
"""

# Graph, Node and Value keep each other's private state current (use lists, versions, annotation
# tables) without the checked API's cost: they share it on purpose.
# pyright: reportPrivateUsage=false
from __future__ import annotations

import enum
import itertools
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar, cast, overload

import attrs

from graphir.annotations import ANNOTATIONS, Cost, Mem
from graphir.attributes import DenseTensor, ParamValue
from graphir.errors import Location, SourceLines
from graphir.index import GraphIndex
from graphir.types import TensorType

if TYPE_CHECKING:
    from graphir.cluster import Cluster


class ValueKind(enum.Enum):
    """Where a value comes from."""

    INPUT = "input"
    CONSTANT = "const"
    RESULT = "result"


@attrs.frozen(eq=False)
class ExternalTensor:
    """Constant data kept outside the IR text (weights): a type and a loader, read on demand.

    The importer wraps each large initializer without copying it; ``load`` returns a numpy array.
    After a round trip through `.gir` text the loader is ``None``: the text records only that the
    data is external.
    """

    type: TensorType
    loader: Callable[[], Any] | None = None

    def numpy(self) -> Any:
        """The data as a numpy array; raises ``ValueError`` when it is not available."""
        if self.loader is None:
            raise ValueError("the data of this constant is not available (it was printed as 'external')")
        return self.loader()


ConstData = DenseTensor | ExternalTensor


_RESULT = ValueKind.RESULT
_new_object = object.__new__


class Value:
    """One tensor: a name unique in its graph, a type, where it comes from, and its uses.

    ``uses`` lists ``(node, operand_index)`` pairs and is maintained by the mutation API; never
    edit it directly.
    """

    __slots__ = ("name", "type", "kind", "producer", "output_index", "uses", "const", "graph")

    def __init__(self, name: str, type: TensorType, kind: ValueKind):
        self.name = name
        self.type = type
        self.kind = kind
        self.producer: Node | None = None
        self.output_index = 0
        self.uses: list[tuple[Node, int]] = []
        self.const: ConstData | None = None
        self.graph: Graph | None = None

    @property
    def nbytes(self) -> int:
        """Size in bytes (0 when the shape is not static)."""
        return self.type.nbytes_or(0)

    @property
    def users(self) -> list[Node]:
        """Distinct consuming nodes, in use order."""
        seen: dict[Node, None] = {}
        for node, _ in self.uses:
            seen.setdefault(node, None)
        return list(seen)

    def replace_all_uses_with(self, other: Value) -> None:
        """Make every user of this value use ``other`` instead (use lists stay exact)."""
        if other is self:
            return
        for node, operand in list(self.uses):
            node.set_input(operand, other)
        if self.graph is not None:
            self.graph.outputs = [other if v is self else v for v in self.graph.outputs]
            self.graph._touch()

    def __repr__(self) -> str:
        return f"Value(%{self.name}: {self.type})"


_T = TypeVar("_T")


class _AnnotationAccess(Protocol, Generic[_T]):
    """What :func:`_annotation_property` gives the type checker: ``node.cost`` is a ``Cost | None``."""

    @overload
    def __get__(self, node: None, owner: type[Node], /) -> Self: ...
    @overload
    def __get__(self, node: Node, owner: type[Node] | None = None, /) -> _T | None: ...
    def __set__(self, node: Node, value: _T | None, /) -> None: ...
    def __delete__(self, node: Node, /) -> None: ...


def _annotation_property(key: str, doc: str) -> _AnnotationAccess[Any]:
    """A property reading and writing the annotation ``key`` (the node's attribute declares its type)."""

    def getter(node: Node) -> Any:
        return node._annotations.get(key)

    def setter(node: Node, value: Any) -> None:
        node.set_annotation(key, value)

    def deleter(node: Node) -> None:
        node.del_annotation(key)

    # A property is such a descriptor; its declared attribute (``cost: _AnnotationAccess[Cost]``)
    # gives the annotation's type, which ANNOTATIONS checks at run time.
    return cast(_AnnotationAccess[Any], property(getter, setter, deleter, doc))


_NO_NODES: tuple[()] = ()
"""The control lists of a node without control edges: one shared empty tuple (most nodes have
none, and a million nodes would otherwise hold two million empty lists). The first edge gives
the node its own list (:meth:`Node.add_control_input`)."""


class Node:
    """An op: dialect-qualified name, inputs, outputs, params and annotations.

    ``loc`` records where the node came from (a `.gir` line, or an imported node name) so
    diagnostics can point at it. ``control_inputs`` are nodes that must finish before this one
    starts without passing data (TensorFlow's ``^name`` inputs): edges of zero bytes, marked as
    control in the array view. Change them with :meth:`add_control_input` /
    :meth:`remove_control_input` so ``control_users`` stays right; read them as sequences (an
    empty one may be a tuple, :data:`_NO_NODES`).

    Nodes compare by identity. Build them with :meth:`Graph.add_node`; change inputs with
    :meth:`set_input` so use lists stay right.
    """

    __slots__ = (
        "op",
        "name",
        "inputs",
        "outputs",
        "params",
        "_annotations",
        "graph",
        "_seq",
        "_index_pos",
        "_loc",
        "_line",
        "control_inputs",
        "control_users",
    )

    def __init__(self, op: str, name: str, params: Mapping[str, ParamValue] | None = None):
        self.op = op
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.params: dict[str, ParamValue] = dict(params or {})
        self._annotations: dict[str, Any] = {}
        self.graph: Graph | None = None
        self._seq = 0
        self._index_pos = -1
        self._loc: Location | SourceLines | None = None
        self._line = 0
        self.control_inputs: list[Node] | tuple[()] = _NO_NODES  # a list from the first edge
        self.control_users: list[Node] | tuple[()] = _NO_NODES

    @property
    def loc(self) -> Location | None:
        """Where the node came from (a `.gir` line or an imported node name), or None.

        The `.gir` parser stores the line number and the text's shared :class:`SourceLines`
        instead: the :class:`Location` is made on the first read (diagnostics, copies).
        """
        loc = self._loc
        if isinstance(loc, SourceLines):
            loc = self._loc = loc.location(self._line)
        return loc

    @loc.setter
    def loc(self, loc: Location | None) -> None:
        self._loc = loc

    # ----------------------------------------------------------------- annotations
    cost: _AnnotationAccess[Cost] = _annotation_property("cost", "compute time (Cost), or None")
    mem: _AnnotationAccess[Mem] = _annotation_property("mem", "memory (Mem), or None")
    affinity: _AnnotationAccess[tuple[str, ...]] = _annotation_property("affinity", "allowed device kinds")
    group: _AnnotationAccess[int] = _annotation_property("group", "fusion group id")
    colocate: _AnnotationAccess[str] = _annotation_property("colocate", "colocation class")
    kernel: _AnnotationAccess[str] = _annotation_property("kernel", "fused-kernel (compiled cluster) name")
    device: _AnnotationAccess[str] = _annotation_property("device", "assigned device name")
    order: _AnnotationAccess[int] = _annotation_property("order", "position in the device sequence")
    start: _AnnotationAccess[float] = _annotation_property("start", "simulated start (s)")
    finish: _AnnotationAccess[float] = _annotation_property("finish", "simulated finish (s)")

    @property
    def annotations(self) -> Mapping[str, Any]:
        """Read-only view of the annotations (use the accessors or :meth:`set_annotation` to change)."""
        return types.MappingProxyType(self._annotations)

    def set_annotation(self, key: str, value: Any) -> None:
        """Set a registered annotation, validated by its declaration; ``None`` removes it."""
        if value is None:
            self.del_annotation(key)
            return
        kind = ANNOTATIONS.get(key)
        if kind is None:
            raise KeyError(f"unknown annotation '{key}' (known: {', '.join(sorted(ANNOTATIONS))})")
        self._annotations[key] = kind.check(value)
        if self.graph is not None:
            self.graph._annotations_changed(key)

    def del_annotation(self, key: str) -> None:
        """Remove an annotation if present."""
        if self._annotations.pop(key, None) is not None and self.graph is not None:
            self.graph._annotations_changed(key)

    def clear_annotations(self) -> None:
        """Remove every annotation."""
        if self._annotations:
            self._annotations.clear()
            if self.graph is not None:
                self.graph._annotations_changed(None)

    # ----------------------------------------------------------------- structure
    def set_input(self, operand: int, value: Value) -> None:
        """Replace input ``operand`` by ``value``, updating both use lists."""
        old = self.inputs[operand]
        old.uses.remove((self, operand))
        self.inputs[operand] = value
        value.uses.append((self, operand))
        if self.graph is not None:
            self.graph._touch()

    def add_input(self, value: Value) -> None:
        """Append ``value`` as a new last operand."""
        self.inputs.append(value)
        value.uses.append((self, len(self.inputs) - 1))
        if self.graph is not None:
            self.graph._touch()

    def add_control_input(self, node: Node) -> None:
        """Make this node run after ``node`` (a control dependency); duplicates are ignored."""
        self.add_control_inputs((node,))

    def add_control_inputs(self, nodes: Iterable[Node]) -> None:
        """:meth:`add_control_input` for each of ``nodes``, in order, in time linear in their number.

        A node with thousands of control inputs (a step's final op waiting on every update of every
        replica) would make repeated :meth:`add_control_input` calls quadratic.
        """
        present = set(self.control_inputs)
        added = False
        for node in nodes:
            if node.graph is not self.graph:
                raise ValueError(f"control input '{node.name}' of '{self.name}' is not in the same graph")
            if node in present:
                continue
            present.add(node)
            if isinstance(self.control_inputs, tuple):
                self.control_inputs = []
            if isinstance(node.control_users, tuple):
                node.control_users = []
            self.control_inputs.append(node)
            node.control_users.append(self)
            added = True
        if added and self.graph is not None:
            self.graph._touch()

    def remove_control_input(self, node: Node) -> None:
        """Drop the control dependency on ``node``.

        Raises:
            ValueError: this node has no control dependency on ``node``.
        """
        if node not in self.control_inputs:
            raise ValueError(f"'{self.name}' has no control input '{node.name}'")
        inputs, users = self.control_inputs, node.control_users
        assert isinstance(inputs, list) and isinstance(users, list), "they hold node and self: not _NO_NODES"
        inputs.remove(node)
        users.remove(self)
        if self.graph is not None:
            self.graph._touch()

    @property
    def predecessors(self) -> list[Node]:
        """Distinct producer nodes of the inputs, in operand order."""
        seen: dict[Node, None] = {}
        for value in self.inputs:
            if value.producer is not None:
                seen.setdefault(value.producer, None)
        return list(seen)

    @property
    def successors(self) -> list[Node]:
        """Distinct consumer nodes of the outputs."""
        seen: dict[Node, None] = {}
        for value in self.outputs:
            for node, _ in value.uses:
                seen.setdefault(node, None)
        return list(seen)

    @property
    def dialect(self) -> str:
        """The dialect prefix of ``op`` (``onnx`` in ``onnx.Conv``)."""
        return self.op.split(".", 1)[0] if "." in self.op else ""

    def __repr__(self) -> str:
        return f"Node({self.op} '{self.name}')"


class Graph:
    """One flat DAG of nodes with inputs, constants and outputs.

    Value and node names are unique within the graph (:meth:`unique_name` makes new ones).
    Every structural mutation invalidates the cached :meth:`index`.
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self._nodes: dict[Node, None] = {}
        self.inputs: list[Value] = []
        self.constants: list[Value] = []
        self.outputs: list[Value] = []
        self._values: dict[str, Value] = {}
        self._node_names: dict[str, Node] = {}
        self._node_name_counters: dict[str, int] = {}
        self._value_name_counters: dict[str, int] = {}
        self._seq = itertools.count()
        self._version = 0
        self._annotation_version = 0
        # The annotation version at which each key last changed, and at which every key may have
        # (a cleared node, a batch of parsed nodes): what caches and the verifier read to keep
        # what depends on other keys only (annotations_changed_since).
        self._annotation_key_versions: dict[str, int] = {}
        self._annotation_all_version = 0
        # Every key some node of this graph may hold (removals leave their key here), or None when
        # unknown (a batch of nodes added by add_node_unchecked and touched without keys): what
        # lets a check or a column of a key no node holds skip the walk over the nodes.
        self._annotation_keys: set[str] | None = set()
        self._index: GraphIndex | None = None
        # The structural version at which a reader that builds use lists in step with operands
        # (the `.gir` parser) finished: the verifier's use-list check is redundant at that version.
        self._uses_exact_version = -1

    # ----------------------------------------------------------------- queries
    @property
    def nodes(self) -> Iterator[Node]:
        """Nodes in insertion order (not necessarily topological: use ``index().nodes``)."""
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def value(self, name: str) -> Value:
        """The value called ``name``; raises ``KeyError``."""
        return self._values[name]

    def get_value(self, name: str) -> Value | None:
        """The value called ``name`` or ``None``."""
        return self._values.get(name)

    def node(self, name: str) -> Node:
        """The node called ``name``; raises ``KeyError``."""
        return self._node_names[name]

    def get_node(self, name: str) -> Node | None:
        """The node called ``name`` or ``None``."""
        return self._node_names.get(name)

    @property
    def values(self) -> Iterator[Value]:
        """Every value: inputs, constants, then node results in insertion order."""
        yield from self.inputs
        yield from self.constants
        for node in self._nodes:
            yield from node.outputs

    def unique_name(self, base: str, *, for_node: bool = False) -> str:
        """``base`` if no value (or node) has that name yet, else ``base_1``, ``base_2``...

        A per-base counter remembers the last suffix handed out, so naming n nodes after one op
        type stays O(n) overall.
        """
        taken = self._node_names if for_node else self._values
        if base not in taken:
            return base
        counters = self._node_name_counters if for_node else self._value_name_counters
        k = counters.get(base, 0)
        while True:
            k += 1
            candidate = f"{base}_{k}"
            if candidate not in taken:
                counters[base] = k
                return candidate

    def index(self) -> GraphIndex:
        """The cached array view (topological numbering, CSR, bytes); rebuilt after mutation."""
        if self._index is None or self._index.version != self._version:
            self._index = GraphIndex.build(self)
        return self._index

    # ----------------------------------------------------------------- mutation
    def _touch(self) -> None:
        self._version += 1

    def _register_value(self, value: Value) -> Value:
        if value.name in self._values:
            raise ValueError(f"value name '%{value.name}' is already defined in graph '{self.name}'")
        self._values[value.name] = value
        value.graph = self
        return value

    def add_input(self, name: str, type: TensorType) -> Value:
        """Add a graph input."""
        value = self._register_value(Value(name, type, ValueKind.INPUT))
        self.inputs.append(value)
        self._touch()
        return value

    def add_constant(self, name: str, type: TensorType, data: ConstData | None = None) -> Value:
        """Add a constant (weight) value; ``data`` is held by reference, never copied."""
        value = self._register_value(Value(name, type, ValueKind.CONSTANT))
        value.const = data
        self.constants.append(value)
        self._touch()
        return value

    def add_node(
        self,
        op: str,
        inputs: Sequence[Value],
        output_types: Sequence[TensorType],
        *,
        name: str | None = None,
        output_names: Sequence[str] | None = None,
        params: Mapping[str, ParamValue] | None = None,
    ) -> Node:
        """Create a node using ``inputs`` and producing one new value per output type.

        Args:
            op: dialect-qualified op name (``onnx.Relu``).
            inputs: operand values; they must belong to this graph.
            output_types: one type per result.
            name: node name (default: the first output's name, or the op name), made unique.
            output_names: result names (default: derived from the node name), must be unused.
            params: the op's params, kept in the given order.
        """
        if output_names is not None and len(output_names) != len(output_types):
            raise ValueError(f"{len(output_names)} output names for {len(output_types)} outputs")
        base = name or (output_names[0] if output_names else op.rsplit(".", 1)[-1].lower())
        node = Node(op, self.unique_name(base, for_node=True), params)
        for i, value in enumerate(inputs):
            if value.graph is not self:
                raise ValueError(f"input #{i} '%{value.name}' of '{node.name}' is not a value of graph '{self.name}'")
            node.inputs.append(value)
            value.uses.append((node, i))
        for i, out_type in enumerate(output_types):
            if output_names is not None:
                out_name = output_names[i]
            else:
                out_name = self.unique_name(node.name if i == 0 else f"{node.name}#{i}")
            value = self._register_value(Value(out_name, out_type, ValueKind.RESULT))
            value.producer = node
            value.output_index = i
            node.outputs.append(value)
        node.graph = self
        node._seq = next(self._seq)
        self._nodes[node] = None
        self._node_names[node.name] = node
        self._touch()
        return node

    def add_node_unchecked(
        self,
        op: str,
        name: str,
        output_names: Sequence[str],
        output_types: Sequence[TensorType],
        params: dict[str, ParamValue],
        annotations: dict[str, Any],
        loc: Location | SourceLines | None,
        line: int = 0,
    ) -> Node:
        """:meth:`add_node` for readers that checked everything themselves (the `.gir` parser).

        The caller guarantees what :meth:`add_node` and :meth:`Node.set_annotation` would check:
        ``name`` and every output name are new in this graph, ``annotations`` holds values their
        declarations' ``check`` accepts unchanged, and ``params`` and ``annotations`` are fresh
        dicts the node may own. Operands are connected afterwards (:meth:`Node.add_input`). The
        graph's versions are not bumped here: call :meth:`touch_all` once after a batch. ``loc``
        may be the parsed text's :class:`~graphir.errors.SourceLines` with the node's ``line``
        (its :attr:`Node.loc` is then made when first read).
        """
        node = _new_object(Node)
        node.op = op
        node.name = name
        node.inputs = []
        node.params = params
        node._annotations = annotations
        node.graph = self
        node._seq = next(self._seq)
        node._index_pos = -1
        node._loc = loc
        node._line = line
        node.control_inputs = _NO_NODES  # as in Node.__init__
        node.control_users = _NO_NODES
        values = self._values
        # Each Value is built field by field (what Value.__init__ and add_node set), without the
        # __init__ call: this runs once per result of a large parsed graph.
        outputs: list[Value] = []
        node.outputs = outputs
        i = 0
        for value_name in output_names:
            value = _new_object(Value)
            value.name = value_name
            value.type = output_types[i]
            value.kind = _RESULT
            value.producer = node
            value.output_index = i
            value.uses = []
            value.const = None
            value.graph = self
            values[value_name] = value
            outputs.append(value)
            i += 1
        self._nodes[node] = None
        self._node_names[name] = node
        return node

    def annotate(self, key: str, nodes: Iterable[Node], values: Iterable[Any]) -> int:
        """Set annotation ``key`` of each of ``nodes`` (this graph's) to its value; ``None`` removes it.

        What :meth:`Node.set_annotation` does node by node (each value checked by the key's
        declaration), for a whole column at once: a pass writing one fact on every node (a group,
        a device, an order) pays one call, not a property access per node. The annotation version
        is bumped once when some node's value changed.

        Returns:
            The number of nodes whose value changed (set where it differed, or removed).
        """
        kind = ANNOTATIONS.get(key)
        if kind is None:
            raise KeyError(f"unknown annotation '{key}' (known: {', '.join(sorted(ANNOTATIONS))})")
        check = kind.check
        missing = object()
        changed = 0
        for node, value in zip(nodes, values, strict=True):
            annotations = node._annotations
            old = annotations.get(key, missing)
            if value is None:
                if old is not missing:
                    del annotations[key]
                    changed += 1
                continue
            value = check(value)
            if old is missing or old != value or type(old) is not type(value):
                changed += 1
            annotations[key] = value
        if changed:
            self._annotations_changed(key)
        return changed

    def touch_all(self, keys: Iterable[str] | None = None) -> None:
        """Mark the structure and the annotations changed (after :meth:`add_node_unchecked`).

        ``keys``: every annotation key the added nodes hold (``None``: not known, any key).
        """
        self._version += 1
        self._annotations_changed(None)
        if keys is None:
            self._annotation_keys = None
        elif self._annotation_keys is not None:
            self._annotation_keys.update(keys)

    def _annotations_changed(self, key: str | None) -> None:
        """Bump the annotation version for a change of ``key`` (``None``: of any key, none added)."""
        self._annotation_version += 1
        if key is None:
            self._annotation_all_version = self._annotation_version
        else:
            self._annotation_key_versions[key] = self._annotation_version
            if self._annotation_keys is not None:
                self._annotation_keys.add(key)

    def may_hold(self, *keys: str) -> bool:
        """False when no node of this graph holds an annotation among ``keys``.

        True when one may: the answer is kept as annotations are set (a removal does not make it
        False again), so a False is exact and lets a reader of those keys skip the nodes.
        """
        present = self._annotation_keys
        return present is None or not present.isdisjoint(keys)

    def annotations_changed_since(self, keys: Iterable[str], version: int) -> bool:
        """Whether an annotation among ``keys`` may have changed after annotation version ``version``.

        Always true for ``version`` -1 (before any check).
        """
        if self._annotation_all_version > version:
            return True
        versions = self._annotation_key_versions
        return any(versions.get(key, -1) > version for key in keys)

    def remove_node(self, node: Node) -> None:
        """Remove ``node``.

        Its results must be unused and not graph outputs, and no node may depend on it by a
        control edge; its own control inputs are detached.
        """
        if node not in self._nodes:
            raise ValueError(f"node '{node.name}' is not in graph '{self.name}'")
        for value in node.outputs:
            if value.uses:
                users = ", ".join(sorted({n.name for n, _ in value.uses}))
                raise ValueError(f"cannot remove '{node.name}': result '%{value.name}' is used by {users}")
            if any(v is value for v in self.outputs):
                raise ValueError(f"cannot remove '{node.name}': result '%{value.name}' is a graph output")
        if node.control_users:
            users = ", ".join(sorted(n.name for n in node.control_users))
            raise ValueError(f"cannot remove '{node.name}': {users} depend on it by control edges")
        for control in node.control_inputs:
            users = control.control_users
            assert isinstance(users, list), "it holds node: not _NO_NODES"
            users.remove(node)
        node.control_inputs = _NO_NODES
        for operand, value in enumerate(node.inputs):
            value.uses.remove((node, operand))
        for value in node.outputs:
            del self._values[value.name]
            value.graph = None
        del self._nodes[node]
        del self._node_names[node.name]
        node.graph = None
        self._touch()

    def remove_value(self, value: Value) -> None:
        """Remove an unused graph input or constant."""
        if value.uses or any(v is value for v in self.outputs):
            raise ValueError(f"cannot remove '%{value.name}': it is still used")
        if value.kind is ValueKind.INPUT:
            self.inputs.remove(value)
        elif value.kind is ValueKind.CONSTANT:
            self.constants.remove(value)
        else:
            raise ValueError(f"'%{value.name}' is a node result: remove its producer instead")
        del self._values[value.name]
        value.graph = None
        self._touch()

    def set_outputs(self, values: Iterable[Value]) -> None:
        """Set the graph outputs."""
        self.outputs = list(values)
        self._touch()

    def release(self) -> None:
        """Empty the graph and break its reference cycles, so that its nodes and values are freed at once.

        For a trial graph that is dropped (``parallelize``'s losing candidates): the node, value and
        graph references of a 100k-node graph form cycles that only the cyclic collector frees,
        in a full pass over every live object. Afterwards the graph is empty and its former nodes
        and values belong to no graph; nothing of it should be used again.
        """
        for node in self._nodes:
            for value in node.outputs:
                value.uses = []
                value.producer = None
                value.graph = None
            node.inputs = []
            node.outputs = []
            node.control_inputs = _NO_NODES
            node.control_users = _NO_NODES
            node.graph = None
        for value in (*self.inputs, *self.constants):
            value.uses = []
            value.graph = None
        self._nodes = {}
        self._values = {}
        self._node_names = {}
        self.inputs = []
        self.constants = []
        self.outputs = []
        if self._index is not None:  # whoever still holds the array view keeps arrays, not nodes
            self._index.nodes = []
            self._index.values = []
            self._index = None
        self._touch()


@attrs.define(eq=False)
class Module:
    """A graph, the cluster it is placed on (a spec string) and metadata.

    Attributes:
        name: module name (``@name`` in text).
        graph: the graph.
        cluster_spec: a cluster shorthand, preset name or TOML path; ``None`` means the default.
        metadata: extra module attributes, printed in the module header (producer, opset...).
    """

    name: str
    graph: Graph
    cluster_spec: str | None = None
    metadata: dict[str, ParamValue] = attrs.field(factory=dict[str, ParamValue])
    _cluster: Cluster | None = attrs.field(default=None, alias="_cluster")

    @property
    def cluster(self) -> Cluster:
        """The resolved cluster (:data:`graphir.cluster.DEFAULT_CLUSTER` when no spec is set).

        Presets and GPU shorthands resolve in the core; a cluster file or a host cluster (``Nxcpu``,
        ``Nxcpu-workers``) through a resolver registered from above
        (:func:`graphir.cluster.register_cluster_resolver`), else a one-line
        :class:`~graphir.cluster_model.ClusterError`.
        """
        from graphir.cluster import DEFAULT_CLUSTER, resolve_cluster

        spec = self.cluster_spec or DEFAULT_CLUSTER
        if self._cluster is None or self._cluster.spec != spec:
            self._cluster = resolve_cluster(spec)
        return self._cluster

    def set_cluster(self, cluster: Cluster) -> None:
        """Attach an already resolved cluster (its spec is recorded in ``cluster_spec``)."""
        self._cluster = cluster
        self.cluster_spec = cluster.spec
