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
reached, merging the highest-priority pairs first).

Why batch merging alone stalls, and what reaches any target (Corollary 3.6). Batch merging never
stalls on a graph that has an edge: an edge into ``v`` from its highest predecessor ``u`` has
``H(v) = H(u) + 1`` (Definition 3.4), so condition (ii) holds for it, and the first edge in
priority order is always accepted (conditions (i) and (iii) compare it with pairs already chosen,
and there are none). Each round therefore merges at least one pair, so no Theorem 3.2 fallback
(single merges of an edge that is the only path between its ends) is ever needed: on a weakly
connected DAG the rounds alone reach every ``T >= 1``. What they cannot do is merge two nodes that
no edge joins, so they stop at the number ``c`` of weakly connected components (Corollary 3.6
tacitly assumes a connected DAG). Real training graphs are not connected: the DenseNet121
training graph (issue 15) has 555 components (488 unused ``Const`` nodes, 66 five-node
components and the network), hence the old stop at 555 nodes for ``target=200``.

So when ``target < c`` (and only then: a target the rounds reach keeps their result byte for
byte), a first step joins the components: the representative (lowest coarse number) of each
component other than the heaviest (by compute time, ties by representative) is merged into the
heaviest one's representative, lightest components first, and only as many as the target needs
(at most ``c - 1``). Merging nodes of different components never makes a cycle: a cycle through
the merged node would leave it from one member and return to the same member (edges never cross
components), i.e. a cycle of the original DAG. The join is reported as the first round (its
merges are one acyclic batch) and in ``component-joins``. Afterwards the graph is one component
(or already at the target), so the rounds reach it: ``nodes-after = min(T, nodes-before)`` for
every DAG and every ``T >= 1``. The join keeps the heaviest component whole for the rounds to
coarsen; the junk (lone constants) joins it at one node. A round is O(E log E) (the sort), as in
the paper; the join is O(V + E α(V)) (union-find over the edges) plus a sort of the components.
"""

from __future__ import annotations

import numpy as np

from graphir.passes.fuse.common import CoarseGraph, heights
from graphir.unionfind import DisjointSets


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


def join_components(graph: CoarseGraph, target: int) -> tuple[np.ndarray, int]:
    """Join weakly connected components so that the rounds can reach ``target`` (module docstring).

    Returns:
        Dense labels per coarse node (``0..k-1`` in order of the lowest member) and the number of
        joins made; ``(identity, 0)`` when ``target`` is at least the number of components.
    """
    n = graph.num_nodes
    identity = np.arange(n, dtype=np.int64)
    sets: DisjointSets[int] = DisjointSets()
    for u, v in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        sets.union(u, v)
    root = np.fromiter((sets.find(v) if v in sets else v for v in range(n)), dtype=np.int64, count=n)
    roots, component = np.unique(root, return_inverse=True)
    component = component.reshape(-1)
    num_components = len(roots)
    if target >= num_components:
        return identity, 0
    # Representative of a component: its lowest coarse number (first occurrence in node order).
    _, representative = np.unique(component, return_index=True)
    weight = np.bincount(component, weights=graph.node_time, minlength=num_components)
    heaviest_first = np.lexsort((representative, -weight))
    anchor = int(representative[heaviest_first[0]])
    lightest_first = np.lexsort((representative, weight))
    others = lightest_first[lightest_first != heaviest_first[0]]
    joins = min(num_components - 1, n - target)
    labels = identity.copy()
    labels[representative[others[:joins]]] = anchor
    _, dense = np.unique(labels, return_inverse=True)
    return dense.reshape(-1).astype(np.int64), joins


def fuse_acyclic_batch(graph: CoarseGraph, target: int) -> tuple[np.ndarray, dict[str, int | float | str]]:
    """Merge matchings round by round until at most ``target`` nodes remain (see the module docstring).

    Returns:
        A label per coarse node and statistics (rounds, merges per round, and ``component-joins``
        when components had to be joined first).
    """
    labels = np.arange(graph.num_nodes, dtype=np.int64)
    current = graph
    per_round: list[int] = []
    joins = 0
    if current.num_nodes > target:
        join_labels, joins = join_components(current, target)
        if joins:
            per_round.append(joins)
            labels = join_labels
            current = current.contract(join_labels)
    while current.num_nodes > target:
        us, vs = batch_round(current, current.num_nodes - target)
        assert len(us), "a graph with an edge always has a batch-feasible one (module docstring)"
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
        "stopped": "target",
    }
    if joins:
        stats["component-joins"] = joins
    return labels, stats
