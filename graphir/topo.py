"""Array-based topological sorting used by the graph index, the verifier and the quotient graph."""

from __future__ import annotations

import heapq

import numpy as np


def csr(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compressed rows of the edges ``src[i] -> dst[i]``.

    Returns:
        ``(offsets, targets, edge_ids)``: the targets of node ``u`` are
        ``targets[offsets[u]:offsets[u + 1]]`` in increasing target order, and ``edge_ids`` maps
        each row entry back to its position in ``src``/``dst``.
    """
    order = np.lexsort((dst, src)).astype(np.int64)
    counts = np.bincount(src, minlength=num_nodes) if len(src) else np.zeros(num_nodes, np.int64)
    offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, dst[order].astype(np.int64), order


def stable_topological_order(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """The lexicographically smallest topological order of nodes ``0..num_nodes-1``.

    When the numbering is already topological (every edge goes forward) it is returned as is,
    in O(V+E); otherwise a heap-based Kahn sort keeps the original numbering wherever the edges
    allow it, so re-numbering an already sorted graph never changes it.

    Returns:
        The order as an array of node numbers, or ``None`` when the edges contain a cycle.
    """
    if len(src) == 0 or bool(np.all(src < dst)):
        return np.arange(num_nodes, dtype=np.int64)
    offsets, targets, _ = csr(num_nodes, src, dst)
    indegree = np.bincount(dst, minlength=num_nodes).tolist()
    offsets_list = offsets.tolist()
    targets_list = targets.tolist()
    heap = [u for u in range(num_nodes) if indegree[u] == 0]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        u = heapq.heappop(heap)
        order.append(u)
        for k in range(offsets_list[u], offsets_list[u + 1]):
            v = targets_list[k]
            indegree[v] -= 1
            if indegree[v] == 0:
                heapq.heappush(heap, v)
    if len(order) != num_nodes:
        return None
    return np.asarray(order, dtype=np.int64)


def find_cycle(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> list[int]:
    """One cycle among the edges, as a list of node numbers (empty when acyclic).

    Only called on error paths; uses networkx on the nodes that a Kahn sort could not remove.
    """
    import networkx as nx

    indegree = np.bincount(dst, minlength=num_nodes)
    offsets, targets, _ = csr(num_nodes, src, dst)
    stack = [int(u) for u in np.flatnonzero(indegree == 0)]
    removed = np.zeros(num_nodes, dtype=bool)
    while stack:
        u = stack.pop()
        removed[u] = True
        for v in targets[offsets[u] : offsets[u + 1]].tolist():
            indegree[v] -= 1
            if indegree[v] == 0:
                stack.append(v)
    keep = ~removed[src] & ~removed[dst]
    graph = nx.DiGraph()
    graph.add_edges_from(zip(src[keep].tolist(), dst[keep].tolist(), strict=True))
    if graph.number_of_nodes() == 0:
        return []
    cycle = nx.find_cycle(graph, source=min(graph.nodes))
    return [int(u) for u, _ in cycle]
