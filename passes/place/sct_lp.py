"""m-SCT's favourite children (Baechi §m-SCT, after Hanen & Munier): the LP relaxation and its rounding.

Used by :class:`graphir.passes.place.baechi.MSct`; see :mod:`graphir.passes.place.baechi` for the
placer and the documented choices (mean times on heterogeneous clusters, rounding at 0.5).
"""

from __future__ import annotations

import numpy as np

from graphir.errors import PassError
from graphir.extras import require
from graphir.passes.place.problem import PlacementProblem

__all__ = ["favourite_children", "solve_favourite_lp"]


def solve_favourite_lp(problem: PlacementProblem) -> tuple[np.ndarray, float]:
    """Solve the LP relaxation of the SCT program (Baechi §m-SCT, after Hanen & Munier).

    Variables: ``x_e`` in [0, 1] per coarse edge (0: the edge's head is its tail's favourite
    child, so no communication is paid), start ``s_v >= 0`` per node, makespan ``w``::

        minimise w
        s_u + p_u + c_uv * x_uv <= s_v           for every edge u -> v
        sum_{v in succ(u)} x_uv >= |succ(u)| - 1  (at most one favourite child)
        sum_{u in pred(v)} x_uv >= |pred(v)| - 1  (at most one favourite parent)
        s_v + p_v <= w                            (sinks suffice: the others are implied)

    ``p`` is the mean compute time over devices and ``c`` the mean transfer time over device pairs.

    Returns:
        ``(x, w)``: the relaxed edge variables and the LP makespan.

    Raises:
        PassError: HiGHS did not find an optimum.
    """
    linprog = require("scipy.optimize", "solvers", "place{algo=m-sct}").linprog
    csr_matrix = require("scipy.sparse", "solvers", "place{algo=m-sct}").csr_matrix

    n = problem.num_nodes
    num_edges = len(problem.edge_src)
    p = problem.times.mean(axis=1)
    c = problem.mean_comm_times()
    src, dst = problem.edge_src, problem.edge_dst
    s_col = num_edges + np.arange(n)
    w_col = num_edges + n
    edge_ids = np.arange(num_edges)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    rhs: list[np.ndarray] = []
    # Precedence: s_u - s_v + c_e x_e <= -p_u.
    rows += [edge_ids, edge_ids, edge_ids]
    cols += [s_col[src], s_col[dst], edge_ids]
    vals += [np.ones(num_edges), -np.ones(num_edges), c]
    rhs.append(-p[src])
    next_row = num_edges
    # At most one favourite child / parent: -sum x <= 1 - degree (only degree >= 2 binds).
    for offsets, by_node in ((problem.succ_offsets, problem.succ_edge), (problem.pred_offsets, problem.pred_edge)):
        degree = np.diff(offsets)
        nodes = np.flatnonzero(degree >= 2)
        if len(nodes):
            counts = degree[nodes]
            row_of = next_row + np.repeat(np.arange(len(nodes)), counts)
            starts = offsets[nodes]
            entries = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
            rows.append(row_of)
            cols.append(by_node[entries])
            vals.append(-np.ones(len(row_of)))
            rhs.append(1.0 - counts)
            next_row += len(nodes)
    # Makespan: s_v - w <= -p_v for sinks.
    sinks = np.flatnonzero(np.diff(problem.succ_offsets) == 0)
    sink_rows = next_row + np.arange(len(sinks))
    rows += [sink_rows, sink_rows]
    cols += [s_col[sinks], np.full(len(sinks), w_col)]
    vals += [np.ones(len(sinks)), -np.ones(len(sinks))]
    rhs.append(-p[sinks])
    next_row += len(sinks)
    matrix = csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(next_row, num_edges + n + 1)
    )
    objective = np.zeros(num_edges + n + 1)
    objective[w_col] = 1.0
    bounds = np.zeros((num_edges + n + 1, 2))
    bounds[:num_edges, 1] = 1.0
    bounds[num_edges:, 1] = np.inf
    result = linprog(objective, A_ub=matrix, b_ub=np.concatenate(rhs), bounds=bounds, method="highs")
    if result.status != 0 or result.x is None:
        raise PassError(f"m-sct: the favourite-child LP failed: {result.message}")
    return np.clip(result.x[:num_edges], 0.0, 1.0), float(result.x[w_col])


def favourite_children(problem: PlacementProblem, x: np.ndarray, threshold: float = 0.5) -> np.ndarray:
    """Round the LP's edge variables into at most one favourite child per node.

    An edge is a candidate when ``x <= threshold`` (Baechi rounds at 0.5); candidates are accepted
    in increasing ``x`` (ties: edge number) when neither the tail already has a favourite child nor
    the head a favourite parent.

    Returns:
        the favourite child of every coarse node (-1: none).
    """
    favourite = np.full(problem.num_nodes, -1, dtype=np.int64)
    has_parent = np.zeros(problem.num_nodes, dtype=bool)
    candidates = np.flatnonzero(x <= threshold)
    candidates = candidates[np.lexsort((candidates, x[candidates]))]
    src = problem.edge_src
    dst = problem.edge_dst
    for e in candidates.tolist():
        u, v = int(src[e]), int(dst[e])
        if favourite[u] < 0 and not has_parent[v]:
            favourite[u] = v
            has_parent[v] = True
    return favourite
