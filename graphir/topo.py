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
    """One cycle among the edges, as a list of node numbers (empty when acyclic), in O(V+E).

    Nodes that no cycle can contain are peeled off from both sides: first those a Kahn sort reaches
    from the sources, then, on the reversed edges, those that only lead to sinks (a node *downstream*
    of a cycle, which a search started from it would never find the cycle from). Every node left
    has a successor that is left too, so walking successors from any of them must revisit a node:
    the walk's loop is a cycle. It is returned rotated to start at its smallest node number, so the
    report does not depend on where the walk began.
    """
    if len(src) == 0:
        return []
    alive = _peel(num_nodes, src, dst) & _peel(num_nodes, dst, src)
    keep = alive[src] & alive[dst]
    if not keep.any():
        return []
    offsets, targets, _ = csr(num_nodes, src[keep], dst[keep])
    start = int(np.flatnonzero(alive)[0])
    position: dict[int, int] = {}
    walk: list[int] = []
    node = start
    while node not in position:
        position[node] = len(walk)
        walk.append(node)
        node = int(targets[offsets[node]])  # every live node has a live successor
    cycle = walk[position[node] :]
    first = cycle.index(min(cycle))
    return cycle[first:] + cycle[:first]


def has_cycle(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> bool:
    """Whether the edges ``src -> dst`` contain a cycle (a Kahn peel leaves a node), in O(V+E) Python steps."""
    return len(src) > 0 and bool(_peel(num_nodes, src, dst).any())


def _peel(num_nodes: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """True for the nodes a Kahn sort of ``src -> dst`` cannot remove (on or after a cycle)."""
    indegree = np.bincount(dst, minlength=num_nodes)
    offsets, targets, _ = csr(num_nodes, src, dst)
    offsets_list = offsets.tolist()
    targets_list = targets.tolist()
    indegree_list = indegree.tolist()
    stack = np.flatnonzero(indegree == 0).tolist()
    alive = np.ones(num_nodes, dtype=bool)
    while stack:
        u = stack.pop()
        alive[u] = False
        for k in range(offsets_list[u], offsets_list[u + 1]):
            v = targets_list[k]
            indegree_list[v] -= 1
            if indegree_list[v] == 0:
                stack.append(v)
    return alive
