"""The array view: topological numbering, CSR adjacency, bytes, caching and the quotient graph."""

from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest
from helpers import f32
from hypothesis import given
from hypothesis import strategies as st

from graphir.errors import VerifyError
from graphir.ir import Graph
from graphir.types import DType, TensorType


def names(index, numbers) -> list[str]:
    return [index.nodes[int(u)].name for u in numbers]


@pytest.fixture
def hand():
    """Diamond + multi-output + a node using one value twice.

    ``s`` splits x into s (8 B) and s#1 (16 B); ``l = f(s)``, ``r = g(s#1, s#1)``, ``j = h(l, r)``
    (the diamond s -> l, r -> j) and ``k = add(s, s#1)`` (two values on one node pair).
    """
    g = Graph()
    x = g.add_input("x", f32(6))
    s = g.add_node("test.split", [x], [f32(2), f32(4)], name="s")
    s0, s1 = s.outputs
    l_ = g.add_node("test.f", [s0], [f32(2)], name="l")
    r = g.add_node("test.g", [s1, s1], [f32(4)], name="r")
    g.add_node("test.h", [l_.outputs[0], r.outputs[0]], [f32(8)], name="j")
    k = g.add_node("test.add", [s0, s1], [f32(1)], name="k")
    g.set_outputs([g.value("j"), k.outputs[0]])
    return g


def test_csr_on_hand_graph(hand):
    index = hand.index()
    assert names(index, range(index.num_nodes)) == ["s", "l", "r", "j", "k"]
    assert [v.name for v in index.values] == ["s", "s#1", "l", "r", "j", "k"]
    assert index.num_edges == 6  # r uses s#1 twice: one edge
    assert index.edge_src.tolist() == [0, 0, 0, 0, 1, 2]
    assert index.edge_dst.tolist() == [1, 2, 4, 4, 3, 3]
    assert index.edge_value.tolist() == [0, 1, 0, 1, 2, 3]
    assert index.edge_bytes.tolist() == [8, 16, 8, 16, 8, 16]
    assert index.succ_offsets.tolist() == [0, 4, 5, 6, 6, 6]
    assert index.succ.tolist() == [1, 2, 4, 4, 3, 3]
    assert index.pred_offsets.tolist() == [0, 0, 1, 2, 4, 6]
    assert index.pred.tolist() == [0, 0, 1, 2, 0, 0]
    assert index.predecessors(3).tolist() == [1, 2]
    assert index.successors(0).tolist() == [1, 2, 4, 4]
    # succ_edge / pred_edge point back at the edge that each CSR entry stands for.
    assert (index.edge_dst[index.succ_edge] == index.succ).all()
    assert (index.edge_src[index.pred_edge] == index.pred).all()
    assert index.edge_value[index.pred_edge[4:6]].tolist() == [0, 1]  # k's two inputs, by value
    assert index.value_bytes.tolist() == [8, 16, 8, 16, 32, 4]
    assert index.value_producer.tolist() == [0, 0, 1, 2, 3, 4]
    assert index.out_bytes().tolist() == [24, 8, 16, 32, 4]
    assert index.out_bytes().dtype == np.int64
    assert index.edge_src.dtype == index.succ.dtype == index.pred_offsets.dtype == np.int64


def test_unknown_shapes_count_zero_bytes():
    g = Graph()
    x = g.add_input("x", f32("n"))
    a = g.add_node("test.a", [x], [f32("n"), TensorType(DType.F32, None)], name="a")
    g.add_node("test.b", a.outputs, [f32(3)], name="b")
    index = g.index()
    assert index.edge_bytes.tolist() == [0, 0]
    assert index.out_bytes().tolist() == [0, 12]


def test_a_symbol_beside_a_huge_dim_counts_zero_bytes_without_building_the_product():
    # f32[batch, 2^40, 8, 8] (an imported ONNX conv over a 2^40-channel weight): the size is
    # unknown, so 0; a product taken before looking at the dims would repeat 'batch' 2^46 times.
    g = Graph()
    x = g.add_input("x", f32(2))
    a = g.add_node("test.a", [x], [TensorType(DType.F32, ("batch", 1 << 40, 8, 8))], name="a")
    g.add_node("test.b", a.outputs, [f32(2)], name="b")
    index = g.index()
    assert index.value_bytes.tolist() == [0, 8]
    assert index.edge_bytes.tolist() == [0]


def test_empty_graph_index():
    index = Graph().index()
    assert index.num_nodes == 0 and index.num_edges == 0
    assert index.succ_offsets.tolist() == [0] and index.out_bytes().tolist() == []
    assert index.quotient().num_groups == 0


def _rewired_graph(order: list[str], edges: list[tuple[str, str]]) -> Graph:
    """Nodes inserted in ``order`` (each first reading %x), then ``edges`` added as extra inputs."""
    g = Graph()
    x = g.add_input("x", f32(1))
    for name in order:
        g.add_node("test.op", [x], [f32(1)], name=name)
    for src, dst in edges:
        g.node(dst).add_input(g.value(src))
    return g


def test_already_topological_insertion_order_is_kept():
    order = ["e", "b", "d", "a", "c"]  # names deliberately not sorted
    g = _rewired_graph(order, [("e", "d"), ("b", "c"), ("d", "c")])
    assert [n.name for n in g.index().nodes] == order


def test_non_topological_insertion_is_sorted_lexicographically_smallest():
    # Insertion p, q, r, s with r -> p: the smallest order by insertion position is q, r, p, s.
    g = _rewired_graph(["p", "q", "r", "s"], [("r", "p")])
    assert [n.name for n in g.index().nodes] == ["q", "r", "p", "s"]
    # The sorted numbering is stable: rebuilding after an unrelated mutation gives the same order.
    g.add_node("test.op", [g.value("x")], [f32(1)], name="t")
    assert [n.name for n in g.index().nodes] == ["q", "r", "p", "s", "t"]


def test_index_is_cached_until_mutation():
    g = _rewired_graph(["a", "b"], [("a", "b")])
    index = g.index()
    assert g.index() is index
    a = g.node("a")
    assert index.position(a) == 0
    g.node("a").cost = 1.0  # annotations do not invalidate the structure
    assert g.index() is index
    c = g.add_node("test.op", [g.value("b")], [f32(1)], name="c")
    with pytest.raises(ValueError, match="stale"):
        index.position(a)
    rebuilt = g.index()
    assert rebuilt is not index and rebuilt.num_nodes == 3 and rebuilt.position(c) == 2
    assert g.index() is rebuilt
    g.node("c").set_input(0, g.value("a"))
    assert g.index() is not rebuilt
    assert g.index().edge_src.tolist() == [0, 0]


def test_annotation_arrays_are_rebuilt_only_when_a_key_they_read_changes():
    g = _rewired_graph(["a", "b"], [("a", "b")])
    g.node("a").cost = 1.0
    index = g.index()
    times, groups = index.times(), index.groups()
    g.node("b").device = "gpu0"  # neither cost nor group
    assert index.times() is times and index.groups() is groups
    g.node("b").group = 3  # group: the groups again, the times kept
    assert index.times() is times and index.groups() is not groups
    assert index.groups().tolist() == [-1, 3]
    g.annotate("cost", [g.node("b")], [2.0])  # cost through the column API
    assert index.times().tolist() == [1.0, 2.0]
    times = index.times()
    g.node("a").clear_annotations()  # any key may have changed
    assert np.isnan(index.times()[0]) and index.times() is not times
    assert index.annotation_list("device") == [None, "gpu0"]


def test_columns_of_keys_no_node_holds_follow_the_first_one_set():
    # Neither column reads the nodes while no node holds its key; once one does, they show it.
    # A batch touched without keys (touch_all()) may hold any key.
    g = _rewired_graph(["a", "b", "c"], [("a", "b")])
    index = g.index()
    assert index.annotation_list("device") == [None, None, None] and index.groups().tolist() == [-1, -1, -1]
    g.node("c").device = "gpu1"
    g.annotate("group", [g.node("b")], [4])
    assert index.annotation_list("device") == [None, None, "gpu1"] and index.groups().tolist() == [-1, 4, -1]
    assert g.may_hold("device") and g.may_hold("group", "order") and not g.may_hold("order", "start")
    g.touch_all()
    assert g.may_hold("order") and g.may_hold("start")


def test_position_of_foreign_node_rejected():
    g = _rewired_graph(["a"], [])
    h = _rewired_graph(["a"], [])
    with pytest.raises(ValueError):
        g.index().position(h.node("a"))


def test_cycle_is_reported_with_names():
    g = _rewired_graph(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("c", "a")])
    with pytest.raises(VerifyError) as info:
        g.index()
    message = info.value.message
    assert "cycle" in message
    cycle = message.split(": ", 1)[1].split(" -> ")
    assert cycle[0] == cycle[-1]
    assert set(cycle) == {"a", "b", "c"}
    assert info.value.loc.node in {"a", "b", "c"}


def test_self_loop_is_a_cycle():
    g = _rewired_graph(["a"], [("a", "a")])
    with pytest.raises(VerifyError, match="a -> a"):
        g.index()


# ----------------------------------------------------------------------------- quotient graph


@pytest.fixture
def grouped():
    """a (8 B) feeds b, c (group 1); b (16 B), c (4 B) and a feed d (group 2)."""
    g = Graph()
    x = g.add_input("x", f32(1))
    a = g.add_node("test.a", [x], [f32(2)], name="a")
    b = g.add_node("test.b", [a.outputs[0]], [f32(4)], name="b")
    c = g.add_node("test.c", [a.outputs[0]], [f32(1)], name="c")
    d = g.add_node("test.d", [b.outputs[0], c.outputs[0], a.outputs[0]], [f32(1)], name="d")
    b.group = c.group = 1
    d.group = 2
    return g


def test_quotient_groups_members_and_bytes(grouped):
    q = grouped.index().quotient()
    assert q.num_groups == 3
    assert q.node_group.tolist() == [0, 1, 1, 2]
    assert q.group_ids.tolist() == [-1, 1, 2]
    assert q.members() == [[0], [1, 2], [3]]
    edges = sorted(zip(q.edge_src.tolist(), q.edge_dst.tolist(), q.edge_bytes.tolist(), strict=True))
    # a's value enters group 1 once (two members use it): 8 B, not 16 B.
    assert edges == [(0, 1, 8), (0, 2, 8), (1, 2, 20)]
    assert q.order is not None and q.order.tolist() == [0, 1, 2]
    assert q.cycle() == []


def test_quotient_follows_group_changes(grouped):
    index = grouped.index()
    q = index.quotient()
    assert index.quotient() is q  # cached while annotations are unchanged
    grouped.node("a").group = 1
    q2 = index.quotient()
    assert q2 is not q and q2.num_groups == 2
    assert q2.members() == [[0, 1, 2], [3]]
    assert q2.edge_bytes.tolist() == [28]  # a (8) + b (16) + c (4) into group 2, each once
    assert grouped.index() is index


def test_quotient_numbering_by_first_member_not_group_id():
    g = _rewired_graph(["a", "b", "c"], [("a", "b"), ("b", "c")])
    g.node("a").group = 9
    g.node("b").group = 3
    g.node("c").group = 9  # a and c in group 9 around b: a cycle in the quotient
    q = g.index().quotient()
    assert q.group_ids.tolist() == [9, 3]
    assert q.order is None
    assert sorted(q.cycle()) == [0, 1]


def test_ungrouped_nodes_stay_alone():
    g = _rewired_graph(["a", "b", "c"], [("a", "c"), ("b", "c")])
    q = g.index().quotient()
    assert q.num_groups == 3 and q.group_ids.tolist() == [-1, -1, -1]
    assert q.members() == [[0], [1], [2]]


# ----------------------------------------------------------------------------- property


@given(st.integers(min_value=1, max_value=300), st.randoms(use_true_random=False), st.booleans())
def test_random_dag_index_invariants(num_nodes, rng: random.Random, sorted_insertion):
    # A random DAG over ranks 0..n-1 (edges go from lower to higher rank), with one or two results
    # per node, inserted in a random order (or in rank order) and wired afterwards.
    ranks = list(range(num_nodes))
    insertion = ranks[:] if sorted_insertion else rng.sample(ranks, num_nodes)
    g = Graph()
    x = g.add_input("x", f32(1))
    for rank in insertion:
        outputs = [f32(rng.randint(0, 4)) for _ in range(rng.choice((1, 1, 2)))]
        g.add_node("test.op", [x], outputs, name=f"n{rank}")
    expected_triples = set()
    for rank in range(1, num_nodes):
        node = g.node(f"n{rank}")
        for _ in range(rng.randint(0, 3)):
            src = g.node(f"n{rng.randrange(rank)}")
            value = rng.choice(src.outputs)
            node.add_input(value)
            expected_triples.add((src.name, node.name, value.name))
    index = g.index()

    assert sorted(n.name for n in index.nodes) == sorted(f"n{r}" for r in ranks)
    assert (index.edge_src < index.edge_dst).all()
    triples = {
        (index.nodes[s].name, index.nodes[d].name, index.values[v].name)
        for s, d, v in zip(index.edge_src.tolist(), index.edge_dst.tolist(), index.edge_value.tolist(), strict=True)
    }
    assert triples == expected_triples and len(triples) == index.num_edges
    assert (index.edge_bytes == index.value_bytes[index.edge_value]).all()
    # CSR successors and predecessors are mutual inverses (as multisets of (u, v) pairs).
    n = index.num_nodes
    succ_pairs = sorted((u, int(v)) for u in range(n) for v in index.successors(u))
    pred_pairs = sorted((int(u), v) for v in range(n) for u in index.predecessors(v))
    assert succ_pairs == pred_pairs == sorted(zip(index.edge_src.tolist(), index.edge_dst.tolist(), strict=True))
    assert index.succ_offsets[-1] == index.pred_offsets[-1] == index.num_edges
    # The numbering is the lexicographically smallest topological order by insertion position,
    # hence unchanged when the insertion order was already topological.
    position = {f"n{rank}": k for k, rank in enumerate(insertion)}
    reference = nx.DiGraph()
    reference.add_nodes_from(position)
    reference.add_edges_from((s, d) for s, d, _ in expected_triples)
    expected_order = list(nx.lexicographical_topological_sort(reference, key=position.__getitem__))
    assert [node.name for node in index.nodes] == expected_order
    if sorted_insertion:
        assert expected_order == [f"n{r}" for r in insertion]
    for k, node in enumerate(index.nodes):
        assert index.position(node) == k
