"""Celeritas Optimal Operation Fusion (§5.1, Algorithm 1): CPD-TOPO order + optimal breakpoints.

The nodes are laid out in CPD-TOPO order ``v_1 .. v_n`` and cut into contiguous clusters. By
Lemma 2 a cluster of consecutive nodes of a topological order never creates a loop: every edge
goes from a cluster to the same or a later one, so the coarse graph stays a DAG.

Breakpoints come from the dynamic programme of eq. (4)-(6). With 0-based positions and a
breakpoint ``i`` meaning "a cluster starts at position ``i``", a cluster is ``[i, j)`` and

- eq. (4): ``cost(i, j) = sum_{i <= k < j <= m} c_{k,m}``, the communication leaving the cluster
  (every edge goes forwards in a topological order, so these are all its outgoing cut edges);
- eq. (5), computed incrementally: ``cost(i, j) = cost(i, j-1) + sum_{m >= j} c_{j-1,m}
  - sum_{i <= s < j-1} c_{s,j-1}`` (adding ``v_{j-1}`` adds its out-edges and makes its in-edges
  from the cluster internal);
- eq. (6): ``S(j) = min_i S(i) + cost(i, j)`` over ``j - R <= i <= j - 1`` with
  ``sum_{i <= k < j} Memory[v_k] <= M``, ``S(0) = 0``, ``P(j)`` the minimising ``i``; the
  clusters are read back from ``P(n), P(P(n)), ...``.

Choices where the paper is silent: a node whose own memory exceeds ``M`` forms a cluster alone
(the constraint is waived for singletons, so the programme always has a solution); among equal
``S`` (within a relative 1e-9: eq. (5)'s running sums round differently from exact ties) the
smallest ``i`` (the longest last cluster, hence fewer clusters) wins. The cost of each
step is O(R) numpy work, O(n·R + E) in all: the paper's O(V+E) holds for a fixed window.
"""

from __future__ import annotations

import numpy as np

from graphir.passes.fuse.common import CoarseGraph
from graphir.passes.orders import cpd_topo, positions

_BLOCK = 2048
_TIE = 1e-9
"""Relative tolerance under which two values of S are taken as equal."""


def optimal_breakpoints(
    num_nodes: int,
    edge_from: np.ndarray,
    edge_to: np.ndarray,
    edge_comm: np.ndarray,
    node_mem: np.ndarray,
    window: int,
    mem_cap: float,
) -> tuple[np.ndarray, float]:
    """Optimal_BP of Algorithm 1 on nodes already numbered by their position in the order.

    Args:
        num_nodes: number of positions ``n``.
        edge_from: source position of each edge.
        edge_to: destination position of each edge (``edge_from < edge_to``).
        edge_comm: communication time ``c`` per edge.
        node_mem: memory per position.
        window: the exploration range ``R`` (maximum nodes per cluster), at least 1.
        mem_cap: the memory limit ``M`` per cluster.

    Returns:
        ``(starts, total)``: the breakpoints (start position of every cluster, increasing, the
        first is 0) and ``S(n)``, the communication cut by the clusters.
    """
    n = num_nodes
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    window = max(1, int(window))
    edge_from = np.asarray(edge_from, dtype=np.int64)
    edge_to = np.asarray(edge_to, dtype=np.int64)
    edge_comm = np.asarray(edge_comm, dtype=np.float64)
    out = np.bincount(edge_from, weights=edge_comm, minlength=n) if len(edge_from) else np.zeros(n)
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(node_mem, dtype=np.float64))])
    # Smallest i with sum(Memory[i:j]) <= M, for every j (prefix is non-decreasing).
    lo_mem = np.searchsorted(prefix, prefix - mem_cap, side="left")
    j_all = np.arange(n + 1)
    lo_all = np.minimum(np.maximum(np.maximum(lo_mem, j_all - window), 0), np.maximum(j_all - 1, 0))

    short = (edge_to - edge_from) < window  # only these can be internal to a cluster of <= R nodes
    s_to, s_dist, s_comm = edge_to[short], (edge_to - edge_from)[short], edge_comm[short]
    by_to = np.argsort(s_to, kind="stable")
    s_to, s_dist, s_comm = s_to[by_to], s_dist[by_to], s_comm[by_to]

    r = window
    # cost[i + r] = cost(i, j) for the current j (padded so that i may reach down to -r).
    cost = np.zeros(n + r + 1)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    parent = np.zeros(n + 1, dtype=np.int64)
    # The loop below runs once per node: its numpy calls are bound once and scalars kept as
    # Python numbers (the same doubles), so each step pays for as few calls as possible.
    minimum = np.minimum.reduce
    out_list = out.tolist()
    lo_list = lo_all.tolist()
    for b0 in range(0, n, _BLOCK):
        b1 = min(n, b0 + _BLOCK)
        rows = b1 - b0
        # inward[m - b0, k] = sum_{s in [i, m)} c_{s,m} for i = m - R + 1 + k (k = 0..R-2): the
        # edges into v_m from the cluster that eq. (5) turns internal when v_m joins it.
        change = np.empty((0, 0))  # (set below when r > 1, the only case that reads it)
        if r > 1:
            lo_e, hi_e = np.searchsorted(s_to, [b0, b1])
            flat = (s_to[lo_e:hi_e] - b0) * r + s_dist[lo_e:hi_e]
            per_distance = np.bincount(flat, weights=s_comm[lo_e:hi_e], minlength=rows * r).reshape(rows, r)
            inward = np.cumsum(per_distance[:, 1:], axis=1)[:, ::-1]
            # eq. (5)'s change of cost(i, j) for every i in [m - R + 1, m - 1] when v_m joins.
            change = out[b0:b1, None] - inward
        for m in range(b0, b1):
            j = m + 1
            if r > 1:
                cost[m + 1 : m + r] += change[m - b0]
            cost[m + r] = out_list[m]  # cost(m, m + 1): the cluster {v_m} alone
            lo = lo_list[j]
            # eq. (6): S(j) = min_i S(i) + cost(i, j), the smallest i among ties. The incremental
            # sums of eq. (5) differ from exact ties by rounding, hence the relative tolerance.
            candidates = best[lo:j] + cost[lo + r : j + r]
            lowest = float(minimum(candidates))
            k = int((candidates <= lowest + _TIE * abs(lowest)).argmax())
            best[j] = candidates[k]
            parent[j] = lo + k
    starts: list[int] = []
    j = n
    while j > 0:
        j = int(parent[j])
        starts.append(j)
    return np.asarray(starts[::-1], dtype=np.int64), float(best[n])


def fuse_cpd_topo(graph: CoarseGraph, window: int, mem_cap: float) -> tuple[np.ndarray, dict[str, int | float | str]]:
    """Algorithm 1: CPD-TOPO order, Optimal_BP, clusters between breakpoints.

    Returns:
        A cluster label per coarse node and statistics (clusters, communication cut).
    """
    order = cpd_topo(graph.num_nodes, graph.succ_offsets, graph.succ, graph.node_time, graph.succ_comm)
    pos = positions(order)
    starts, cut = optimal_breakpoints(
        graph.num_nodes,
        pos[graph.edge_src],
        pos[graph.edge_dst],
        graph.edge_comm,
        graph.node_mem[order],
        window,
        mem_cap,
    )
    is_start = np.zeros(graph.num_nodes, dtype=np.int64)
    is_start[starts] = 1
    label_by_position = np.cumsum(is_start) - 1
    return label_by_position[pos], {"clusters": len(starts), "cut-comm-s": cut}
