"""Gradient pairing (:mod:`graphir.passes.place.pairing`) and the stage placer (:mod:`graphir.passes.place.stages`).

On the hand-built two-layer MLP step of ``test_training_structure`` and on a traced 2-layer GPT step.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import MLP

from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.place.pairing import pair_gradients
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.place.stages import layer_crossings, stage_partition
from graphir.passes.training import BACKWARD, OPTIMIZER, training_structure
from graphir.pipeline import parse_pipeline


def _profiled(text: str) -> object:
    module = parse_module(text)
    PassManager(parse_pipeline("profile")).run(module, PassContext(seed=0))
    return module


def test_pairing_colocates_every_gradient_with_its_forward_op() -> None:
    """On the unfused MLP step: each anchored node shares its forward op's class; forward ops of two layers do not."""
    module = _profiled(MLP)
    problem = PlacementProblem.from_module(module, training=True)
    paired, stats = pair_gradients(problem)
    assert stats["pairs"] > 0 and stats["pairs-skipped"] == 0
    names = list(problem.fine.node_names)
    cls = {name: int(paired.colocation[problem.node_group[u]]) for u, name in enumerate(names)}
    assert cls["G/d1/MatMul/MatMul_1"] == cls["d1/MatMul"] == cls["adam/apply1"] == cls["w1h"] == cls["m1"] >= 0
    assert cls["G/d0/MatMul/MatMul_1"] == cls["d0/MatMul"] == cls["adam/apply0"] == cls["G/d0/MatMul/Reshape"]
    assert cls["d0/MatMul"] != cls["d1/MatMul"]
    # without training structure: unchanged
    assert pair_gradients(PlacementProblem.from_module(module))[0].colocation.tolist() == problem.colocation.tolist()


def test_place_with_colocated_gradients_keeps_pairs_on_one_device() -> None:
    """place{algo=m-etf gradients=colocate}: every gradient on its forward op's device."""
    module = _profiled(MLP)
    PassManager(parse_pipeline("place{algo=m-etf gradients=colocate}")).run(module, PassContext(seed=0))
    structure = training_structure(module)
    assert structure is not None
    device = [node.device for node in structure.nodes]
    for u, a in enumerate(structure.anchor.tolist()):
        if a >= 0:
            assert device[u] == device[a], structure.nodes[u].name


def test_stage_partition_of_the_mlp_step() -> None:
    """Three layers (d0, d1, loss) on two stages: contiguous, each layer's nodes with it, every node staged."""
    module = _profiled(MLP)
    plan = stage_partition(module, 2)
    assert plan.stage_of_layer in ([0, 0, 1], [0, 1, 1])
    assert plan.fits and len(plan.stage_time) == 2 and all(t > 0 for t in plan.stage_time)
    structure = training_structure(module)
    assert structure is not None
    stage = plan.node_stage
    assert (stage >= 0).all() and (stage <= 1).all()
    for u, layer in enumerate(structure.layer.tolist()):
        if layer >= 0 and structure.nodes[u].colocate is None:
            assert stage[u] == plan.stage_of_layer[layer], structure.nodes[u].name
    with pytest.raises(PassError, match="2 activation copies given for 1 stages"):
        stage_partition(module, 1, activation_copies=[1, 2])


def test_stage_partition_memory_is_a_hard_limit() -> None:
    """More activation copies raise a stage's estimate; past the device's memory the plan says it does not fit."""
    module = _profiled(MLP)
    one = stage_partition(module, 2)
    many = stage_partition(module, 2, activation_copies=[1000.0, 1.0])
    assert many.stage_bytes[0] > one.stage_bytes[0]
    huge = stage_partition(module, 2, activation_copies=[1e9, 1e9])
    assert not huge.fits


def test_not_a_training_graph_is_one_line() -> None:
    """place{algo=stages} on an inference graph: a PassError naming the need."""
    lines = [line for line in MLP.splitlines() if "tf.ResourceApplyAdam" not in line]
    module = _profiled("\n".join(lines).replace("ctrl(@adam/apply0, @adam/apply1) ", ""))
    with pytest.raises(PassError, match="needs a training graph"):
        PassManager(parse_pipeline("place{algo=stages}")).run(module, PassContext(seed=0))


def test_traced_gpt_stages_and_auto(tiny_gpt_step) -> None:
    """A 2-layer GPT step on 4 devices: stages contiguous and balanced-ish; auto places it and fits."""
    from graphir.clone import clone_module

    module = clone_module(tiny_gpt_step)
    module.cluster_spec = "4xV100"
    PassManager(parse_pipeline("profile")).run(module, PassContext(seed=0))
    plan = stage_partition(module, 4)
    assert plan.stage_of_layer == sorted(plan.stage_of_layer) and set(plan.stage_of_layer) == {0, 1, 2, 3}
    structure = training_structure(module)
    assert structure is not None
    # every gradient and update runs on its forward op's stage (the shared beta-power reads, STATE in
    # one colocation class with their variable, go where the class goes)
    paired = np.flatnonzero(np.isin(structure.role, (BACKWARD, OPTIMIZER)))
    assert len(paired) > 100
    assert (plan.node_stage[paired] == plan.node_stage[structure.anchor[paired]]).all()
    PassManager(parse_pipeline("fuse,place,simulate")).run(module, PassContext(seed=0))
    assert all(node.device for node in module.graph.nodes)


def _full_dp(time, persistent, saved, working, comm, copies, capacity, memory_first):  # noqa: ANN001, ANN202
    """PipeDream's DP with every cell computed (the first stage too; every j of the last): the reference."""
    num_layers, stages = time.shape
    prefix_time = np.vstack([np.zeros(stages), np.cumsum(time, axis=0)])
    prefix_persistent = np.concatenate([[0.0], np.cumsum(persistent)])
    prefix_saved = np.concatenate([[0.0], np.cumsum(saved)])
    best = np.full((stages, num_layers + 1), np.inf)
    choice = np.full((stages, num_layers + 1), -1, dtype=np.int64)
    for s in range(stages):
        for j in range(s + 1, num_layers - (stages - 1 - s) + 1):
            i = np.arange(s, j)
            stage_time = prefix_time[j, s] - prefix_time[i, s]
            peak = np.maximum.accumulate(working[i[::-1]])[::-1]
            need = prefix_persistent[j] - prefix_persistent[i] + copies[s] * (prefix_saved[j] - prefix_saved[i]) + peak
            cost = need / capacity[s] if memory_first else np.where(need <= capacity[s], stage_time, np.inf)
            if s > 0:
                link = 0.0 if memory_first else comm[s, i]
                cost = np.maximum(np.maximum(best[s - 1, i], link), cost)
            else:
                cost = np.where(i == 0, cost, np.inf)
            k = int(np.argmin(cost))
            best[s, j] = cost[k]
            choice[s, j] = int(i[k])
    if not np.isfinite(best[stages - 1, num_layers]):
        return None
    starts, j = [0] * stages, num_layers
    for s in range(stages - 1, -1, -1):
        starts[s] = int(choice[s, j])
        j = starts[s]
    return starts


@pytest.mark.parametrize("seed", range(4))
def test_split_layers_equals_the_full_dynamic_programme(seed: int) -> None:
    """The first stage in one vector and one cell of the last: the same splits as every cell computed.

    Small integer times and bytes make ties and splits that do not fit common.
    """
    from graphir.passes.place.stages import split_layers

    rng = np.random.default_rng(seed)
    outcomes = set()
    for trial in range(150):
        layers, stages = int(rng.integers(1, 25)), int(rng.integers(1, 6))
        time = rng.integers(0, 3, (layers, stages)).astype(float) if trial % 2 else rng.random((layers, stages))
        persistent, saved, working = (rng.integers(0, 5, layers).astype(float) for _ in range(3))
        comm = rng.integers(0, 3, (stages, layers + 1)) * 0.5
        copies = rng.integers(1, 4, stages).astype(float).tolist()
        capacity = rng.integers(3, 40, stages).astype(float).tolist()
        memory_first = trial % 5 == 0
        expected = _full_dp(time, persistent, saved, working, comm, copies, capacity, memory_first)
        got = split_layers(
            time, persistent, saved, working, comm=comm, copies=copies, capacity=capacity, memory_first=memory_first
        )
        assert got == expected
        outcomes.add(got is None)
    assert outcomes == {True, False}  # both fitting and refused splits were compared


def test_layer_crossings_worked_by_hand() -> None:
    """Bytes over boundaries of 4 layers: PipeDream's cut once per (value, reading layer); sends once per value.

    Nodes 0..4 in layers 0, 1, 3, 2, 0. Value 0 (8 bytes, made by node 0 in layer 0) is read by nodes 1
    (layer 1), 2 and 2 again (layer 3: one reading layer) and 4 (layer 0: not a crossing); value 1 (2 bytes,
    made by node 3 in layer 2) is read by node 4 in layer 0. Pairs: (0, 1), (0, 3), (1, 0).
    cut: 0|1 carries 8 + 8 + 2, 1|2 carries 8 + 2, 2|3 carries 8. Sent forward: value 0 to layer 3, 8 on
    each boundary; back: value 1 from layer 2 to 0, 2 on 0|1 and 1|2.
    """
    layer = np.array([0, 1, 3, 2, 0])
    src = np.array([0, 0, 0, 0, 3])
    dst = np.array([1, 2, 2, 4, 4])
    value = np.array([0, 0, 0, 0, 1])
    crossings = layer_crossings(src, dst, value, layer, 4)
    assert list(zip(crossings.value.tolist(), crossings.producer.tolist(), crossings.reader.tolist(), strict=True)) == [
        (0, 0, 1),
        (0, 0, 3),
        (1, 2, 0),
    ]
    nbytes = np.array([8.0, 2.0])
    assert crossings.cut(nbytes).tolist() == [18.0, 10.0, 8.0]
    forward, back = crossings.sent(nbytes)
    assert forward.tolist() == [8.0, 8.0, 8.0]
    assert back.tolist() == [2.0, 2.0, 0.0]
