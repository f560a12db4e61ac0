"""Pesto's acyclic batch merging (§3.3: Definition 3.4, Theorem 3.5, Corollary 3.6).

Each round computes heights ``H`` (Definition 3.4: vertices on the longest root-to-node path,
roots have height 1), keeps the edges ``(u, v)`` that satisfy condition (ii) of Theorem 3.5::

    |succ(u)| = 1  or  |prec(v)| = 1  or  H(v) = H(u) + 1
    or  H(w) > H(u) + d = H(v) for every other successor w of u     (d = H(v) - H(u))

(the last one holds exactly when ``v`` is the unique lowest successor of ``u``), sorts them by
decreasing communication time (the paper's priority; ties by ``(u, v)``), and greedily builds a
matching (condition (i)) that respects condition (iii) between every two chosen pairs ``i != j``.

Condition (iii) is printed as ``H(u_i) != H(v_j) + d_j or (u_i, v_j) not in E``. Read literally it
is vacuous (an edge ``u_i -> v_j`` implies ``H(v_j) > H(u_i)``), and Fig. 6 — the complete
bipartite ``A, B -> C, D`` where merging ``(A, C)`` and ``(B, D)`` together makes a loop — would
pass it. We read the sign as a typo: ``H(u_i) != H(v_j) - d_j = H(u_j) or (u_i, v_j) not in E``,
i.e. two chosen pairs at the same height must not be joined by an edge ``u_i -> v_j``. This
reading is sound: along any path through merged pairs, the height at which a cluster is entered
never decreases (a pair can be entered at ``v`` and left from ``u`` only if ``u`` has another
successor ``w``; conditions |succ(u)|=1, |prec(v)|=1 and "unique lowest successor" forbid it or
force ``H(w) > H(v)``, and for ``H(v) = H(u) + 1`` the entry height stays equal only through an
edge ``u_i -> v_j`` with ``H(u_j) = H(u_i)``), so a cycle could only run through such edges.

Rounds repeat until the graph has at most ``target`` nodes (a round stops as soon as it is
reached, merging the highest-priority pairs first) or no feasible edge is left. Every DAG with an
edge has a feasible one (an edge into a node from its highest predecessor is tight), so only a
graph without edges can stop above the target: its nodes are then isolated (one per weakly
connected component; Corollary 3.6 tacitly assumes a connected DAG), and merging them would only
trade parallelism for a smaller count, so we stop as the paper does and report ``stopped``.
A round is O(E log E) (the sort), as in the paper.
"""

from __future__ import annotations

import numpy as np

from graphir.passes.fuse.common import CoarseGraph, heights


def feasible_edges(graph: CoarseGraph, height: np.ndarray) -> np.ndarray:
    """Boolean mask of the edges that satisfy condition (ii) of Theorem 3.5."""
    src, dst = graph.edge_src, graph.edge_dst
    if not len(src):
        return np.zeros(0, dtype=bool)
    out_degree = np.diff(graph.succ_offsets)
    in_degree = np.diff(graph.pred_offsets)
    # Lowest successor height of every node with successors, and how many successors reach it.
    lowest = np.full(graph.num_nodes, np.iinfo(np.int64).max)
    np.minimum.at(lowest, src, height[dst])
    at_lowest = height[dst] == lowest[src]
    lowest_count = np.bincount(src[at_lowest], minlength=graph.num_nodes)
    return (
        (out_degree[src] == 1)
        | (in_degree[dst] == 1)
        | (height[dst] == height[src] + 1)
        | (at_lowest & (lowest_count[src] == 1))
    )


def batch_round(graph: CoarseGraph, merges_allowed: int) -> tuple[np.ndarray, np.ndarray]:
    """One round: the matching to merge, as arrays ``(us, vs)`` of coarse nodes (at most ``merges_allowed``)."""
    height = heights(graph.num_nodes, graph.succ_offsets, graph.succ)
    feasible = np.flatnonzero(feasible_edges(graph, height))
    src, dst = graph.edge_src[feasible], graph.edge_dst[feasible]
    priority = np.lexsort((dst, src, -graph.edge_comm[feasible]))
    height_list = height.tolist()
    succ_offsets = graph.succ_offsets.tolist()
    succ = graph.succ.tolist()
    pred_offsets = graph.pred_offsets.tolist()
    pred = graph.pred.tolist()
    matched = [False] * graph.num_nodes
    chosen_u = [False] * graph.num_nodes
    u_height_of_v = [-1] * graph.num_nodes  # for a chosen v_j: H(u_j)
    us: list[int] = []
    vs: list[int] = []
    for e in priority.tolist():
        if len(us) >= merges_allowed:
            break
        u = int(src[e])
        v = int(dst[e])
        if matched[u] or matched[v]:  # condition (i): a matching
            continue
        hu = height_list[u]
        # Condition (iii), both directions: no edge u -> v_j with H(u_j) = H(u), no u_j -> v with H(u_j) = H(u).
        conflict = False
        for k in range(succ_offsets[u], succ_offsets[u + 1]):
            if u_height_of_v[succ[k]] == hu:
                conflict = True
                break
        if not conflict:
            for k in range(pred_offsets[v], pred_offsets[v + 1]):
                p = pred[k]
                if chosen_u[p] and height_list[p] == hu:
                    conflict = True
                    break
        if conflict:
            continue
        matched[u] = matched[v] = True
        chosen_u[u] = True
        u_height_of_v[v] = hu
        us.append(u)
        vs.append(v)
    return np.asarray(us, dtype=np.int64), np.asarray(vs, dtype=np.int64)


def fuse_acyclic_batch(graph: CoarseGraph, target: int) -> tuple[np.ndarray, dict[str, int | float | str]]:
    """Merge matchings round by round until at most ``target`` nodes remain or nothing is feasible.

    Returns:
        A label per coarse node and statistics (rounds, merges per round).
    """
    labels = np.arange(graph.num_nodes, dtype=np.int64)
    current = graph
    per_round: list[int] = []
    while current.num_nodes > target:
        us, vs = batch_round(current, current.num_nodes - target)
        if not len(us):
            break
        per_round.append(len(us))
        round_labels = np.arange(current.num_nodes, dtype=np.int64)
        round_labels[vs] = us
        _, dense = np.unique(round_labels, return_inverse=True)
        dense = dense.reshape(-1)
        labels = dense[labels]
        current = current.contract(dense)
    stats: dict[str, int | float | str] = {
        "rounds": len(per_round),
        "merges-per-round": ",".join(str(k) for k in per_round) or "none",
        "stopped": "target" if current.num_nodes <= target else "no-feasible-edge",
    }
    return labels, stats
