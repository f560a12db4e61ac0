"""Topological orders for coarsening and placement: M-TOPO, DFS-TOPO and CPD-TOPO.

All functions take a DAG as plain arrays so that placers can call them on the fine graph or on a
quotient graph alike: ``num_nodes``, CSR successors (``succ_offsets``, ``succ``: the successors of
``u`` are ``succ[succ_offsets[u]:succ_offsets[u + 1]]``; repeats are allowed), and where needed the
compute time of each node (``node_time``) and the communication time of each CSR entry
(``succ_comm``). The numbering need not be topological. Every order is returned as an int64 array
of node numbers; each runs in O(V+E) Python steps (CPD-TOPO adds one numpy sort of the edges).

Tie-breaking (the papers leave it open) always falls back on the node number, so an order is a
pure function of its inputs:

- **M-TOPO** (Baechi, as Celeritas §4.2.2 describes it): a FIFO queue of 0-indegree nodes, seeded
  with the sources in increasing number; a node that becomes ready is appended to the tail, in
  the CSR order of its producer's successors (increasing number).
- **DFS-TOPO** (Celeritas §4.2.2): the same queue, but a child that becomes ready is added to the
  *head*. The queue is then a stack. Among children that become ready together, the smallest
  number ends at the head (visited first, as a depth-first search would).
- **CPD-TOPO** (Celeritas §5.1.3, Algorithm 1 lines 8-23): sources sorted by decreasing ``cpath``
  (ties: smaller number first); the children of the dequeued node sorted by increasing
  ``cpath`` and each ready one added to the head in turn, so the child with the largest
  ``cpath`` (on the critical path) is dequeued next (ties: smaller number nearer the head).
  ``cpath = tlevel + blevel`` with tlevel/blevel from eq. (2)-(3).
"""

from __future__ import annotations

from collections import deque

import numpy as np


def _indegrees(num_nodes: int, succ: np.ndarray) -> list[int]:
    return np.bincount(succ, minlength=num_nodes).tolist() if len(succ) else [0] * num_nodes


def _check_complete(order: list[int], num_nodes: int) -> np.ndarray:
    if len(order) != num_nodes:
        raise ValueError(f"the graph has a cycle: only {len(order)} of {num_nodes} nodes could be ordered")
    return np.asarray(order, dtype=np.int64)


def m_topo(num_nodes: int, succ_offsets: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """Baechi's M-TOPO order: Kahn's algorithm with a FIFO queue (breadth-first-like).

    Raises:
        ValueError: the graph has a cycle.
    """
    indegree = _indegrees(num_nodes, succ)
    offsets = succ_offsets.tolist()
    targets = succ.tolist()
    queue = deque(u for u in range(num_nodes) if indegree[u] == 0)
    order: list[int] = []
    while queue:
        u = queue.popleft()
        order.append(u)
        for k in range(offsets[u], offsets[u + 1]):
            v = targets[k]
            indegree[v] -= 1
            if indegree[v] == 0:
                queue.append(v)
    return _check_complete(order, num_nodes)


def _stack_topo(num_nodes: int, offsets: list[int], targets: list[int], sources_head_first: list[int]) -> np.ndarray:
    """Kahn's algorithm where ready children go to the head of the queue (a stack).

    ``targets`` lists each node's children in the order they are pushed (the last pushed is the
    new head); ``sources_head_first`` is the initial queue, head first.
    """
    indegree = [0] * num_nodes
    for v in targets:
        indegree[v] += 1
    stack = sources_head_first[::-1]  # the head of the queue is the end of the list
    order: list[int] = []
    push = stack.append
    pop = stack.pop
    emit = order.append
    while stack:
        u = pop()
        emit(u)
        for k in range(offsets[u], offsets[u + 1]):
            v = targets[k]
            indegree[v] -= 1
            if indegree[v] == 0:
                push(v)
    return _check_complete(order, num_nodes)


def dfs_topo(num_nodes: int, succ_offsets: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """Celeritas's DFS-TOPO order: ready children are added to the head of the queue.

    Raises:
        ValueError: the graph has a cycle.
    """
    offsets = succ_offsets.tolist()
    # Push children in decreasing number so that the smallest ends at the head.
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(succ_offsets))
    pushed = succ[np.lexsort((-succ, src))] if len(succ) else succ
    indegree = _indegrees(num_nodes, succ)
    sources = [u for u in range(num_nodes) if indegree[u] == 0]
    return _stack_topo(num_nodes, offsets, pushed.tolist(), sources)


def tlevel_blevel(
    num_nodes: int,
    succ_offsets: np.ndarray,
    succ: np.ndarray,
    node_time: np.ndarray,
    succ_comm: np.ndarray,
    topo: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top and bottom levels of every node, Celeritas eq. (2) and (3).

    ``tlevel(v) = max_{p in pred(v)} tlevel(p) + w_p + c_pv`` (0 for a source), the longest path
    from a source to ``v`` excluding ``w_v``; ``blevel(v) = w_v + max_{s in succ(v)} blevel(s) + c_vs``
    (``w_v`` for a sink), the longest path from ``v`` to a sink including ``w_v``.

    Args:
        num_nodes: number of nodes.
        succ_offsets: CSR row offsets of the successors.
        succ: CSR successor entries.
        node_time: compute time ``w`` per node (NaN counts as 0).
        succ_comm: communication time ``c`` per CSR entry.
        topo: a topological order, if the caller has one (else M-TOPO is computed).

    Returns:
        ``(tlevel, blevel)`` as float64 arrays.
    """
    order = (topo if topo is not None else m_topo(num_nodes, succ_offsets, succ)).tolist()
    offsets = succ_offsets.tolist()
    targets = succ.tolist()
    comm = np.asarray(succ_comm, dtype=np.float64).tolist()
    w = np.nan_to_num(np.asarray(node_time, dtype=np.float64), nan=0.0).tolist()
    tlevel = [0.0] * num_nodes
    for u in order:  # eq. (2), forwards: push tlevel(u) + w_u + c_uv to each successor
        base = tlevel[u] + w[u]
        for k in range(offsets[u], offsets[u + 1]):
            v = targets[k]
            candidate = base + comm[k]
            if candidate > tlevel[v]:
                tlevel[v] = candidate
    blevel = [0.0] * num_nodes
    for u in reversed(order):  # eq. (3), backwards
        best = 0.0
        for k in range(offsets[u], offsets[u + 1]):
            candidate = blevel[targets[k]] + comm[k]
            if candidate > best:
                best = candidate
        blevel[u] = best + w[u]
    return np.asarray(tlevel), np.asarray(blevel)


def cpd_topo(
    num_nodes: int,
    succ_offsets: np.ndarray,
    succ: np.ndarray,
    node_time: np.ndarray,
    succ_comm: np.ndarray,
) -> np.ndarray:
    """Celeritas's CPD-TOPO order (critical-path DFS-TOPO, Algorithm 1 lines 8-23).

    Args:
        num_nodes: number of nodes.
        succ_offsets: CSR row offsets of the successors.
        succ: CSR successor entries.
        node_time: compute time per node (NaN counts as 0).
        succ_comm: communication time per CSR entry.

    Raises:
        ValueError: the graph has a cycle.
    """
    topo = m_topo(num_nodes, succ_offsets, succ)
    tlevel, blevel = tlevel_blevel(num_nodes, succ_offsets, succ, node_time, succ_comm, topo)
    cpath = tlevel + blevel
    # Line 18: children by increasing cpath, each ready one added to the head in turn; equal
    # cpath: larger number pushed first so that the smaller one ends nearer the head.
    src = np.repeat(np.arange(num_nodes, dtype=np.int64), np.diff(succ_offsets))
    pushed = succ[np.lexsort((-succ, cpath[succ], src))] if len(succ) else succ
    # Lines 10-11: sources by decreasing cpath (ties: smaller number first).
    nodes = np.arange(num_nodes, dtype=np.int64)
    is_source = np.bincount(succ, minlength=num_nodes) == 0 if len(succ) else np.ones(num_nodes, dtype=bool)
    sources = nodes[is_source]
    sources = sources[np.lexsort((sources, -cpath[sources]))]
    return _stack_topo(num_nodes, succ_offsets.tolist(), pushed.tolist(), sources.tolist())


def positions(order: np.ndarray) -> np.ndarray:
    """The inverse permutation: ``positions(order)[u]`` is the index of ``u`` in ``order``."""
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order), dtype=np.int64)
    return pos
