"""The data-parallel rewrite (passes/transform/replicate.py, ``data-parallel``, ``place{algo=data-parallel}``).

The training graphs are built by hand in the TF dialect, at any batch, exactly as the zoo's
GradientTape + Adam steps are shaped: placeholder, variable handles and reads, forward MatMul/Relu,
a loss, a gradient seed whose shape constant holds the batch, the backward pass, one
``ResourceApplyAdam`` per variable and an ``Identity`` output after the updates. The same builder at
batch ``G / n`` is the replica model (no TensorFlow needed).
"""

from __future__ import annotations

import networkx as nx
import pytest
from helpers import mlp_training_step, tf_tensor
from hypothesis import given, settings
from hypothesis import strategies as st

from graphir.attributes import DenseTensor
from graphir.driver import load_builtin_passes
from graphir.errors import PassError
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import DataParallel, data_parallel_devices
from graphir.passes.transform.replicate import data_parallel, replica_name, replica_of
from graphir.printer import print_module
from graphir.simulator import simulate
from graphir.verifier import verify


def _dp(batch: int, replicas: int, widths: tuple[int, ...] = (4, 3, 2)):
    module = mlp_training_step(batch, widths)
    replica = mlp_training_step(batch // replicas, widths)
    return module, data_parallel(module, replicas, replica=replica)


# --------------------------------------------------------------------------- golden


def test_golden_two_replicas_counts_and_shapes():
    module, result = _dp(8, 2)
    assert len(module.graph) == 25
    dp = result.module
    verify(dp)
    graph = dp.graph
    # 12 shared + 2 x 13 replicated + 3 x (AddN, Mul) aggregation nodes
    assert (len(result.shared), len(result.replicated)) == (12, 13)
    assert len(graph) == 12 + 2 * 13 + 6 == 44
    # edges: 2 x 17 in the replicas (reads of w0/w1 included), 2 reads + 2 x (5 operands + 1 control) into
    # the updates + 1 data and 2 control into the output, 3 x (2 into AddN + 1 into Mul) in the aggregation
    assert graph.index().num_edges == 2 * 17 + 2 + 2 * 6 + 3 + 3 * 3 == 60
    assert sorted(result.aggregated) == ["bwd0/dw", "bwd1/dw", "loss/sum"]
    assert sorted(result.sources) == ["x"]
    assert sorted(n.op for n in graph.nodes if n.name.startswith("dp/")) == ["tf.AddN"] * 3 + ["tf.Mul"] * 3
    assert (result.global_batch, result.replica_batch) == (8, 4)
    assert dp.metadata["data_parallel_replicas"] == 2
    # replica types at batch 4, gradients and shared reads keep their shapes
    assert graph.value("replica0/x").type == tf_tensor(4, 4)
    assert graph.value("replica1/fwd0/relu").type == tf_tensor(4, 3)
    assert graph.value("replica1/bwd0/dw").type == tf_tensor(4, 3)
    assert graph.value("dp/sum/bwd0/dw").type == tf_tensor(4, 3)
    assert graph.value("w0/read").type == tf_tensor(4, 3)
    # the batch baked into the seed's shape constant comes from the replica model
    shape_param = graph.node("replica1/grad/shape").params["value"]
    assert isinstance(shape_param, DenseTensor) and shape_param.numpy().tolist() == [4, 2]
    # each update takes the mean of the replicas' gradients; the output is the mean loss
    adam = graph.node("w0/adam")
    mean = adam.inputs[4].producer
    assert mean is not None and mean.op == "tf.Mul" and mean.name == "dp/mean/bwd0/dw"
    summed = mean.inputs[0].producer
    assert summed is not None and [v.name for v in summed.inputs] == ["replica0/bwd0/dw", "replica1/bwd0/dw"]
    assert float(mean.inputs[1].const.numpy()) == pytest.approx(0.5)  # type: ignore[union-attr]
    assert graph.outputs[0].producer is graph.node("out")
    assert graph.node("out").inputs[0].name == "dp/mean/loss/sum"
    # the read is shared by both replicas; the update still waits for it
    assert {u.name for u in graph.node("w0/read").successors} == {"replica0/fwd0/mm", "replica1/fwd0/mm"}
    assert graph.node("w0/read") in adam.control_inputs


def test_text_round_trip_of_the_replicated_graph():
    _, result = _dp(8, 2)
    text = print_module(result.module)
    assert print_module(parse_module(text)) == text


def test_four_replicas_and_batch_option():
    module = mlp_training_step(6)
    replica = mlp_training_step(3)
    result = data_parallel(module, 4, batch=12, replica=replica)
    assert (result.global_batch, result.replica_batch) == (12, 3)
    assert len(result.module.graph) == 12 + 4 * 13 + 6
    summed = result.module.graph.node("dp/sum/bwd1/dw")
    assert len(summed.inputs) == 4 and summed.params["N"] == 4


def test_one_replica_rebatches_without_aggregation():
    module = mlp_training_step(8)
    result = data_parallel(module, 1, batch=2, replica=mlp_training_step(2))
    graph = result.module.graph
    assert len(graph) == 25 and not result.aggregation_nodes
    assert graph.value("replica0/x").type == tf_tensor(2, 4)
    assert graph.node("w1/adam").inputs[4].name == "replica0/bwd1/dw"


def test_costs_scale_with_the_replica_batch_and_mem_is_recomputed():
    module = mlp_training_step(64, (256, 512, 128))
    Profile().run(module, PassContext())
    result = data_parallel(module, 2, replica=mlp_training_step(32, (256, 512, 128)))
    graph = result.module.graph
    whole = module.graph.node("fwd0/mm").cost.time("V100")  # type: ignore[union-attr]
    half = graph.node("replica0/fwd0/mm").cost.time("V100")  # type: ignore[union-attr]
    assert half is not None and whole is not None and half < whole
    # the analytical time of the replica's own shapes: profiling the new graph gives the same
    fresh = result.module
    Profile().run(fresh, PassContext())
    assert graph.node("replica1/fwd0/mm").cost.time("V100") == pytest.approx(half, rel=1e-9)  # type: ignore[union-attr]
    assert graph.node("dp/sum/bwd0/dw").cost is not None
    assert graph.node("replica0/fwd0/mm").mem.activation == 32 * 512 * 4  # type: ignore[union-attr]


def test_errors():
    module = mlp_training_step(8)
    with pytest.raises(PassError, match="not a multiple of 3 replicas"):
        data_parallel(module, 3, replica=module)
    with pytest.raises(PassError, match="replicas must be >= 1"):
        data_parallel(module, 0)
    other = mlp_training_step(4)
    other.graph.node("fwd0/relu").op = "tf.Relu6"
    with pytest.raises(PassError, match="different node .*'fwd0/relu'.*not the same model"):
        data_parallel(module, 2, replica=other)
    grouped = mlp_training_step(8)
    grouped.graph.node("fwd0/mm").group = 1
    with pytest.raises(PassError, match="fusion group"):
        data_parallel(grouped, 2, replica=mlp_training_step(4))
    with pytest.raises(PassError, match="not a data-parallel graph"):
        data_parallel_devices(module)
    with pytest.raises(ValueError, match=r"replicas must be >= 1 \(0: one per accelerator\), got -1"):
        DataParallel(replicas=-1)


def test_a_shared_node_that_depends_on_the_batch_is_refused():
    module = mlp_training_step(8)
    replica = mlp_training_step(4)
    # the output now also reads the batch-shaped seed, so the seed's producers cannot be replicated
    for m in (module, replica):
        m.graph.node("out").add_input(m.graph.value("grad/fill"))
    with pytest.raises(PassError, match="changes type with the batch"):
        data_parallel(module, 2, replica=replica)


def test_pass_uses_the_module_itself_when_the_replica_batch_is_its_own():
    load_builtin_passes()
    module = mlp_training_step(4)
    stats = DataParallel(replicas=2, batch=8).run(module, PassContext()).stats
    assert stats["replica-batch"] == 4 and stats["nodes"] == 44 and stats["aggregated-values"] == 3
    verify(module)


# --------------------------------------------------------------------------- the baseline placement


def test_baseline_placement_replica_per_device_variables_with_their_update():
    load_builtin_passes()
    module, result = _dp(16, 4, (64, 256, 32))
    dp = result.module
    Profile().run(dp, PassContext())
    mapping = data_parallel_devices(dp)
    for name, device in mapping.items():
        rep = replica_of(name)
        if rep >= 0:
            assert device == f"gpu{rep}"
    for k in range(2):
        homes = {mapping[n] for n in (f"w{k}/h", f"w{k}/read", f"w{k}/m", f"w{k}/v", f"w{k}/adam")}
        assert homes == {mapping[f"dp/sum/bwd{k}/dw"]} == {mapping[f"dp/mean/bwd{k}/dw"]}
    # the larger variable (64x256) and the smaller one (256x32) are spread over two devices
    assert mapping["w0/h"] != mapping["w1/h"]
    first = data_parallel_devices(dp, variables="first")
    assert first["w0/h"] == first["w1/h"] == "gpu0"
    Place(algo="data-parallel").run(dp, PassContext())
    verify(dp)
    sim = simulate(dp)
    assert sim.makespan > 0 and not sim.oom_devices
    assert {n.device for n in dp.graph.nodes if replica_of(n.name) == 2} == {"gpu2"}


def test_replica_names():
    assert replica_name("a/b", 3) == "replica3/a/b"
    assert replica_of("replica3/a/b") == 3
    assert replica_of("replicaX/a") == -1 and replica_of("w0/h") == -1 and replica_of("replica7") == -1


# --------------------------------------------------------------------------- properties


def _replica_digraph(module: Module, rep: int) -> nx.DiGraph:
    graph = nx.DiGraph()
    prefix = replica_name("", rep)
    for node in module.graph.nodes:
        if replica_of(node.name) != rep:
            continue
        graph.add_node(node.name[len(prefix) :], op=node.op, types=tuple(str(v.type) for v in node.outputs))
        for producer in node.predecessors:
            if replica_of(producer.name) == rep:
                graph.add_edge(producer.name[len(prefix) :], node.name[len(prefix) :])
    return graph


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(min_value=1, max_value=4),
    width=st.integers(min_value=1, max_value=6),
    replicas=st.integers(min_value=1, max_value=5),
    per_replica=st.integers(min_value=1, max_value=4),
)
def test_property_valid_dag_and_isomorphic_replicas(layers: int, width: int, replicas: int, per_replica: int):
    widths = tuple(width + k for k in range(layers + 1))
    batch = replicas * per_replica
    module = mlp_training_step(batch, widths)
    result = data_parallel(module, replicas, replica=mlp_training_step(per_replica, widths))
    dp = result.module
    verify(dp)  # use lists, acyclicity, types
    assert nx.is_directed_acyclic_graph(
        nx.DiGraph([(p.name, n.name) for n in dp.graph.nodes for p in (*n.predecessors, *n.control_inputs)])
    )
    reference = _replica_digraph(dp, 0)
    assert reference.number_of_nodes() == len(result.replicated)
    for rep in range(1, replicas):
        other = _replica_digraph(dp, rep)
        assert nx.utils.graphs_equal(reference, other)  # same names up to the prefix: the identity is an isomorphism
        assert nx.is_isomorphic(reference, other, node_match=lambda a, b: a == b)
    # one aggregation per variable gradient plus the loss; every update reads an aggregated gradient
    assert len(result.aggregated) == (layers + 1 if replicas > 1 else 0)
    for node in dp.graph.nodes:
        if node.op == "tf.ResourceApplyAdam":
            producer = node.inputs[4].producer
            assert producer is not None
            assert producer.name.startswith("dp/mean/" if replicas > 1 else "replica0/")
    # replicas share nothing but the variables: no edge between two replicas, and with several replicas
    # only the aggregation reads what a replica computes
    for node in dp.graph.nodes:
        rep = replica_of(node.name)
        for producer in (*node.predecessors, *node.control_inputs):
            source = replica_of(producer.name)
            assert source in (-1, rep) or rep == -1
            if rep == -1 and source >= 0 and replicas > 1:
                assert node.name.startswith("dp/sum/")
    assert len(dp.graph) == len(result.shared) + replicas * len(result.replicated) + len(result.aggregation_nodes)
