"""The array view of a graph: topological numbering, CSR adjacency, bytes, costs and groups.

Built once per structural version of the graph (:meth:`graphir.ir.Graph.index`) and shared by
every heavy pass. Edges are dependencies between nodes: one per (producer, consumer, value)
triple, whose bytes are the size of the value it carries, plus one zero-byte control edge per
control input (``edge_control``). Annotation-derived arrays (times,
memory, groups) are cached separately and recomputed when an annotation they read changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from graphir.annotations import DEFAULT_KIND
from graphir.errors import Location, VerifyError, format_cycle
from graphir.topo import csr, find_cycle, stable_topological_order
from graphir.types import MAX_TENSOR_BYTES, is_static_shape

if TYPE_CHECKING:
    from graphir.ir import Graph, Node, Value
    from graphir.types import TensorType


_T = TypeVar("_T")

MAX_TOTAL_BYTES = 1 << 62
"""Ceiling of the sum of a graph's result bytes (and of its persistent bytes): int64 sums stay exact."""


def _node_loc(node: Node) -> Location:
    return node.loc if node.loc is not None else Location(node=node.name)


MAX_ANNOTATION_INT = 1 << 62
"""Largest ``group`` / ``order`` value: the arrays that hold them are int64."""


def _check_int_annotations(node: Node) -> None:
    for key in ("group", "order"):
        value = node._annotations.get(key)
        if isinstance(value, int) and value > MAX_ANNOTATION_INT:
            raise VerifyError(
                f"node '{node.name}': annotation '{key} = {value}' is out of range (limit 2^62)", _node_loc(node)
            )


def _type_bytes(tensor_type: TensorType) -> int:
    """``tensor_type.nbytes_or(0)`` (a symbol or ``None`` dim makes it 0)."""
    shape = tensor_type.shape
    # Checked before the product: math.prod would repeat a symbol's string by the other
    # dims (``'batch' * 2**40``: a MemoryError) before its result could be seen as no int.
    if not is_static_shape(shape):
        return 0
    return math.prod(shape) * tensor_type.dtype.itemsize


def _value_sizes(values: list[Value]) -> list[int]:
    """``value.nbytes`` of each value, computed once per distinct type object (types are shared)."""
    by_type: dict[int, int] = {}
    sizes = []
    append = sizes.append
    for value in values:
        value_type = value.type
        size = by_type.get(id(value_type))
        if size is None:
            size = by_type[id(value_type)] = _type_bytes(value_type)
        append(size)
    return sizes


def _value_loc(graph: Graph, value: Value) -> Location:
    """The first user's location for an input or constant (they have none of their own)."""
    users = [node for node, _ in value.uses]
    return _node_loc(users[0]) if users else Location(node=f"graph @{graph.name}")


def _raise_size_overflow(graph: Graph, values: list[Value], sizes: list[int]) -> None:
    """A one-line error naming the first value whose type is too large (or the graph's total)."""
    for value in values:
        problem = value.type.size_error()
        if problem is not None:
            producer = value.producer
            loc = _node_loc(producer) if producer is not None else Location()
            raise VerifyError(f"value '{value.name}': {problem}", loc)
    raise VerifyError(f"graph '{graph.name}': its results total {sum(sizes)} bytes: size overflows (limit 2^62)")


def _raise_persistent_overflow(nodes: list[Node], sizes: list[int]) -> None:
    for node, size in zip(nodes, sizes, strict=True):
        if size > MAX_TENSOR_BYTES:
            raise VerifyError(
                f"node '{node.name}': persistent memory of {size} bytes: size overflows (limit 2^53)",
                _node_loc(node),
            )
    raise VerifyError(f"persistent memory totals {sum(sizes)} bytes: size overflows (limit 2^62)")


class GraphIndex:
    """Array snapshot of a :class:`~graphir.ir.Graph`.

    Attributes:
        version: the graph version it was built from.
        nodes: nodes in topological order; node ``i`` below means ``nodes[i]``.
        edge_src, edge_dst: int64 arrays, edges sorted by (src, dst).
        edge_value: int64 index into ``values`` of the value each edge carries; -1 for a control
            edge (a dependency without data).
        edge_control: bool, True for control edges.
        edge_bytes: int64 bytes of each edge (0 for control edges).
        succ_offsets, succ: CSR successors (``succ[succ_offsets[u]:succ_offsets[u+1]]``).
        succ_edge: edge id of each ``succ`` entry.
        pred_offsets, pred, pred_edge: CSR predecessors likewise.
        values: node results, grouped by producer in topological order.
        value_bytes: int64 bytes per value; value_producer: int64 producer node per value.
    """

    # The arrays, filled by :meth:`build`.
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_value: np.ndarray
    edge_control: np.ndarray
    edge_bytes: np.ndarray
    succ_offsets: np.ndarray
    succ: np.ndarray
    succ_edge: np.ndarray
    pred_offsets: np.ndarray
    pred: np.ndarray
    pred_edge: np.ndarray
    value_bytes: np.ndarray
    value_producer: np.ndarray

    def __init__(self, graph: Graph):
        self.graph = graph
        self.version = graph._version
        self.nodes: list[Node] = []
        self.values: list[Value] = []
        self._cache: dict[object, tuple[object, int]] = {}  # key -> (value, annotation version built at)
        self._last_quotient: tuple[np.ndarray, Quotient] | None = None

    @property
    def num_nodes(self) -> int:
        """Number of nodes."""
        return len(self.nodes)

    @property
    def num_edges(self) -> int:
        """Number of edges."""
        return len(self.edge_src)

    @classmethod
    def build(cls, graph: Graph) -> GraphIndex:
        """Number the nodes topologically and build the CSR arrays.

        Raises:
            VerifyError: the graph has a cycle (the message names the cycle's nodes).
        """
        index = cls(graph)
        insertion = list(graph.nodes)
        for position, node in enumerate(insertion):
            node._index_pos = position
        src: list[int] = []
        dst: list[int] = []
        carried: list[int] = []  # the carried value's output index at its producer; -1 marks a control edge
        for position, node in enumerate(insertion):
            inputs = node.inputs
            if len(inputs) > 1 and len(set(inputs)) != len(inputs):
                inputs = list(dict.fromkeys(inputs))
            for value in inputs:
                producer = value.producer
                if producer is not None:
                    src.append(producer._index_pos)
                    dst.append(position)
                    carried.append(value.output_index)
            for control in node.control_inputs:
                src.append(control._index_pos)
                dst.append(position)
                carried.append(-1)
        src_arr = np.asarray(src, dtype=np.int64)
        dst_arr = np.asarray(dst, dtype=np.int64)
        order = stable_topological_order(len(insertion), src_arr, dst_arr)
        if order is None:
            cycle = find_cycle(len(insertion), src_arr, dst_arr)
            names = [insertion[u].name for u in cycle]
            first = insertion[cycle[0]]
            loc = first.loc if first.loc is not None else Location(node=first.name)
            raise VerifyError(f"graph '{graph.name}' has a cycle: {format_cycle(names)}", loc)
        in_order = np.array_equal(order, np.arange(len(insertion)))  # as a printed graph is
        if in_order:  # the insertion positions are the topological ones
            index.nodes = insertion
            src_t, dst_t = src_arr, dst_arr
        else:
            rank = np.empty(len(insertion), dtype=np.int64)
            rank[order] = np.arange(len(insertion), dtype=np.int64)
            index.nodes = [insertion[u] for u in order.tolist()]
            for position, node in enumerate(index.nodes):
                node._index_pos = position
            src_t = rank[src_arr] if len(src_arr) else src_arr
            dst_t = rank[dst_arr] if len(dst_arr) else dst_arr
        values: list[Value] = []  # results of nodes in topological order; edges refer to them by number
        output_counts: list[int] = []
        check_ints = graph.may_hold("group", "order")
        for node in index.nodes:
            annotations = node._annotations
            if check_ints and annotations:
                group = annotations.get("group", 0)
                order = annotations.get("order", 0)
                # Plain ints in range (every valid annotation) need no further look.
                if (
                    type(group) is not int
                    or type(order) is not int
                    or group > MAX_ANNOTATION_INT
                    or order > MAX_ANNOTATION_INT
                ):
                    _check_int_annotations(node)
            outputs = node.outputs
            values.extend(outputs)
            output_counts.append(len(outputs))
        index.values = values
        sizes = _value_sizes(values)
        if sizes and (max(sizes) > MAX_TENSOR_BYTES or sum(sizes) > MAX_TOTAL_BYTES):
            _raise_size_overflow(graph, values, sizes)
        for value in (*graph.inputs, *graph.constants):  # not edges, but the cost model reads them
            problem = value.type.size_error()
            if problem is not None:
                kind = "constant" if value.const is not None else "graph input"
                raise VerifyError(f"{kind} '{value.name}': {problem}", _value_loc(graph, value))
        index.value_bytes = np.asarray(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)
        # Values are grouped by producer in topological order, and a result's output_index is its
        # place there: a value's producer is the node whose group holds it, and its number is its
        # producer's first result number plus its output index.
        counts = np.asarray(output_counts, dtype=np.int64)
        index.value_producer = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        first_value = np.zeros(len(output_counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=first_value[1:])
        output_index = np.asarray(carried, dtype=np.int64)
        edge_value = np.where(output_index < 0, -1, first_value[src_t] + output_index) if len(carried) else output_index
        sort = np.lexsort((edge_value, dst_t, src_t))
        index.edge_src = src_t[sort]
        index.edge_dst = dst_t[sort]
        index.edge_value = edge_value[sort]
        index.edge_control = index.edge_value < 0
        index.edge_bytes = (
            np.where(index.edge_control, 0, index.value_bytes[np.maximum(index.edge_value, 0)])
            if len(values)
            else np.zeros(len(sort), np.int64)
        )
        n = len(index.nodes)
        index.succ_offsets, index.succ, index.succ_edge = csr(n, index.edge_src, index.edge_dst)
        index.pred_offsets, index.pred, index.pred_edge = csr(n, index.edge_dst, index.edge_src)
        return index

    # ----------------------------------------------------------------- lookups
    def position(self, node: Node) -> int:
        """Topological number of ``node`` in this index."""
        if self.graph._version != self.version or node.graph is not self.graph:
            raise ValueError("stale graph index: the graph changed after it was built")
        return node._index_pos

    def successors(self, u: int) -> np.ndarray:
        """Successor numbers of node ``u`` (with repeats when several values flow)."""
        return self.succ[self.succ_offsets[u] : self.succ_offsets[u + 1]]

    def predecessors(self, u: int) -> np.ndarray:
        """Predecessor numbers of node ``u``."""
        return self.pred[self.pred_offsets[u] : self.pred_offsets[u + 1]]

    def out_bytes(self) -> np.ndarray:
        """Total bytes of each node's results (int64 per node)."""
        return np.bincount(self.value_producer, weights=self.value_bytes, minlength=self.num_nodes).astype(np.int64)

    # ----------------------------------------------------------------- annotation arrays
    def _annotation_cached(self, key: object, build: Callable[[], _T], keys: tuple[str, ...] | None = None) -> _T:
        """``build()``, cached until an annotation among ``keys`` changes (``None``: any annotation)."""
        graph = self.graph
        cached = self._cache.get(key)
        if cached is not None:
            value, built = cached
            if built == graph._annotation_version or (
                keys is not None and not graph.annotations_changed_since(keys, built)
            ):
                return cast(_T, value)  # each key is built by one function, the build that cached it
        fresh = build()
        self._cache[key] = (fresh, graph._annotation_version)
        return fresh

    def annotation_list(self, key: str) -> list[Any]:
        """The ``key`` annotation of every node (None where absent), cached until that annotation changes.

        One read of each node's annotation table: the simulator's per-node inputs without a property
        call per node. The list is shared: do not modify it.
        """

        def build() -> list[Any]:
            if not self.graph.may_hold(key):
                return [None] * len(self.nodes)
            return [node._annotations.get(key) for node in self.nodes]

        return self._annotation_cached(("annotation", key), build, (key,))

    def times(self, kind: str | None = None) -> np.ndarray:
        """Compute time (s) per node on device ``kind``; NaN where a node has no cost."""

        def build() -> np.ndarray:
            nan = float("nan")
            values = []
            append = values.append
            for node in self.nodes:
                cost = node._annotations.get("cost")
                if cost is None:
                    append(nan)
                    continue
                times = cost.times
                if len(times) == 1 and times[0][0] == DEFAULT_KIND:
                    append(times[0][1])  # what cost.time(kind) returns for a kind-independent cost
                else:
                    value = cost.time(kind)
                    append(nan if value is None else value)
            return np.array(values, dtype=np.float64) if values else np.full(0, np.nan)

        return self._annotation_cached(("times", kind), build, ("cost",))

    def persistent_bytes(self) -> np.ndarray:
        """Persistent bytes per node from ``mem`` (0 where absent)."""

        def build() -> np.ndarray:
            sizes = [0 if mem is None else mem.persistent for mem in self.annotation_list("mem")]
            if sizes and (max(sizes) > MAX_TENSOR_BYTES or sum(sizes) > MAX_TOTAL_BYTES):
                _raise_persistent_overflow(self.nodes, sizes)
            return np.asarray(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)

        return self._annotation_cached("persistent", build, ("mem",))

    def groups(self) -> np.ndarray:
        """Group id per node, -1 where the node has no ``group``."""

        def build() -> np.ndarray:
            if not self.graph.may_hold("group"):
                return np.full(self.num_nodes, -1, dtype=np.int64)
            return np.fromiter(
                (n._annotations.get("group", -1) for n in self.nodes), dtype=np.int64, count=self.num_nodes
            )

        return self._annotation_cached("groups", build, ("group",))

    def quotient(self) -> Quotient:
        """The coarse graph in which each ``group`` is one node (ungrouped nodes stay alone)."""

        def build() -> Quotient:
            # Any annotation change clears the caches, but most (device, order, start...) leave the
            # groups alone: the previous quotient is reused when the groups are the same.
            groups = self.groups()
            previous = self._last_quotient
            if previous is not None and np.array_equal(previous[0], groups):
                return previous[1]
            quotient = Quotient.build(self)
            self._last_quotient = (groups, quotient)
            return quotient

        return self._annotation_cached("quotient", build, ("group",))


def quotient_edges(
    node_group: np.ndarray,
    num_groups: int,
    edge_src: np.ndarray,
    edge_dst: np.ndarray,
    edge_value: np.ndarray,
    value_bytes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The edges between groups of a fine graph: one per (source group, destination group) pair.

    A value crosses into a destination group once, whatever number of its members use it, so an
    edge's bytes are the distinct values it carries; a control edge (``edge_value`` -1) carries none.
    Edges inside a group are dropped. Returns ``(src, dst, bytes)`` (int64), sorted by (src, dst).
    """
    gs = node_group[edge_src]
    gd = node_group[edge_dst]
    cross = gs != gd
    gs, gd, val = gs[cross], gd[cross], edge_value[cross]
    triples = np.unique(np.stack([gs, gd, val]), axis=1) if len(gs) else np.zeros((3, 0), np.int64)
    width = max(num_groups, 1)
    pairs, pair_inverse = np.unique(triples[0] * width + triples[1], return_inverse=True)
    carried_bytes = (
        np.where(triples[2] >= 0, value_bytes[np.maximum(triples[2], 0)], 0)
        if len(value_bytes)
        else np.zeros(triples.shape[1], np.int64)
    )
    nbytes = np.bincount(pair_inverse.reshape(-1), weights=carried_bytes, minlength=len(pairs)).astype(np.int64)
    return pairs // width, pairs % width, nbytes


class Quotient:
    """The quotient graph of the ``group`` annotation, as arrays.

    Attributes:
        num_groups: number of coarse nodes; numbered by the first topological position of a member.
        node_group: coarse node of each fine node.
        group_ids: the ``group`` annotation value of each coarse node (-1 for a singleton).
        edge_src, edge_dst, edge_bytes: coarse edges (deduplicated); bytes count each value once
            per destination group.
        order: a topological order of the coarse nodes, or ``None`` when the quotient has a cycle.
    """

    # Filled by :meth:`build`.
    num_groups: int
    node_group: np.ndarray
    group_ids: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    order: np.ndarray | None
    _index: GraphIndex

    @classmethod
    def build(cls, index: GraphIndex) -> Quotient:
        """Compute the quotient of ``index``'s graph under its current groups."""
        q = cls()
        n = index.num_nodes
        groups = index.groups()
        keys = np.where(groups >= 0, groups, -1 - np.arange(n, dtype=np.int64) - (1 << 40))
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        rank_by_first = np.argsort(np.argsort(first, kind="stable"), kind="stable")
        q.node_group = rank_by_first[inverse.reshape(-1)]
        q.num_groups = len(first)
        group_ids = np.empty(q.num_groups, dtype=np.int64)
        group_ids[q.node_group] = groups
        q.group_ids = group_ids
        q.edge_src, q.edge_dst, q.edge_bytes = quotient_edges(
            q.node_group, q.num_groups, index.edge_src, index.edge_dst, index.edge_value, index.value_bytes
        )
        q.order = stable_topological_order(q.num_groups, q.edge_src, q.edge_dst)
        return q  # no reference back to the index: the index caches it, and a cycle would outlive both

    def members(self) -> list[list[int]]:
        """Fine node numbers of each coarse node."""
        order = np.argsort(self.node_group, kind="stable")
        bounds = np.searchsorted(self.node_group[order], np.arange(self.num_groups + 1))
        return [order[bounds[g] : bounds[g + 1]].tolist() for g in range(self.num_groups)]

    def cycle(self) -> list[int]:
        """One cycle of coarse nodes (empty when acyclic)."""
        return [] if self.order is not None else find_cycle(self.num_groups, self.edge_src, self.edge_dst)
