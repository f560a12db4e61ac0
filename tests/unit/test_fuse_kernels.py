"""``fuse-kernels`` (passes/fuse/kernels.py): convex per-device sets, the fused cost rule, and parallelize{kernels=xla}.

The hand-worked costs are the lit test tests/filecheck/fuse/kernels.gir; here: properties on random
placed graphs, the training-step rules and the errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import mlp_train, random_module

from graphir.clone import clone_module
from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.fuse.kernels import FuseKernels, fuse_kernels
from graphir.passes.parallelize import Parallelize
from graphir.passes.place import Place
from graphir.passes.place.pipeline import training_layout
from graphir.passes.profile import Profile
from graphir.simulator import recorded_order, simulate
from graphir.verifier import verify


def _sets(module) -> dict[str, list]:
    sets: dict[str, list] = {}
    for node in module.graph.index().nodes:
        if node.kernel is not None:
            sets.setdefault(node.kernel, []).append(node)
    return sets


def _reach(index, start: list[int], forward: bool, extra: dict[int, list[int]]) -> set[int]:
    """Nodes reachable from ``start`` (excluded) over data/control edges and the ``extra`` edges."""
    offsets = index.succ_offsets if forward else index.pred_offsets
    targets = index.succ if forward else index.pred
    seen: set[int] = set()
    stack = list(start)
    while stack:
        u = stack.pop()
        for w in [*targets[offsets[u] : offsets[u + 1]].tolist(), *extra.get(u, [])]:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def _order_edges(module) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Each node's next and previous node in its device's order (when the order is enforced)."""
    index = module.graph.index()
    after: dict[int, list[int]] = {}
    before: dict[int, list[int]] = {}
    if recorded_order(module) != "enforced":
        return after, before
    by_device: dict[str, list[int]] = {}
    for u, node in enumerate(index.nodes):
        by_device.setdefault(node.device, []).append(u)
    for members in by_device.values():
        members.sort(key=lambda u: index.nodes[u].order)
        for a, b in zip(members, members[1:], strict=False):
            after.setdefault(a, []).append(b)
            before.setdefault(b, []).append(a)
    return after, before


def _check_sets(module, costs_before: dict[str, float]) -> None:
    """Every set on one device, convex (order chains included when enforced), contiguous when enforced, cheaper."""
    index = module.graph.index()
    position = {node: u for u, node in enumerate(index.nodes)}
    after, before = _order_edges(module)
    enforced = recorded_order(module) == "enforced"
    for name, members in _sets(module).items():
        assert len(members) >= 2, name
        assert len({m.device for m in members}) == 1, name
        ids = [position[m] for m in members]
        outside = (_reach(index, ids, True, after) & _reach(index, ids, False, before)) - set(ids)
        assert not outside, f"set {name} is not convex: {[index.nodes[u].name for u in outside]}"
        if enforced:
            orders = sorted(m.order for m in members)
            assert orders == list(range(orders[0], orders[0] + len(orders))), name
        kind = module.cluster.device(members[0].device).kind
        fused = sum(m.cost.time(kind) for m in members)
        assert fused < sum(costs_before[m.name] for m in members), name
        heads = [m for m in members if m.cost.time(kind) > 0]
        assert len(heads) == 1, name  # the whole set's cost on its head


@pytest.mark.parametrize(("seed", "placer"), [(0, "heft"), (1, "m-topo"), (2, "metis"), (3, "single")])
def test_sets_on_random_placed_graphs_are_convex_per_device_and_cheaper(seed: int, placer: str) -> None:
    module = random_module(seed, 80, "2xV100")
    Place.of(placer).run(module, PassContext(seed=seed))
    kind = module.cluster.devices[0].kind
    costs_before = {n.name: n.cost.time(kind) for n in module.graph.nodes}
    stats = FuseKernels().run(module, PassContext()).stats
    assert stats["sets"] == len(_sets(module)) > 0
    verify(module)
    _check_sets(module, costs_before)
    busy_before = sum(costs_before.values())
    busy_after = sum(n.cost.time(kind) for n in module.graph.nodes)
    assert busy_before - busy_after == pytest.approx(stats["saved-ms"] / 1e3, abs=1e-6)
    simulate(module)  # the added control edges and the orders do not deadlock


def test_dynamic_order_makes_larger_sets_than_the_enforced_order() -> None:
    enforced = random_module(5, 120, "2xV100")
    Place.of("heft").run(enforced, PassContext())
    dynamic = clone_module(enforced)
    kind = enforced.cluster.devices[0].kind
    costs_before = {n.name: n.cost.time(kind) for n in enforced.graph.nodes}
    fuse_kernels(enforced)
    stats = fuse_kernels(dynamic, "dynamic")
    assert recorded_order(dynamic) == "dynamic"
    verify(dynamic)
    _check_sets(dynamic, costs_before)
    assert stats["ops"] > sum(len(m) for m in _sets(enforced).values())
    simulate(dynamic)


def _training_step():
    module = parse_module(mlp_train(layers=3, batch=64, width=256, cluster="2xV100"))
    Profile().run(module, PassContext())
    return module


def test_sets_of_a_training_step_stay_within_one_copy_and_phase() -> None:
    module = _training_step()
    Place.of("single").run(module, PassContext())
    layout = training_layout(module)
    part = {
        node.name: (int(c), int(phase)) for node, c, phase in zip(layout.nodes, layout.copy, layout.phase, strict=True)
    }
    stats = fuse_kernels(module, "dynamic")
    assert stats["sets"] > 0
    for members in _sets(module).values():
        ops = [m for m in members if m.op not in ("tf.Const", "tf.ReadVariableOp")]
        assert len({part[m.name] for m in ops}) == 1, [m.name for m in members]


def test_parallelize_with_kernels_judges_fused_candidates() -> None:
    plain = parse_module(mlp_train(layers=4, batch=512, width=1024, cluster="4xV100"))
    Profile().run(plain, PassContext())
    fused = clone_module(plain)
    base = Parallelize(finalists=2).run(plain, PassContext()).stats
    stats = Parallelize(finalists=2, kernels="xla").run(fused, PassContext()).stats
    assert stats["chosen"] == base["chosen"] != "auto"  # a 4-stage pipeline of 4 micro-batches
    assert _sets(fused), "the winner keeps its kernel sets"
    assert not _sets(plain)
    sim = simulate(fused)
    assert sim.makespan * 1e3 == pytest.approx(float(stats["makespan-ms"]), abs=1e-3)
    # the same candidates are judged, each one's simulated step with its sets fused
    judged = [k for k, v in base.items() if k.startswith("cand.") and "sim " in str(v)]
    assert judged == [k for k, v in stats.items() if k.startswith("cand.") and "sim " in str(v)]
    assert float(stats["makespan-ms"]) < float(base["makespan-ms"])
    # no set spans two micro-batches or the forward and the backward
    layout = training_layout(fused)
    part = {
        node.name: (int(c), int(phase)) for node, c, phase in zip(layout.nodes, layout.copy, layout.phase, strict=True)
    }
    for members in _sets(fused).values():
        ops = [m for m in members if m.op not in ("tf.Const", "tf.ReadVariableOp")]
        assert len({part[m.name] for m in ops}) == 1, [m.name for m in members]


def test_errors_are_one_line() -> None:
    module = random_module(0, 10, "2xV100")
    with pytest.raises(PassError, match="needs a placed module"):
        fuse_kernels(module)
    Place.of("single").run(module, PassContext())
    fuse_kernels(module)
    with pytest.raises(PassError, match="already has 'kernel' sets"):
        fuse_kernels(module)
    with pytest.raises(ValueError, match="order must be one of recorded, dynamic"):
        FuseKernels(order="sometimes")
    with pytest.raises(ValueError, match="kernels must be one of none, xla"):
        Parallelize(kernels="tvm")


def test_a_set_is_kept_only_when_its_fused_cost_is_lower() -> None:
    # A reduction then one small op (enforced order: the constant stays out): two pieces plus the
    # cluster's own launch cost more than the two ops.
    text = """module @m {cluster = "1xV100", execution_order = "enforced"} {
  graph @main(%x : f32[64,64]) {
    %axis = tf.Const() {value = dense<i32[] = [1]>} : () -> i32[] [device = "gpu0", order = 0]
    %s = tf.Sum(%x, %axis) : (f32[64,64], i32[]) -> f32[64] [device = "gpu0", order = 1]
    %n = tf.Neg(%s) : (f32[64]) -> f32[64] [device = "gpu0", order = 2]
    return %n
  }
}
"""
    module = parse_module(text)
    Profile().run(module, PassContext())
    before = [n.cost for n in module.graph.nodes]
    stats = fuse_kernels(module)
    assert stats["sets"] == 0 and stats["dropped"] == 1
    assert [n.cost for n in module.graph.nodes] == before
    assert all(n.kernel is None for n in module.graph.nodes)
    assert np.isfinite(simulate(module).makespan)
