"""Shared machinery of the fusion (coarsening) passes: the coarse graph as arrays, and group writing.

Every fusion algorithm runs on the *current* quotient graph: the nodes are the existing groups
(ungrouped nodes are singletons), so fusions compose (``fuse{algo=colocation},fuse{algo=rules}``
produces groups of groups). An algorithm receives a :class:`CoarseGraph` and returns a label per
coarse node; :func:`compose` maps the labels back to fine nodes and renumbers them densely by the
first topological position of a member, so group ids are deterministic and equal the quotient's
coarse-node numbers.

Edge semantics follow :class:`graphir.index.Quotient`: a value crossing from one coarse node into
another is counted once per destination, the bytes of the values between two coarse nodes add up,
and a pair joined only by control edges carries no data. Its communication time is the cluster's
representative transfer time (:meth:`graphir.links.LinkModel.mean_transfer_times`), 0 for
control-only pairs.

Memory per node (the ``mem-cap`` of ``cpd-topo``) is ``persistent + activation`` from the ``mem``
annotation when present (temporary bytes are transient and excluded), else the bytes of the node's
results.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from graphir.index import GraphIndex
from graphir.links import LinkModel
from graphir.memory import whole_step_bytes
from graphir.topo import csr, stable_topological_order


@dataclasses.dataclass
class FineGraph:
    """The fine graph as arrays (from a :class:`~graphir.index.GraphIndex`).

    Attributes:
        num_nodes: node count (index numbering, topological).
        edge_src, edge_dst, edge_value: fine edges; ``edge_value`` is -1 for control edges.
        value_bytes: bytes per value.
        node_time: compute seconds per node (0 where unknown).
        node_mem: bytes per node (see the module docstring).
        comm: the communication model.
    """

    num_nodes: int
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_value: np.ndarray
    value_bytes: np.ndarray
    node_time: np.ndarray
    node_mem: np.ndarray
    comm: LinkModel

    @classmethod
    def from_index(cls, index: GraphIndex, comm: LinkModel, kind: str | None = None) -> FineGraph:
        """Arrays of ``index`` with times of device kind ``kind`` (default times when ``None``)."""
        node_mem = whole_step_bytes(index).astype(np.float64)
        return cls(
            num_nodes=index.num_nodes,
            edge_src=index.edge_src,
            edge_dst=index.edge_dst,
            edge_value=index.edge_value,
            value_bytes=index.value_bytes,
            node_time=np.nan_to_num(index.times(kind), nan=0.0),
            node_mem=node_mem,
            comm=comm,
        )


@dataclasses.dataclass
class CoarseGraph:
    """A DAG of coarse nodes as arrays, with CSR adjacency and per-edge communication time.

    Attributes:
        num_nodes: coarse node count.
        node_time, node_mem: summed compute seconds and bytes of the members.
        edge_src, edge_dst: deduplicated edges, sorted by (src, dst).
        edge_bytes: bytes per edge; edge_data: False for control-only edges.
        edge_comm: communication seconds per edge.
        succ_offsets, succ, succ_edge: CSR successors (``succ_edge`` maps entries to edges).
        pred_offsets, pred, pred_edge: CSR predecessors.
    """

    num_nodes: int
    node_time: np.ndarray
    node_mem: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_bytes: np.ndarray
    edge_data: np.ndarray
    edge_comm: np.ndarray
    comm: LinkModel
    succ_offsets: np.ndarray = dataclasses.field(init=False)
    succ: np.ndarray = dataclasses.field(init=False)
    succ_edge: np.ndarray = dataclasses.field(init=False)
    pred_offsets: np.ndarray = dataclasses.field(init=False)
    pred: np.ndarray = dataclasses.field(init=False)
    pred_edge: np.ndarray = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.succ_offsets, self.succ, self.succ_edge = csr(self.num_nodes, self.edge_src, self.edge_dst)
        self.pred_offsets, self.pred, self.pred_edge = csr(self.num_nodes, self.edge_dst, self.edge_src)

    @property
    def succ_comm(self) -> np.ndarray:
        """Communication seconds per CSR successor entry."""
        return self.edge_comm[self.succ_edge]

    def ccr(self) -> float:
        """Celeritas eq. (1) on this graph."""
        return ccr(self.edge_comm, self.node_time)

    def is_acyclic(self) -> bool:
        """Whether the coarse graph is a DAG."""
        return stable_topological_order(self.num_nodes, self.edge_src, self.edge_dst) is not None

    def contract(self, labels: np.ndarray) -> CoarseGraph:
        """Merge nodes with equal ``labels`` (dense, ``0..k-1``): bytes of parallel edges add up.

        Used between the rounds of an algorithm; the final statistics are recomputed exactly from
        the fine graph by :func:`coarsen`.
        """
        num = int(labels.max()) + 1 if len(labels) else 0
        gs, gd = labels[self.edge_src], labels[self.edge_dst]
        cross = gs != gd
        return _pairs(
            num,
            gs[cross],
            gd[cross],
            self.edge_bytes[cross],
            self.edge_data[cross],
            np.bincount(labels, weights=self.node_time, minlength=num),
            np.bincount(labels, weights=self.node_mem, minlength=num),
            self.comm,
        )


def _pairs(
    num: int,
    src: np.ndarray,
    dst: np.ndarray,
    nbytes: np.ndarray,
    data: np.ndarray,
    node_time: np.ndarray,
    node_mem: np.ndarray,
    comm: LinkModel,
) -> CoarseGraph:
    key = src.astype(np.int64) * max(num, 1) + dst
    pairs, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(-1)
    edge_bytes = np.bincount(inverse, weights=nbytes, minlength=len(pairs)).astype(np.int64)
    edge_data = np.bincount(inverse, weights=data.astype(np.float64), minlength=len(pairs)) > 0
    return CoarseGraph(
        num_nodes=num,
        node_time=np.asarray(node_time, dtype=np.float64),
        node_mem=np.asarray(node_mem, dtype=np.float64),
        edge_src=pairs // max(num, 1),
        edge_dst=pairs % max(num, 1),
        edge_bytes=edge_bytes,
        edge_data=edge_data,
        edge_comm=np.where(edge_data, comm.mean_transfer_times(edge_bytes), 0.0),
        comm=comm,
    )


def coarsen(fine: FineGraph, labels: np.ndarray) -> CoarseGraph:
    """The quotient of ``fine`` under dense ``labels`` (one value counted once per destination)."""
    num = int(labels.max()) + 1 if len(labels) else 0
    gs, gd = labels[fine.edge_src], labels[fine.edge_dst]
    cross = gs != gd
    gs, gd, val = gs[cross], gd[cross], fine.edge_value[cross]
    if len(gs):
        order = np.lexsort((val, gd, gs))
        gs, gd, val = gs[order], gd[order], val[order]
        first = np.ones(len(gs), dtype=bool)
        first[1:] = (gs[1:] != gs[:-1]) | (gd[1:] != gd[:-1]) | (val[1:] != val[:-1])
        gs, gd, val = gs[first], gd[first], val[first]
    data = val >= 0
    nbytes = np.where(data, fine.value_bytes[np.maximum(val, 0)], 0) if len(fine.value_bytes) else np.zeros(len(val))
    return _pairs(
        num,
        gs,
        gd,
        nbytes,
        data,
        np.bincount(labels, weights=fine.node_time, minlength=num),
        np.bincount(labels, weights=fine.node_mem, minlength=num),
        fine.comm,
    )


def dense_by_first(labels: np.ndarray) -> np.ndarray:
    """Renumber ``labels`` to ``0..k-1`` in order of first occurrence (fine nodes are topological)."""
    if not len(labels):
        return labels.astype(np.int64)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first), dtype=np.int64)
    return rank[inverse.reshape(-1)]


def compose(start: np.ndarray, coarse_labels: np.ndarray) -> np.ndarray:
    """Fine labels from the fine->coarse map ``start`` and a label per coarse node, renumbered densely."""
    return dense_by_first(np.asarray(coarse_labels, dtype=np.int64)[start])


def write_groups(index: GraphIndex, labels: np.ndarray) -> int:
    """Set ``group = labels[i]`` on every node ``i``; returns the number of nodes whose group changed."""
    return index.graph.annotate("group", index.nodes, labels.tolist())


def heights(num_nodes: int, succ_offsets: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """Pesto Definition 3.4: vertices on the longest path from a root to each node (roots: 1). O(V+E)."""
    indegree = np.bincount(succ, minlength=num_nodes).tolist() if len(succ) else [0] * num_nodes
    offsets = succ_offsets.tolist()
    targets = succ.tolist()
    height = [1] * num_nodes
    queue = [u for u in range(num_nodes) if indegree[u] == 0]
    head = 0
    while head < len(queue):
        u = queue[head]
        head += 1
        next_height = height[u] + 1
        for k in range(offsets[u], offsets[u + 1]):
            v = targets[k]
            if next_height > height[v]:
                height[v] = next_height
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    if len(queue) != num_nodes:
        raise ValueError("heights: the graph has a cycle")
    return np.asarray(height, dtype=np.int64)


def ccr(edge_comm: np.ndarray, node_times: np.ndarray) -> float:
    """Celeritas eq. (1): ``CCR = sum_{(i,j) in E} c_ij / sum_{i in V} w_i``.

    Returns 0.0 when there is no communication, and ``inf`` when there is communication but no
    computation (every node without cost).
    """
    total_comm = float(np.sum(edge_comm))
    total_work = float(np.nansum(node_times))
    if total_comm == 0.0:
        return 0.0
    if total_work == 0.0:
        return math.inf
    return total_comm / total_work
