"""The verifier: structural and annotation invariants, checked after every pass by default.

Checks, in order:
    1. use lists: every operand is a value of this graph with a producer (a node, a graph input or
       a constant), and every use recorded on a value matches an operand (skipped on a graph as
       the `.gir` parser built it, which appends each use with its operand);
    2. acyclicity of the graph (a cycle error names its nodes);
    3. type agreement for ops with a type rule in :mod:`graphir.ops` (elementwise, MatMul, the graphir dialect),
       and for a node holding regions (:mod:`graphir.regions`): the region boundary (formal
       arguments, results and captured operands, :func:`graphir.regions.check_regions`) and checks
       1-3 on each region graph;
    4. annotations: devices exist in the module's cluster; ``order`` is a permutation
       ``0..k-1`` on each device; ``colocate``d nodes share a device; ``affinity`` is respected;
    5. acyclicity of the quotient graph of ``group`` annotations (a cycle error names the groups
       and one member of each).
"""

# The verifier compares the graph's private version counters and reads its annotation tables
# (it runs after every pass: the cheap checks first).
# pyright: reportPrivateUsage=false
from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from graphir.errors import Location, VerifyError
from graphir.gcpause import gc_paused
from graphir.index import GraphIndex
from graphir.ir import Graph, Module, Node, ValueKind
from graphir.ops import type_rule_of
from graphir.regions import check_regions, has_regions, node_regions
from graphir.topo import find_cycle, has_cycle


def _node_loc(node: Node) -> Location:
    if node.loc is not None:
        # Point at the op name on the node's source line.
        source = node.loc.source_line or ""
        col = source.find(node.op) + 1 if node.op in source else node.loc.col
        return Location(node.loc.file, node.loc.line, col, node.loc.source_line, node.loc.node)
    return Location(node=node.name)


def _err(node: Node, message: str) -> VerifyError:
    return VerifyError(f"'{node.op}' op '{node.name}' {message}", _node_loc(node))


def _check_uses(graph: Graph) -> None:
    for node in graph.nodes:
        for k, value in enumerate(node.inputs):
            if value.graph is not graph:
                raise _err(node, f"operand #{k} '%{value.name}' is not a value of graph '{graph.name}'")
            if value.kind is ValueKind.RESULT and (value.producer is None or value.producer.graph is not graph):
                raise _err(node, f"operand #{k} '%{value.name}' has no producer in graph '{graph.name}'")
            if (node, k) not in value.uses:
                raise _err(node, f"operand #{k} '%{value.name}' is missing from its use list")
        for control in node.control_inputs:
            if control.graph is not graph or node not in control.control_users:
                raise _err(node, f"control input '{control.name}' is not a node of graph '{graph.name}'")
        for value in node.outputs:
            for user, k in value.uses:
                if user.graph is not graph or k >= len(user.inputs) or user.inputs[k] is not value:
                    raise _err(node, f"result '%{value.name}' has a stale use by '{user.name}'")
    for value in graph.outputs:
        if value.graph is not graph:
            raise VerifyError(f"graph output '%{value.name}' is not a value of graph '{graph.name}'")


def _check_types(graph: Graph) -> None:
    for node in graph.nodes:
        if node.params and has_regions(node):
            _check_region_holder(node)
        rule = type_rule_of(node.op)  # the op's type rule in graphir.ops (None: unchecked)
        if rule is None:
            continue
        message = rule(node, [v.type for v in node.inputs], [v.type for v in node.outputs])
        if message is not None:
            raise _err(node, message)


def _check_region_holder(node: Node) -> None:
    """The boundary of ``node``'s regions, then uses, acyclicity and types inside each region graph."""
    message = check_regions(node)
    if message is not None:
        raise _err(node, message)
    for _, region in node_regions(node):
        _check_uses(region.graph)
        region.graph.index()  # raises on a cycle, naming it
        _check_types(region.graph)


PLACEMENT_KEYS = ("device", "order", "affinity", "colocate")
"""The annotations :func:`_check_annotations` reads (with the structure and the cluster)."""


def _check_annotations(module: Module) -> None:
    graph = module.graph
    devices: dict[str, str] | None = None
    ordered: list[tuple[str, int, Node]] = []  # (device, order, node) in graph order
    colocated: dict[str, tuple[str | None, Node]] = {}
    for node in graph.nodes:
        # One read of the node's own annotation dict (the typed accessors cost a call per key).
        annotations = node._annotations
        if not annotations:
            continue
        device = annotations.get("device")
        if device is not None:
            if devices is None:
                devices = {d.name: d.kind for d in module.cluster.devices}
            if device not in devices:
                names = ", ".join(devices)
                raise _err(
                    node, f"is placed on unknown device '{device}' (cluster '{module.cluster.spec}' has {names})"
                )
            affinity = annotations.get("affinity")
            if affinity is not None and devices[device] not in affinity:
                raise _err(node, f"runs only on {', '.join(affinity)} but is placed on '{device}' ({devices[device]})")
        order = annotations.get("order")
        if order is not None:
            if device is None:
                raise _err(node, "has an 'order' but no 'device'")
            ordered.append((device, order, node))
        colocate = annotations.get("colocate")
        if colocate is not None:
            first = colocated.get(colocate)
            if first is None:
                colocated[colocate] = (device, node)
            elif first[0] != device:
                where = f"on '{device}'" if device is not None else "unplaced"
                other = f"on '{first[0]}'" if first[0] is not None else "unplaced"
                raise _err(node, f"is {where} but its colocation class '{colocate}' has '{first[1].name}' {other}")
    if ordered:
        _check_orders(graph, ordered)


def _check_orders(graph: Graph, ordered: list[tuple[str, int, Node]]) -> None:
    """Each device's orders are ``0..k-1``, and its sequence does not deadlock the data edges.

    Vectorised: one sort by (device name, order, graph position) puts every device's sequence in
    line; the first entry whose order differs from its rank is the one reported (devices by name,
    entries by order, as a per-device check in that order would find it).
    """
    names = sorted({device for device, _, _ in ordered})
    rank = {name: k for k, name in enumerate(names)}
    device_rank = np.fromiter((rank[device] for device, _, _ in ordered), dtype=np.int64, count=len(ordered))
    orders = [order for _, order, _ in ordered]
    if max(orders) > len(ordered):
        # Some order is wrong for sure, and may not fit int64: find it on Python ints.
        _check_orders_exact(ordered)
    order_array = np.asarray(orders, dtype=np.int64)
    sequence = np.lexsort((np.arange(len(ordered)), order_array, device_rank))
    sorted_rank = device_rank[sequence]
    counts = np.bincount(sorted_rank, minlength=len(names))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    expected = np.arange(len(ordered)) - starts[sorted_rank]
    wrong = np.flatnonzero(order_array[sequence] != expected)
    if len(wrong):
        k = int(wrong[0])
        device, order, node = ordered[int(sequence[k])]
        count = int(counts[sorted_rank[k]])
        raise _err(node, f"has order {order} on '{device}', expected {int(expected[k])}: orders must be 0..{count - 1}")
    # Every device's sequence is now 0..k-1: chain consecutive entries and check the union with
    # the data edges for a cycle.
    index = graph.index()
    assert index.version == graph._version  # graph.index() is current: a node's _index_pos is its position
    positions = np.fromiter((node._index_pos for _, _, node in ordered), dtype=np.int64, count=len(ordered))
    in_line = positions[sequence]
    same_device = sorted_rank[1:] == sorted_rank[:-1]
    src = np.concatenate([index.edge_src, in_line[:-1][same_device]])
    dst = np.concatenate([index.edge_dst, in_line[1:][same_device]])
    if _acyclic(index.num_nodes, src, dst, _group_rank(index)):
        return
    cycle = [index.nodes[u].name for u in find_cycle(index.num_nodes, src, dst)]
    raise VerifyError(
        "the per-device 'order' deadlocks against the data dependencies: " + " -> ".join(cycle + cycle[:1])
    )


def _group_rank(index: GraphIndex) -> np.ndarray | None:
    """A numbering of the nodes by the fused groups' topological order (then by position), or ``None``.

    Placers order each device's nodes group by group, so the order edges mostly follow it: the
    hint that keeps :func:`_acyclic`'s exact check small. ``None`` without groups (or with a cyclic
    quotient, which :func:`check_quotient` reports): the positions are the hint then.
    """
    groups = index.groups()
    if not bool((groups >= 0).any()):
        return None
    quotient = index.quotient()
    if quotient.order is None:
        return None
    group_rank = np.empty(quotient.num_groups, dtype=np.int64)
    group_rank[quotient.order] = np.arange(quotient.num_groups, dtype=np.int64)
    n = index.num_nodes
    sequence = np.lexsort((np.arange(n), group_rank[quotient.node_group]))
    rank = np.empty(n, dtype=np.int64)
    rank[sequence] = np.arange(n, dtype=np.int64)
    return rank


def _check_orders_exact(ordered: list[tuple[str, int, Node]]) -> None:
    """The per-device order check on Python ints (orders too large for int64 arrays)."""
    by_device: dict[str, list[tuple[int, Node]]] = defaultdict(list)
    for device, order, node in ordered:
        by_device[device].append((order, node))
    for device, entries in sorted(by_device.items()):
        entries.sort(key=lambda e: e[0])
        for expected, (order, node) in enumerate(entries):
            if order != expected:
                raise _err(
                    node, f"has order {order} on '{device}', expected {expected}: orders must be 0..{len(entries) - 1}"
                )


def _acyclic(num_nodes: int, src: np.ndarray, dst: np.ndarray, rank: np.ndarray | None = None) -> bool:
    """Whether the edges ``src -> dst`` (no self-loops) form a DAG: every strong component is one node.

    ``rank`` is any numbering of the nodes (a permutation of ``0..num_nodes-1``; default the node
    numbers) that the edges mostly follow. Call an edge backward when it goes down in ``rank``.
    A cycle climbs by edges and comes back down by backward edges, so every step between its
    lowest and highest rank lies under the rank interval of one of its backward edges: the cycle
    stays inside one merged run of overlapping backward intervals (a "window"). The exact check
    (a Kahn peel, :func:`graphir.topo.has_cycle`) then runs only on the nodes of the windows and
    the edges inside one window, which is small when the numbering is nearly a topological order
    (the placers' ``order`` follows the fused groups' order). Large windows go to scipy's strongly
    connected components (compiled, O(V+E), but its import alone costs about 0.15 s).
    """
    if len(src) == 0:
        return True
    if rank is None:
        rank = np.arange(num_nodes, dtype=np.int64)
    rsrc, rdst = rank[src], rank[dst]
    backward = rsrc > rdst
    if not backward.any():
        return True
    lows, highs = rdst[backward], rsrc[backward]
    by_low = np.argsort(lows, kind="stable")
    lows, highs = lows[by_low], highs[by_low]
    reach = np.maximum.accumulate(highs)
    first = np.flatnonzero(np.concatenate(([True], lows[1:] > reach[:-1])))
    starts, ends = lows[first], np.maximum.reduceat(highs, first)
    # Window number of each rank (-1 outside every window).
    marks = np.zeros(num_nodes + 1, dtype=np.int64)
    np.add.at(marks, starts, 1)
    np.add.at(marks, ends + 1, -1)
    inside = np.cumsum(marks[:-1]) > 0
    window_nodes = int(inside.sum())
    if window_nodes > _PEEL_NODES:
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import connected_components

        adjacency = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(num_nodes, num_nodes))
        count, _ = connected_components(adjacency, directed=True, connection="strong")
        return int(count) == num_nodes
    window_of = np.full(num_nodes, -1, dtype=np.int64)
    window_of[inside] = np.searchsorted(starts, np.flatnonzero(inside), side="right") - 1
    wsrc, wdst = window_of[rsrc], window_of[rdst]
    keep = (wsrc >= 0) & (wsrc == wdst)
    local = np.full(num_nodes, -1, dtype=np.int64)
    local[inside] = np.arange(window_nodes, dtype=np.int64)
    return not has_cycle(window_nodes, local[rsrc[keep]], local[rdst[keep]])


_PEEL_NODES = 40_000
"""Windows larger than this go to scipy: the Python peel costs about 2.5 us per node and edge."""


def check_quotient(graph: Graph) -> None:
    """Raise :class:`VerifyError` naming a cycle of the quotient graph of ``group``s, if any."""
    index = graph.index()
    if not bool((index.groups() >= 0).any()):
        return  # every node is its own group: the quotient is the graph, already checked acyclic
    quotient = index.quotient()
    if quotient.order is not None:
        return
    cycle = quotient.cycle()
    members = quotient.members()
    names: list[str] = []
    for g in cycle:
        first = index.nodes[members[g][0]]
        gid = int(quotient.group_ids[g])
        names.append(f"group {gid} ('{first.name}')" if gid >= 0 else f"'{first.name}'")
    raise VerifyError(f"the quotient graph of groups has a cycle: {' -> '.join(names + names[:1])}")


@dataclasses.dataclass
class VerifyState:
    """The graph versions at the last successful :func:`verify`, so the next one skips what is unchanged.

    Every structural mutation through the IR API bumps ``Graph._version`` (the same counter that
    invalidates :meth:`~graphir.ir.Graph.index`) and every annotation change bumps
    ``Graph._annotation_version``. A pass that only annotates leaves the first alone, so the
    structural checks (use lists, acyclicity, types) need not run again; the placement checks run
    again only when a key they read (:data:`PLACEMENT_KEYS`) changed, the group check only when
    ``group`` did (:meth:`~graphir.ir.Graph.annotations_changed_since`), so ``fuse`` (groups)
    skips the first and ``place`` (devices, orders) the second. Mutations outside the API (editing ``params`` or an
    op name in place) must call ``graph._touch()``, as they must for the index.
    """

    graph: Graph | None = None
    structure: int = -1
    annotations: int = -1
    cluster_spec: str | None = None


def verify(module: Module, since: VerifyState | None = None) -> None:
    """Check every invariant of ``module``; raises :class:`~graphir.errors.VerifyError`.

    Args:
        module: the module.
        since: when given, only the checks whose inputs changed since this state was recorded
            run, and the state is updated after a successful check (an empty state checks all).
    """
    with gc_paused():  # the checks make short-lived objects only: no collector passes over a big graph
        _verify(module, since)


def _verify(module: Module, since: VerifyState | None) -> None:
    graph = module.graph
    structural = since is None or since.graph is not graph or since.structure != graph._version
    if structural:
        if graph._uses_exact_version != graph._version:  # not as the parser left it
            _check_uses(graph)
        graph.index()  # raises on a cycle, naming it
        _check_types(graph)
    # The version of the last check, or -1 when everything is checked again.
    last = -1 if structural or since is None or since.cluster_spec != module.cluster_spec else since.annotations
    # A key no node holds has nothing to check (a graph not yet placed or grouped).
    if graph.annotations_changed_since(PLACEMENT_KEYS, last) and graph.may_hold(*PLACEMENT_KEYS):
        _check_annotations(module)
    if graph.annotations_changed_since(("group",), last) and graph.may_hold("group"):
        check_quotient(graph)
    if since is not None:
        since.graph = graph
        since.structure = graph._version
        since.annotations = graph._annotation_version
        since.cluster_spec = module.cluster_spec
