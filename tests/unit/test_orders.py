"""Topological orders (M-TOPO, DFS-TOPO, CPD-TOPO), tlevel/blevel and the Optimal_BP programme."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphir.passes.fuse.cpd import optimal_breakpoints
from graphir.passes.orders import cpd_topo, dfs_topo, m_topo, positions, tlevel_blevel
from graphir.topo import csr


def _csr(n: int, edges: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    src = np.asarray([e[0] for e in edges], dtype=np.int64)
    dst = np.asarray([e[1] for e in edges], dtype=np.int64)
    return csr(n, src, dst)


# Celeritas Fig. 3 (reconstructed): towers a1, a2 -> a3 -> a4 and b1, b2 -> b3 -> b4 (numbered 0..7).
FIG3 = [(0, 2), (1, 2), (2, 3), (4, 6), (5, 6), (6, 7)]


def _cut(order: np.ndarray, edges: list[tuple[int, int]], parts: int = 2) -> int:
    part = positions(order) * parts // len(order)
    return sum(int(part[u] != part[v]) for u, v in edges)


def test_m_topo_is_breadth_first_and_cuts_four_edges() -> None:
    offsets, succ, _ = _csr(8, FIG3)
    order = m_topo(8, offsets, succ)
    assert order.tolist() == [0, 1, 4, 5, 2, 6, 3, 7]
    assert _cut(order, FIG3) == 4


def test_dfs_topo_finishes_a_tower_first_and_cuts_none() -> None:
    offsets, succ, _ = _csr(8, FIG3)
    order = dfs_topo(8, offsets, succ)
    assert order.tolist() == [0, 1, 2, 3, 4, 5, 6, 7]
    assert _cut(order, FIG3) == 0


def test_dfs_topo_visits_smallest_ready_child_first() -> None:
    # 0 -> {3, 1, 2}: all ready at once; the smallest goes to the head; 1 -> 4 is explored before 2.
    offsets, succ, _ = _csr(5, [(0, 3), (0, 1), (0, 2), (1, 4)])
    assert dfs_topo(5, offsets, succ).tolist() == [0, 1, 4, 2, 3]


def test_tlevel_blevel_on_a_diamond_by_hand() -> None:
    # a=0 -> b=1 (c=1), a -> c=2 (c=0.5), b -> d=3 (c=2), c -> d (c=1); w = 1, 2, 3, 1.
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    comm = np.asarray([1.0, 0.5, 2.0, 1.0])
    offsets, succ, edge_ids = _csr(4, edges)
    w = np.asarray([1.0, 2.0, 3.0, 1.0])
    tlevel, blevel = tlevel_blevel(4, offsets, succ, w, comm[edge_ids])
    # eq. (2): t(b) = 0+1+1, t(c) = 0+1+0.5, t(d) = max(2+2+2, 1.5+3+1).
    assert tlevel.tolist() == [0.0, 2.0, 1.5, 6.0]
    # eq. (3): b(d) = 1, b(b) = 2+(1+2), b(c) = 3+(1+1), b(a) = 1+max(5+1, 5+0.5).
    assert blevel.tolist() == [7.0, 5.0, 5.0, 1.0]


def test_cpd_topo_follows_the_critical_path() -> None:
    # Sources 0 (cpath 2) and 1 (cpath 11): 1 first. 1 -> {2 (w=1), 3 (w=9)}: 3 is on the
    # critical path and goes to the head; 2 follows, then 0.
    edges = [(1, 2), (1, 3)]
    offsets, succ, edge_ids = _csr(4, edges)
    w = np.asarray([2.0, 1.0, 1.0, 9.0])
    order = cpd_topo(4, offsets, succ, w, np.zeros(2))
    assert order.tolist() == [1, 3, 2, 0]


def test_cpd_topo_ties_prefer_smaller_numbers() -> None:
    offsets, succ, _ = _csr(5, [(0, 2), (0, 3), (1, 4)])
    order = cpd_topo(5, offsets, succ, np.ones(5), np.zeros(3))
    assert order.tolist() == [0, 2, 3, 1, 4]


@pytest.mark.parametrize("order_fn", [m_topo, dfs_topo])
def test_orders_reject_cycles(order_fn) -> None:  # noqa: ANN001
    offsets, succ, _ = _csr(3, [(0, 1), (1, 2), (2, 1)])
    with pytest.raises(ValueError, match="cycle"):
        order_fn(3, offsets, succ)


@st.composite
def random_dags(draw: st.DrawFn, max_nodes: int = 60) -> tuple[int, list[tuple[int, int]]]:
    n = draw(st.integers(1, max_nodes))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    perm = draw(st.permutations(range(n)))  # numbering need not be topological
    return n, [(perm[min(u, v)], perm[max(u, v)]) for u, v in edges if u != v]


@given(random_dags(), st.integers(0, 2**31 - 1))
def test_every_order_is_a_topological_permutation(dag: tuple[int, list[tuple[int, int]]], seed: int) -> None:
    n, edges = dag
    offsets, succ, edge_ids = _csr(n, edges)
    rng = np.random.default_rng(seed)
    w = rng.random(n)
    comm = rng.random(len(edges))[edge_ids]
    for order in (m_topo(n, offsets, succ), dfs_topo(n, offsets, succ), cpd_topo(n, offsets, succ, w, comm)):
        assert sorted(order.tolist()) == list(range(n))
        pos = positions(order)
        assert all(pos[u] < pos[v] for u, v in edges)


# ----------------------------------------------------------------------------- Optimal_BP


def test_optimal_bp_single_cluster_when_everything_fits() -> None:
    starts, cut = optimal_breakpoints(
        4, np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([5.0, 1.0, 5.0]), np.ones(4), window=4, mem_cap=100
    )
    assert starts.tolist() == [0] and cut == 0.0


def test_optimal_bp_cuts_the_cheapest_edge_within_the_window() -> None:
    # Chain 0 -5-> 1 -1-> 2 -5-> 3, clusters of at most 2 nodes: {0,1} {2,3} cuts only the 1.
    starts, cut = optimal_breakpoints(
        4, np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([5.0, 1.0, 5.0]), np.ones(4), window=2, mem_cap=100
    )
    assert starts.tolist() == [0, 2] and cut == 1.0


def test_optimal_bp_memory_cap() -> None:
    # Same chain, window 4 but at most 2 bytes per cluster; node 3 alone exceeds the cap.
    starts, cut = optimal_breakpoints(
        4,
        np.array([0, 1, 2]),
        np.array([1, 2, 3]),
        np.array([5.0, 1.0, 5.0]),
        np.array([1.0, 1.0, 1.0, 7.0]),
        window=4,
        mem_cap=2,
    )
    assert starts.tolist() == [0, 2, 3] and cut == 6.0


def test_optimal_bp_counts_long_edges_eq4() -> None:
    # 0 -> 3 (c=10) spans the whole order; 0 -> 1 (1), 1 -> 2 (1), 2 -> 3 (1); window 3.
    # Clusters {0,1,2}{3}: cut 10+1 = 11; {0}{1,2,3}: 10+1 = 11; {0,1}{2,3}: 10+1 = 11 -> smallest i
    # on ties: the longest last cluster wins at each step.
    starts, cut = optimal_breakpoints(
        4,
        np.array([0, 1, 2, 0]),
        np.array([1, 2, 3, 3]),
        np.array([1.0, 1.0, 1.0, 10.0]),
        np.ones(4),
        window=3,
        mem_cap=100,
    )
    assert cut == 11.0
    assert starts.tolist() == [0, 1]


def _brute_force(n: int, edges: list[tuple[int, int, float]], mem: np.ndarray, window: int, cap: float) -> float:
    best = np.inf
    for mask in itertools.product([0, 1], repeat=n - 1):
        starts = [0] + [k + 1 for k, bit in enumerate(mask) if bit]
        bounds = starts + [n]
        ok = all(
            b - a <= window and (b - a == 1 or mem[a:b].sum() <= cap)
            for a, b in zip(bounds[:-1], bounds[1:], strict=False)
        )
        if not ok:
            continue
        cluster = np.zeros(n, dtype=int)
        for c, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=False)):
            cluster[a:b] = c
        best = min(best, sum(c for u, v, c in edges if cluster[u] != cluster[v]))
    return best


@given(
    st.integers(1, 9),
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 20)), max_size=20),
    st.integers(1, 5),
    st.lists(st.integers(0, 4), min_size=9, max_size=9),
    st.integers(1, 10),
)
def test_optimal_bp_matches_brute_force(
    n: int, raw: list[tuple[int, int, int]], window: int, mem_list: list[int], cap: int
) -> None:
    edges = [(min(u, v), max(u, v), float(c)) for u, v, c in raw if u != v and max(u, v) < n]
    mem = np.asarray(mem_list[:n], dtype=float)
    starts, cut = optimal_breakpoints(
        n,
        np.asarray([e[0] for e in edges], dtype=np.int64),
        np.asarray([e[1] for e in edges], dtype=np.int64),
        np.asarray([e[2] for e in edges]),
        mem,
        window,
        cap,
    )
    assert cut == pytest.approx(_brute_force(n, edges, mem, window, cap))
    bounds = starts.tolist() + [n]
    assert bounds[0] == 0 and all(0 < b - a <= window for a, b in zip(bounds[:-1], bounds[1:], strict=False))
