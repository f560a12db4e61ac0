"""What every placer shares: the coarse problem as arrays, constraints, expansion, scheduling.

A placer never walks IR objects. :meth:`PlacementProblem.from_module` builds, from the graph's
array view, the graph the placer works on: the quotient graph of ``group`` annotations when groups
exist (each group is one coarse node, its compute time the sum of its members'), else the graph
itself. Per coarse node it holds the compute time on every device (per device kind), the memory it
needs, the devices it may use (``affinity``), and its colocation class (``colocate``: a class is
pinned to the device its first placed member went to). Communication between devices follows the
cluster's link model (:class:`graphir.links.LinkModel`).

The problem also carries what a placer may need from the fine graph without seeing the Module:
:class:`FineGraph` (node names, the value-level edges: ``place{algo=file}`` reads a placement by
node name, the ILP counts one transfer per crossing value) and ``preferred``, a device per coarse
node from the chosen placer's *device hints* (``Placer.device_hints``, a pre-step the ``place``
pass runs on the Module before building the problem; ``data-parallel`` uses it). The one
fine-to-coarse device mapping is :func:`coarse_devices`.

A placer returns a device per coarse node and, when it schedules, a start time per coarse node;
:func:`write_placement` expands that to every member node as ``device`` and ``order``
annotations (members of one coarse node run consecutively, in topological order).
:func:`list_schedule` derives start times from a device assignment for placers that only place.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from graphir.errors import PassError
from graphir.index import GraphIndex
from graphir.ir import Module
from graphir.links import LinkModel
from graphir.memory import output_mask, temporary_bytes
from graphir.passes.training import training_structure
from graphir.topo import csr
from graphir.unionfind import DisjointSets

if TYPE_CHECKING:
    from graphir.cluster import Cluster


@dataclasses.dataclass(frozen=True)
class FineGraph:
    """The fine graph's names and value-level edges, in the graph index's numbering (arrays shared with it).

    Attributes:
        node_names: name of each fine node.
        edge_src, edge_dst: fine producer and consumer of each edge.
        edge_value: the value an edge carries (-1: a control edge).
        edge_control: whether an edge is a control dependency.
        value_producer: fine producer node of each value.
        value_bytes: bytes of each value.
        value_output: whether each value is a graph output (it lives until the end of the step).
        temporary: ``mem.temporary`` bytes of each fine node (0 without ``mem``).
        colocation: ``colocate`` class per fine node (-1: none; classes numbered by first member),
            for a placer that places the fine graph of a fused problem.
    """

    node_names: tuple[str, ...]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_value: np.ndarray
    edge_control: np.ndarray
    value_producer: np.ndarray
    value_bytes: np.ndarray
    value_output: np.ndarray
    temporary: np.ndarray
    colocation: np.ndarray | None = None


def graph_fields(
    num_nodes: int, edge_src: np.ndarray, edge_dst: np.ndarray, edge_bytes: np.ndarray
) -> dict[str, np.ndarray]:
    """The graph fields of a :class:`PlacementProblem` (edges and both CSR views) from its edges.

    ``edge_src``/``edge_dst`` index nodes numbered topologically, one edge per (src, dst) pair (as
    :func:`graphir.index.quotient_edges` gives them); bytes become float64.
    """
    succ_offsets, succ, succ_edge = csr(num_nodes, edge_src, edge_dst)
    pred_offsets, pred, pred_edge = csr(num_nodes, edge_dst, edge_src)
    return {
        "edge_src": edge_src,
        "edge_dst": edge_dst,
        "edge_bytes": np.asarray(edge_bytes, dtype=np.float64),
        "succ_offsets": succ_offsets,
        "succ": succ,
        "succ_edge": succ_edge,
        "pred_offsets": pred_offsets,
        "pred": pred,
        "pred_edge": pred_edge,
    }


def coarse_devices(node_group: np.ndarray, num_groups: int, fine_device: np.ndarray) -> tuple[np.ndarray, int]:
    """A device per coarse node from a device per fine node (-1: none): the first member's that has one.

    Args:
        node_group: coarse node of each fine node.
        num_groups: number of coarse nodes.
        fine_device: device per fine node, -1 where the fine node has none.

    Returns:
        ``(device, conflict)``: the device per coarse node (-1 when no member has one) and the first
        fine node (in index order) whose device differs from its coarse node's, -1 when none does.
    """
    fine = np.asarray(fine_device, dtype=np.int64)
    device = np.full(num_groups, -1, dtype=np.int64)
    placed = np.flatnonzero(fine >= 0)
    groups = node_group[placed]
    present, first = np.unique(groups, return_index=True)
    device[present] = fine[placed[first]]
    differs = placed[fine[placed] != device[groups]]
    return device, int(differs[0]) if len(differs) else -1


@dataclasses.dataclass(frozen=True)
class TrainingView:
    """The forward/backward structure of a training graph, per fine node (:mod:`graphir.passes.training`).

    The arrays of :class:`graphir.passes.training.TrainingStructure` without its node objects (a
    placer never sees the Module).

    Attributes:
        role: int8 role per fine node (``FORWARD`` ... ``OTHER``).
        anchor: int64 fine forward node each fine node belongs to, -1 none.
        layer: int64 layer per fine node, -1 none.
        num_layers: number of layers.
    """

    role: np.ndarray
    anchor: np.ndarray
    layer: np.ndarray
    num_layers: int


def fine_memory(index: GraphIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per fine node, ``(persistent, activation)`` bytes as float64: ``mem`` where present, else the results' bytes.

    The one reading of the ``mem`` annotation for the placement problem's ``memory`` and
    ``persistent`` (the ``paper`` rule's per-node bytes, :func:`graphir.memory.whole_step_bytes`).
    """
    persistent = index.persistent_bytes().astype(np.float64)
    mems = index.annotation_list("mem")
    activation = np.fromiter((0 if mem is None else mem.activation for mem in mems), dtype=np.float64, count=len(mems))
    no_mem = np.fromiter((mem is None for mem in mems), dtype=bool, count=len(mems))
    if no_mem.any():
        activation[no_mem] = index.out_bytes()[no_mem]
    return persistent, activation


@dataclasses.dataclass
class PlacementProblem:
    """The coarse graph and the cluster, as arrays.

    Attributes:
        num_nodes: number of coarse nodes, numbered in a topological order.
        num_devices: number of devices.
        device_names: device names in cluster order.
        edge_src, edge_dst, edge_bytes: coarse edges (deduplicated; bytes of distinct values).
        succ_offsets, succ, succ_edge: CSR successors (``succ_edge`` indexes the edge arrays).
        pred_offsets, pred, pred_edge: CSR predecessors.
        times: ``(num_nodes, num_devices)`` compute seconds of each coarse node on each device.
        memory: bytes each coarse node needs on its device (persistent + activation).
        persistent: persistent bytes of each coarse node.
        capacity: memory bytes of each device.
        allowed: ``(num_nodes, num_devices)`` bool, the devices each node may run on.
        colocation: colocation class per coarse node (-1: none); one class, one device.
        links: the cluster's link model (every transfer time of the placers comes from it).
        members: fine node numbers (graph index numbering) of each coarse node, topological.
        node_group: coarse node of each fine node.
        fine: the fine graph's names and value-level edges.
        preferred: device per coarse node from the placer's device hints (-1: none; all -1
            without hints).
        priority: order key per coarse node from the placer's order hints (``None`` without).
        cluster: the cluster the problem was built from (``None`` for a hand-built problem);
            :meth:`link_model` builds its link model under another congestion rule from it.
        training: the training graph's structure per fine node when asked for
            (``from_module(..., training=True)``) and the graph is one; else ``None``.
    """

    num_nodes: int
    num_devices: int
    device_names: tuple[str, ...]
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    succ_offsets: np.ndarray
    succ: np.ndarray
    succ_edge: np.ndarray
    pred_offsets: np.ndarray
    pred: np.ndarray
    pred_edge: np.ndarray
    times: np.ndarray
    memory: np.ndarray
    persistent: np.ndarray
    capacity: np.ndarray
    allowed: np.ndarray
    colocation: np.ndarray
    links: LinkModel
    members: list[list[int]]
    node_group: np.ndarray
    fine: FineGraph
    preferred: np.ndarray
    cluster: Cluster | None = None
    training: TrainingView | None = None
    priority: np.ndarray | None = None

    @classmethod
    def from_module(
        cls,
        module: Module,
        hints: Mapping[str, str] | None = None,
        keys: Mapping[str, float] | None = None,
        *,
        training: bool = False,
    ) -> PlacementProblem:
        """Build the problem from the module's quotient graph and cluster.

        Args:
            module: the module to place (read only).
            hints: preferred device name per fine node name (``Placer.device_hints``); a coarse
                node prefers its first hinted member's device.
            keys: an order key per fine node name (``PlacementHints.order``); a coarse node takes
                its members' smallest (unkeyed members: 0).
            training: also find the training graph's structure (:attr:`training`; O(V+E)).

        Raises:
            PassError: a node has no cost for some device kind of the cluster, a coarse node's
                allowed devices are empty (affinities of its members do not intersect), or a hint
                names an unknown device.
        """
        graph = module.graph
        index = graph.index()
        quotient = index.quotient()
        cluster = module.cluster
        devices = cluster.devices
        num_devices = len(devices)
        n = quotient.num_groups
        # Renumber coarse nodes topologically so placers can sweep 0..n-1.
        order = quotient.order
        assert order is not None, "the verifier guarantees an acyclic quotient graph"
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n, dtype=np.int64)
        node_group = rank[quotient.node_group]
        graph_arrays = graph_fields(n, rank[quotient.edge_src], rank[quotient.edge_dst], quotient.edge_bytes)

        times = np.zeros((n, num_devices))
        for k, device in enumerate(devices):
            fine = index.times(device.kind)
            if np.isnan(fine).any():
                node = index.nodes[int(np.flatnonzero(np.isnan(fine))[0])]
                raise PassError(f"node '{node.name}' has no cost for device kind '{device.kind}': run 'profile' first")
            times[:, k] = np.bincount(node_group, weights=fine, minlength=n)
        persistent_fine, activation_fine = fine_memory(index)
        persistent = np.bincount(node_group, weights=persistent_fine, minlength=n)
        memory = persistent + np.bincount(node_group, weights=activation_fine, minlength=n)

        kinds = [d.kind for d in devices]
        allowed = np.ones((n, num_devices), dtype=bool)
        class_members: dict[str, list[int]] = {}
        for u, affinity in enumerate(index.annotation_list("affinity")):
            if affinity is not None:
                allowed[node_group[u]] &= np.asarray([kind in affinity for kind in kinds])
        fine_colocation = np.full(len(node_group), -1, dtype=np.int64)
        class_number: dict[str, int] = {}
        for u, name in enumerate(index.annotation_list("colocate")):
            if name is not None:
                class_members.setdefault(name, []).append(int(node_group[u]))
                fine_colocation[u] = class_number.setdefault(name, u)
        # Coarse nodes holding members of one class must share a device; a coarse node may hold
        # members of several classes, which then become one class (union-find over coarse nodes).
        sets: DisjointSets[int] = DisjointSets()
        for groups in class_members.values():
            for g in groups:
                sets.union(groups[0], g)
        colocation = np.full(n, -1, dtype=np.int64)
        for groups in class_members.values():
            for g in groups:
                colocation[g] = sets.find(g)
        # A colocation class may only use devices every member allows (one pass over the members).
        colocated = np.flatnonzero(colocation >= 0)
        if len(colocated):
            roots, slot = np.unique(colocation[colocated], return_inverse=True)
            joint = np.ones((len(roots), num_devices), dtype=bool)
            np.logical_and.at(joint, slot, allowed[colocated])
            allowed[colocated] = joint[slot]
        bad = np.flatnonzero(~allowed.any(axis=1))
        if len(bad):
            members = [index.nodes[u].name for u in np.flatnonzero(node_group == bad[0])[:3]]
            raise PassError(
                f"no device of cluster '{cluster.spec}' may run {', '.join(members)}: "
                "their affinities and colocation classes exclude every device"
            )

        names = cluster.device_names
        node_names = tuple(node.name for node in index.nodes)
        preferred = np.full(n, -1, dtype=np.int64)
        if hints:
            position = {name: k for k, name in enumerate(names)}
            fine_device = np.full(len(node_names), -1, dtype=np.int64)
            for u, name in enumerate(node_names):
                hint = hints.get(name)
                if hint is None:
                    continue
                if hint not in position:
                    raise PassError(f"node '{name}' is hinted to unknown device '{hint}'")
                fine_device[u] = position[hint]
            preferred = coarse_devices(node_group, n, fine_device)[0]
        priority = None
        if keys:
            fine_key = np.fromiter(
                (keys.get(name, 0.0) for name in node_names), dtype=np.float64, count=len(node_names)
            )
            priority = np.full(n, np.inf)
            np.minimum.at(priority, node_group, fine_key)
        member_order = np.argsort(node_group, kind="stable")
        bounds = np.searchsorted(node_group[member_order], np.arange(n + 1))
        ordered, cut = member_order.tolist(), bounds.tolist()
        members = [ordered[cut[g] : cut[g + 1]] for g in range(n)]
        return cls(
            num_nodes=n,
            num_devices=num_devices,
            device_names=names,
            **graph_arrays,
            times=times,
            memory=memory,
            persistent=persistent,
            capacity=np.asarray([d.memory for d in devices], dtype=np.float64),
            allowed=allowed,
            colocation=colocation,
            links=LinkModel.from_cluster(cluster),
            members=members,
            node_group=node_group,
            fine=FineGraph(
                node_names=node_names,
                edge_src=index.edge_src,
                edge_dst=index.edge_dst,
                edge_value=index.edge_value,
                edge_control=index.edge_control,
                value_producer=index.value_producer,
                value_bytes=index.value_bytes,
                value_output=output_mask(graph, index),
                temporary=temporary_bytes(index),
                colocation=fine_colocation,
            ),
            preferred=preferred,
            cluster=cluster,
            training=_training_view(module) if training else None,
            priority=priority,
        )

    def link_model(self, congestion: str) -> LinkModel:
        """The cluster's link model under ``congestion`` (:data:`graphir.links.CONGESTION_RULES`).

        :attr:`links` (the ``pair`` rule) when that is the rule asked for.

        Raises:
            PassError: another rule is asked of a problem built without its cluster.
        """
        if congestion == self.links.congestion:
            return self.links
        if self.cluster is None:
            raise PassError(f"congestion rule '{congestion}' needs the problem's cluster")
        return LinkModel.from_cluster(self.cluster, congestion)

    def mean_comm_times(self) -> np.ndarray:
        """Per coarse edge, the representative transfer time (mean over ordered device pairs), for priorities."""
        return self.links.mean_transfer_times(self.edge_bytes)


def _training_view(module: Module) -> TrainingView | None:
    """:class:`TrainingView` of ``module``'s training structure, ``None`` when it is not a training graph."""
    structure = training_structure(module)
    if structure is None:
        return None
    return TrainingView(structure.role, structure.anchor, structure.layer, structure.num_layers)


def expand_placement(problem: PlacementProblem, device: np.ndarray, start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fine placement of a coarse one: ``(device, order)`` per fine node (graph index numbering).

    Coarse nodes run on their device in increasing ``start`` (ties: topological number); the
    members of a coarse node run consecutively in topological order. The one expansion rule:
    :func:`write_placement` writes it, the placers' candidate simulator simulates it.
    """
    group = problem.node_group
    fine_device = np.asarray(device, dtype=np.int64)[group]
    fine_start = np.asarray(start, dtype=np.float64)[group]
    sequence = np.lexsort((np.arange(len(group)), group, fine_start, fine_device))
    first = np.searchsorted(fine_device[sequence], np.arange(problem.num_devices))
    position = np.empty(len(group), dtype=np.int64)
    position[sequence] = np.arange(len(group)) - first[fine_device[sequence]]
    return fine_device, position


def write_placement(module: Module, problem: PlacementProblem, device: np.ndarray, start: np.ndarray) -> None:
    """Annotate every fine node with its coarse node's device and a per-device ``order`` (:func:`expand_placement`)."""
    index = module.graph.index()
    names = problem.device_names
    fine_device, position = expand_placement(problem, device, start)
    graph = module.graph
    graph.annotate("device", index.nodes, [names[d] for d in fine_device.tolist()])
    graph.annotate("order", index.nodes, position.tolist())


def upward_rank(problem: PlacementProblem, comm: np.ndarray | None = None) -> np.ndarray:
    """HEFT's rank_u: mean compute time plus the longest mean-communication path to an exit.

    ``rank_u(v) = w̄(v) + max over successors s of (c̄(v, s) + rank_u(s))`` (Topcuoglu et al.;
    FastT §5.1 uses the same priority).
    """
    mean_time = problem.times.mean(axis=1)
    comm = problem.mean_comm_times() if comm is None else comm
    rank = mean_time.copy()
    offsets = problem.succ_offsets.tolist()
    succ = problem.succ.tolist()
    succ_edge = problem.succ_edge.tolist()
    comm_list = comm.tolist()
    rank_list = rank.tolist()
    mean_list = mean_time.tolist()
    for v in range(problem.num_nodes - 1, -1, -1):
        best = 0.0
        for k in range(offsets[v], offsets[v + 1]):
            candidate = comm_list[succ_edge[k]] + rank_list[succ[k]]
            if candidate > best:
                best = candidate
        rank_list[v] = mean_list[v] + best
    return np.asarray(rank_list)


def keyed_topological_order(problem: PlacementProblem, key: np.ndarray) -> list[int]:
    """Kahn's algorithm over the coarse graph taking, among ready nodes, the smallest ``key``.

    Ties go to the lowest node number. The result is always a topological order, whatever the key.
    """
    n = problem.num_nodes
    indegree = np.bincount(problem.edge_dst, minlength=n).tolist() if len(problem.edge_dst) else [0] * n
    keys = np.asarray(key, dtype=np.float64).tolist()
    heap = [(keys[v], v) for v in range(n) if indegree[v] == 0]
    heapq.heapify(heap)
    offsets = problem.succ_offsets.tolist()
    succ = problem.succ.tolist()
    order: list[int] = []
    while heap:
        _, v = heapq.heappop(heap)
        order.append(v)
        for k in range(offsets[v], offsets[v + 1]):
            s = succ[k]
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(heap, (keys[s], s))
    assert len(order) == n, "the coarse graph is acyclic"
    return order


def list_schedule(problem: PlacementProblem, device: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and finish times for a fixed device assignment (non-insertion list scheduling).

    Ready nodes are taken in decreasing ``rank_u`` (ties: topological number); each starts when its
    device is free and its inputs have arrived (congestion-free estimate; the simulator is the
    judge).
    """
    n = problem.num_nodes
    rank = upward_rank(problem)
    indegree = np.bincount(problem.edge_dst, minlength=n).tolist() if len(problem.edge_dst) else [0] * n
    # Python lists, not numpy element access, in the loop (the same float64 arithmetic).
    start = [0.0] * n
    finish = [0.0] * n
    device_free = [0.0] * problem.num_devices
    ranks = rank.tolist()
    ready_heap = [(-ranks[v], v) for v in range(n) if indegree[v] == 0]
    heapq.heapify(ready_heap)
    pred_offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    pred_edge = problem.pred_edge.tolist()
    succ_offsets = problem.succ_offsets.tolist()
    succ = problem.succ.tolist()
    edge_bytes = problem.edge_bytes.tolist()
    transfer_time = problem.links.transfer_time
    dev = device.tolist()
    own_time = problem.times[np.arange(n), device].tolist() if n else []  # each node's time on its device
    while ready_heap:
        _, v = heapq.heappop(ready_heap)
        d = dev[v]
        arrive = 0.0
        for k in range(pred_offsets[v], pred_offsets[v + 1]):
            u = pred[k]
            source = dev[u]
            t = finish[u] if source == d else finish[u] + transfer_time(edge_bytes[pred_edge[k]], source, d)
            if t > arrive:
                arrive = t
        free = device_free[d]
        begin = arrive if arrive >= free else free
        start[v] = begin
        finish[v] = device_free[d] = begin + own_time[v]
        for k in range(succ_offsets[v], succ_offsets[v + 1]):
            s = succ[k]
            indegree[s] -= 1
            if indegree[s] == 0:
                heapq.heappush(ready_heap, (-ranks[s], s))
    return np.asarray(start, dtype=np.float64), np.asarray(finish, dtype=np.float64)
