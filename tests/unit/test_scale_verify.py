"""The verifier at scale: incremental checks after annotating passes, and the vectorised order check.

After the first full check the pass manager re-verifies only what a pass may have invalidated:
the graph's structure version (bumped by every structural mutation, the same counter that
invalidates the index) and its annotation version decide which checks run. ``verify_full``
(``--verify-each``) runs everything every time. The per-device order check sorts once with numpy
and must report exactly what the per-device Python check reported.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphir import verifier
from graphir.errors import VerifyError
from graphir.ir import Graph, Module
from graphir.pass_infra import Pass, PassContext, PassResult
from graphir.pass_manager import PassManager
from graphir.topo import stable_topological_order
from graphir.types import DType, TensorType
from graphir.verifier import VerifyState, verify

F32 = TensorType(DType.F32, (4,))


def _chain(n: int, placed: bool = False) -> Module:
    """A chain of ``n`` Relus; ``placed``: ``n0`` is on gpu0 (a placement key some node holds)."""
    graph = Graph("main")
    value = graph.add_input("x", F32)
    for k in range(n):
        value = graph.add_node("onnx.Relu", [value], [F32], name=f"n{k}").outputs[0]
    graph.set_outputs([value])
    if placed:
        graph.node("n0").device = "gpu0"
    return Module("m", graph, cluster_spec="4xV100")


class _Counter:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.structural = 0
        self.annotations = 0
        self.quotient = 0
        real_uses, real_annotations = verifier._check_uses, verifier._check_annotations
        real_quotient = verifier.check_quotient

        def uses(graph):
            self.structural += 1
            real_uses(graph)

        def annotations(module):
            self.annotations += 1
            real_annotations(module)

        def quotient(graph):
            self.quotient += 1
            real_quotient(graph)

        monkeypatch.setattr(verifier, "_check_uses", uses)
        monkeypatch.setattr(verifier, "_check_annotations", annotations)
        monkeypatch.setattr(verifier, "check_quotient", quotient)


def test_state_skips_structural_checks_after_annotation_changes(monkeypatch):
    counter = _Counter(monkeypatch)
    module = _chain(5, placed=True)
    state = VerifyState()
    verify(module, state)
    assert (counter.structural, counter.annotations) == (1, 1)
    verify(module, state)  # nothing changed: nothing runs
    assert (counter.structural, counter.annotations) == (1, 1)
    module.graph.node("n1").device = "gpu0"
    module.graph.node("n1").order = 0
    verify(module, state)  # annotations only
    assert (counter.structural, counter.annotations) == (1, 2)
    graph = module.graph
    graph.add_node("onnx.Relu", [graph.node("n4").outputs[0]], [F32], name="extra")
    verify(module, state)  # structure changed: everything
    assert (counter.structural, counter.annotations) == (2, 3)
    verify(module)  # no state: always full
    assert (counter.structural, counter.annotations) == (3, 4)


def test_state_still_catches_an_annotation_error():
    module = _chain(3)
    state = VerifyState()
    verify(module, state)
    module.graph.node("n0").order = 0  # an order without a device
    with pytest.raises(VerifyError, match="has an 'order' but no 'device'"):
        verify(module, state)


def test_state_follows_a_new_cluster():
    module = _chain(3)
    state = VerifyState()
    module.graph.node("n0").device = "gpu3"
    verify(module, state)
    module.cluster_spec = "2xV100"
    with pytest.raises(VerifyError, match="unknown device 'gpu3'"):
        verify(module, state)


class _Annotate(Pass):
    name = "test-annotate"

    def run(self, module, ctx):
        for k, node in enumerate(module.graph.index().nodes):
            node.group = k // 2
        return PassResult(changed=True)


class _Grow(Pass):
    name = "test-grow"

    def run(self, module, ctx):
        graph = module.graph
        graph.add_node("onnx.Relu", [graph.outputs[0]], [F32], name=f"grown{len(graph)}")
        return PassResult(changed=True)


class _Nothing(Pass):
    name = "test-nothing"

    def run(self, module, ctx):
        return PassResult(changed=False)


@pytest.mark.parametrize(
    ("full", "expected"),
    # The initial check is full, but no node has a group yet: no group check; annotate (groups
    # only): the group check, not the placement check; grow: everything; annotate: the group
    # check; nothing: none. Full: all five check everything, the group check from the second on.
    [(False, (2, 2, 3)), (True, (5, 5, 4))],
)
def test_pass_manager_verifies_incrementally_unless_full(monkeypatch, full, expected):
    counter = _Counter(monkeypatch)
    manager = PassManager([_Annotate(), _Grow(), _Annotate(), _Nothing()], verify_full=full)
    manager.run(_chain(6, placed=True), PassContext())
    assert (counter.structural, counter.annotations, counter.quotient) == expected


def test_state_runs_only_the_checks_of_the_keys_that_changed(monkeypatch):
    counter = _Counter(monkeypatch)
    module = _chain(4, placed=True)
    state = VerifyState()
    verify(module, state)  # no node has a group: no quotient check
    assert (counter.annotations, counter.quotient) == (1, 0)
    module.graph.node("n1").group = 7
    verify(module, state)  # a group: the quotient check only
    assert (counter.annotations, counter.quotient) == (1, 1)
    module.graph.node("n1").device = "gpu0"
    verify(module, state)  # a device: the placement check only
    assert (counter.annotations, counter.quotient) == (2, 1)
    module.graph.node("n1").clear_annotations()  # any key may have changed: both
    verify(module, state)
    assert (counter.annotations, counter.quotient) == (3, 2)
    module.graph.node("n2").order = 0  # an order without a device is still caught
    with pytest.raises(VerifyError, match="has an 'order' but no 'device'"):
        verify(module, state)


def test_checks_of_keys_no_node_holds_are_skipped_until_one_is_set(monkeypatch):
    # A graph built through the API with no placement key and no group: neither check has
    # anything to read. The first device set (and later a group) brings its check back; removing
    # it does not skip the check again (the graph keeps the key as possibly held).
    counter = _Counter(monkeypatch)
    module = _chain(3)
    graph = module.graph
    assert not graph.may_hold("device", "order", "affinity", "colocate") and not graph.may_hold("group")
    verify(module)
    assert (counter.structural, counter.annotations, counter.quotient) == (1, 0, 0)
    graph.node("n2").device = "gpu9"
    with pytest.raises(VerifyError, match="unknown device 'gpu9'"):
        verify(module)
    assert counter.annotations == 1 and graph.may_hold("device")
    graph.node("n2").device = None
    graph.annotate("group", graph.nodes, [0, 1, 0])  # n0 and n2 grouped around n1: a cycle
    with pytest.raises(VerifyError, match="quotient graph of groups has a cycle"):
        verify(module)
    assert (counter.annotations, counter.quotient) == (2, 1) and graph.may_hold("device", "group")


def test_pass_manager_reports_an_annotation_error_after_an_annotating_pass():
    class _BadOrder(Pass):
        name = "test-bad-order"

        def run(self, module, ctx):
            node = module.graph.node("n2")
            node.device, node.order = "gpu0", 3
            return PassResult(changed=True)

    with pytest.raises(VerifyError, match=r"verification failed after pass 'test-bad-order'.*expected 0"):
        PassManager([_BadOrder()]).run(_chain(4), PassContext())


# ---------------------------------------------------------------- the vectorised order check


def _order_error(check, ordered) -> str | None:
    try:
        check(ordered)
    except VerifyError as exc:
        return exc.message
    return None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["gpu0", "gpu1", "gpu2"]), st.integers(0, 12)),
        min_size=1,
        max_size=12,
    )
)
def test_vectorised_order_check_reports_what_the_python_check_reports(assignment):
    module = _chain(len(assignment))
    nodes = list(module.graph.nodes)
    ordered = [(device, order, nodes[k]) for k, (device, order) in enumerate(assignment)]
    exact = _order_error(verifier._check_orders_exact, ordered)
    vectorised = _order_error(lambda o: verifier._check_orders(module.graph, o), ordered)
    if exact is not None:
        assert vectorised == exact
    else:
        # Valid per-device sequences: only a deadlock against the chain's data edges can fail.
        assert vectorised is None or vectorised.startswith("the per-device 'order' deadlocks")


def test_order_deadlock_names_the_cycle():
    module = _chain(3)
    graph = module.graph
    # n0 -> n1 -> n2 by data; gpu0 runs n2 before n0: n0 waits for n2, which waits for n0.
    for name, device, order in (("n2", "gpu0", 0), ("n0", "gpu0", 1), ("n1", "gpu1", 0)):
        graph.node(name).device, graph.node(name).order = device, order
    with pytest.raises(VerifyError) as info:
        verify(module)
    assert re.search(r"deadlocks against the data dependencies: n0 -> n1 -> n2 -> n0", info.value.message)


def test_orders_beyond_int64_are_reported_exactly():
    # (verify itself stops earlier: the graph index refuses such an int; the check stays exact.)
    module = _chain(3)
    n0, n1, n2 = module.graph.nodes
    ordered = [("gpu0", 0, n0), ("gpu0", 1 << 80, n1), ("gpu0", 5, n2)]
    with pytest.raises(VerifyError, match=r"'n2' has order 5 on 'gpu0', expected 1: orders must be 0..2"):
        verifier._check_orders(module.graph, ordered)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30))
def test_acyclic_agrees_with_the_topological_sort(num_nodes, edges):
    pairs = [(u % num_nodes, v % num_nodes) for u, v in edges if u % num_nodes != v % num_nodes]
    src = np.array([u for u, _ in pairs], dtype=np.int64)
    dst = np.array([v for _, v in pairs], dtype=np.int64)
    assert verifier._acyclic(num_nodes, src, dst) == (stable_topological_order(num_nodes, src, dst) is not None)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=30),
    st.randoms(use_true_random=False),
)
def test_acyclic_with_any_rank_hint_agrees_with_the_topological_sort(num_nodes, edges, rng):
    # The hint only decides where the exact check looks (the windows of backward edges), never
    # the answer; the window threshold is lowered so that both the peel and scipy are exercised.
    pairs = [(u % num_nodes, v % num_nodes) for u, v in edges if u % num_nodes != v % num_nodes]
    src = np.array([u for u, _ in pairs], dtype=np.int64)
    dst = np.array([v for _, v in pairs], dtype=np.int64)
    rank = np.array(rng.sample(range(num_nodes), num_nodes), dtype=np.int64)
    expected = stable_topological_order(num_nodes, src, dst) is not None
    assert verifier._acyclic(num_nodes, src, dst, rank) == expected
    limit = verifier._PEEL_NODES
    try:
        verifier._PEEL_NODES = rng.randrange(0, 13)
        assert verifier._acyclic(num_nodes, src, dst, rank) == expected
    finally:
        verifier._PEEL_NODES = limit


def test_a_cycle_through_two_windows_apart_is_not_there_but_one_inside_a_window_is_found():
    # Ranks 0..5 = nodes 0..5. Edges 1 -> 0 and 4 -> 3 are backward: windows {0, 1} and {3, 4}.
    # 0 -> 1 closes a cycle inside the first window; 2 -> 5 and 3 -> 4 are forward and harmless.
    src = np.array([1, 4, 2, 3], dtype=np.int64)
    dst = np.array([0, 3, 5, 4], dtype=np.int64)
    assert not verifier._acyclic(6, src, dst)  # 3 -> 4 -> 3
    assert verifier._acyclic(6, src[[0, 1, 2]], dst[[0, 1, 2]])
    assert not verifier._acyclic(6, np.append(src[[0, 1, 2]], 0), np.append(dst[[0, 1, 2]], 1))
    # A cycle 0 -> 2 -> 4 -> 0 spans the whole range: one window, found.
    assert not verifier._acyclic(5, np.array([0, 2, 4]), np.array([2, 4, 0]))
    # Backward 4 -> 2 and 2 -> 0 share node 2: one window [0, 4], so the forward 0 -> 4 is inside it.
    assert not verifier._acyclic(5, np.array([0, 4, 2]), np.array([4, 2, 0]))
