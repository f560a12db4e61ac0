"""Mirrored variables and the ring all-reduce, ``data-parallel{sync=allreduce}`` (replicate.py, step 6).

The structure is worked by hand on the MLP training step of helpers.py (weights ``w0`` 4x3 and
``w1`` 3x2) with three replicas; the simulator's view (the pipeline placer puts each mirror on its
replica and pure data parallelism runs under the executor's order). The numbers on TensorFlow (one
step of a small CNN, every mirror of every variable equal to the single-device step's) are in
test_microbatch.py, beside the other training-step proofs.
"""

from __future__ import annotations

import pytest
from helpers import mlp_training_step

from graphir.copies import mirror_name, mirror_of, original_name
from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.place import Place
from graphir.passes.transform.data_parallel import DataParallel, data_parallel_devices
from graphir.passes.transform.replicate import data_parallel
from graphir.pipeline import parse_pipeline
from graphir.printer import print_module
from graphir.simulator import recorded_order
from graphir.types import DType, TensorType
from graphir.verifier import verify


def _t(*shape: int) -> TensorType:
    return TensorType(DType.F32, tuple(shape))


def _inputs(node) -> list[str]:
    return [v.name for v in node.inputs]


def test_mirror_names():
    assert mirror_name("w0/h", 2) == "mirror2/w0/h"
    assert mirror_of("mirror2/w0/h") == (2, "w0/h")
    assert mirror_of("mirrorx/w") == (-1, "mirrorx/w") and mirror_of("w0/h") == (-1, "w0/h")
    assert original_name("mirror1/w0/adam") == "w0/adam"
    assert original_name("replica1/mb0/fwd0/mm") == "fwd0/mm"


def test_ring_allreduce_by_hand():
    """Three replicas; w0's gradient (4 x 3) is cut along axis 0 into rows 2, 1, 1; w1's (3 x 2) into 1, 1, 1.

    Reduce-scatter step s: replica r sends its partial sum of chunk (r - s) mod 3 to replica r + 1,
    which adds its own part. Step 0: 0 -> 1 chunk 0, 1 -> 2 chunk 1, 2 -> 0 chunk 2. Step 1: 0 -> 1
    chunk 2 (what 0 got at step 0), 1 -> 2 chunk 0, 2 -> 0 chunk 1. So replica 0 ends with chunk 1
    whole, replica 1 with chunk 2, replica 2 with chunk 0 (replica q: chunk q + 1). All-gather step
    s: replica q passes chunk (q + 1 - s) mod 3 to q + 1: step 0: 0 -> 1 chunk 1, 1 -> 2 chunk 2,
    2 -> 0 chunk 0; step 1: 0 -> 1 chunk 0, 1 -> 2 chunk 1, 2 -> 0 chunk 2.
    """
    module = mlp_training_step(6)
    result = data_parallel(module, 3, sync="allreduce", bucket_bytes=0)
    graph = result.module.graph
    verify(result.module)
    ring = "dp/ring/bwd0/dw"
    split = graph.node(f"mirror1/{ring}/split")
    assert split.op == "graphir.split" and split.params["axis"] == 0
    assert _inputs(split) == ["replica1/bwd0/dw"]
    assert [v.type for v in split.outputs] == [_t(2, 3), _t(1, 3), _t(1, 3)]
    part = f"{ring}/split"
    # reduce-scatter, step 0: the receiver adds its own part to what its left neighbour sent
    assert _inputs(graph.node(f"mirror1/{ring}/rs0_0")) == [f"mirror0/{part}_0", f"mirror1/{part}_0"]
    assert _inputs(graph.node(f"mirror2/{ring}/rs0_1")) == [f"mirror1/{part}_1", f"mirror2/{part}_1"]
    assert _inputs(graph.node(f"mirror0/{ring}/rs0_2")) == [f"mirror2/{part}_2", f"mirror0/{part}_2"]
    # step 1: the partial sums travel on
    assert _inputs(graph.node(f"mirror1/{ring}/rs1_2")) == [f"mirror0/{ring}/rs0_2", f"mirror1/{part}_2"]
    assert _inputs(graph.node(f"mirror2/{ring}/rs1_0")) == [f"mirror1/{ring}/rs0_0", f"mirror2/{part}_0"]
    assert _inputs(graph.node(f"mirror0/{ring}/rs1_1")) == [f"mirror2/{ring}/rs0_1", f"mirror0/{part}_1"]
    # the owner of a whole chunk scales it by 1/3, once: replica q its chunk q + 1
    mean = "dp/mean/bwd0/dw"
    assert _inputs(graph.node(f"mirror0/{mean}/1")) == [f"mirror0/{ring}/rs1_1", "dp/inv_replicas_f32"]
    assert _inputs(graph.node(f"mirror1/{mean}/2")) == [f"mirror1/{ring}/rs1_2", "dp/inv_replicas_f32"]
    assert _inputs(graph.node(f"mirror2/{mean}/0")) == [f"mirror2/{ring}/rs1_0", "dp/inv_replicas_f32"]
    assert float(graph.node(f"mirror2/{mean}/0").inputs[1].const.numpy()) == pytest.approx(1 / 3)  # type: ignore[union-attr]
    # all-gather: whole scaled chunks pass on around the ring
    assert _inputs(graph.node(f"mirror1/{ring}/ag0_1")) == [f"mirror0/{mean}/1"]
    assert _inputs(graph.node(f"mirror2/{ring}/ag0_2")) == [f"mirror1/{mean}/2"]
    assert _inputs(graph.node(f"mirror0/{ring}/ag0_0")) == [f"mirror2/{mean}/0"]
    assert _inputs(graph.node(f"mirror1/{ring}/ag1_0")) == [f"mirror0/{ring}/ag0_0"]
    assert _inputs(graph.node(f"mirror2/{ring}/ag1_1")) == [f"mirror1/{ring}/ag0_1"]
    assert _inputs(graph.node(f"mirror0/{ring}/ag1_2")) == [f"mirror2/{ring}/ag0_2"]
    # each replica joins chunks 0, 1, 2 in order into its own update
    assert _inputs(graph.node(f"mirror0/{ring}/concat")) == [
        f"mirror0/{ring}/ag0_0",
        f"mirror0/{mean}/1",
        f"mirror0/{ring}/ag1_2",
    ]
    assert _inputs(graph.node(f"mirror2/{ring}/concat")) == [
        f"mirror2/{mean}/0",
        f"mirror2/{ring}/ag1_1",
        f"mirror2/{ring}/ag0_2",
    ]
    adam = graph.node("mirror2/w0/adam")
    assert _inputs(adam)[:3] == ["mirror2/w0/h", "mirror2/w0/m", "mirror2/w0/v"]
    assert _inputs(adam)[-1] == f"mirror2/{ring}/concat"
    # every replica reads its own weights
    assert _inputs(graph.node("replica2/fwd0/mm"))[1] == "mirror2/w0/read"
    # per gradient: 3 splits, 2 x 3 adds, 2 x 3 hops, 3 concats under the ring's name; 3 means
    assert sum(1 for n in graph.nodes if n.name.split("/", 1)[-1].startswith(ring)) == 3 + 6 + 6 + 3
    assert sum(1 for n in graph.nodes if n.name.split("/", 1)[-1].startswith(mean)) == 3
    text = print_module(result.module)
    assert print_module(parse_module(text)) == text


def test_small_gradients_and_microbatches():
    """A gradient with no axis of D elements is summed by every replica; micro-batches are summed first."""
    module = mlp_training_step(8, widths=(4, 3, 2))
    result = data_parallel(module, 4, microbatches=2, sync="allreduce", bucket_bytes=0)
    graph = result.module.graph
    verify(result.module)
    # w1's gradient is 3 x 2: too small to cut in 4; each replica adds the 4 replicas' local sums
    summed = graph.node("mirror3/dp/sum/bwd1/dw")
    assert summed.op == "tf.AddN" and _inputs(summed) == [f"mirror{r}/dp/local/bwd1/dw" for r in range(4)]
    assert _inputs(graph.node("mirror3/dp/local/bwd1/dw")) == ["replica3/mb0/bwd1/dw", "replica3/mb1/bwd1/dw"]
    mean = graph.node("mirror3/dp/mean/bwd1/dw")
    assert float(mean.inputs[1].const.numpy()) == pytest.approx(1 / 8)  # type: ignore[union-attr]
    # w0's gradient is 4 x 3: four chunks of one row
    assert [v.type for v in graph.node("mirror0/dp/ring/bwd0/dw/split").outputs] == [_t(1, 3)] * 4


def test_buckets_join_the_gradients_in_the_order_the_backward_pass_makes_them():
    """Widths 4-3-2-5: the loss (4 B), then the gradients w2 (2x5, 40 B), w1 (3x2, 24 B), w0 (4x3, 48 B).

    With 64-byte buckets: loss + w2 = 44 B, + w1 = 68 B closes bucket 0; w0 opens bucket 1 and is
    alone in it, so it keeps its own ring. Bucket 0 laid end to end: loss [0, 1), w2 [1, 11), w1
    [11, 17); the two-replica ring's chunks are [0, 9) and [9, 17). So w2 is cut at 9 into 8 + 2;
    chunk 0 joins the loss and w2's first 8, chunk 1 w2's last 2 and w1. Replica 1 ends the
    reduce-scatter owning chunk 0 and scales it, replica 0 chunk 1; after the all-gather each
    replica cuts both back: chunk 0 into 1 + 8, chunk 1 into 2 + 6; w2
    is joined from 8 + 2 and reshaped to 2x5, w1 is chunk 1's last 6 reshaped to 3x2.
    """
    module = mlp_training_step(8, widths=(4, 3, 2, 5))
    result = data_parallel(module, 2, sync="allreduce", bucket_bytes=64)
    graph = result.module.graph
    verify(result.module)
    b = "mirror1/dp/bucket0"
    assert _inputs(graph.node(f"{b}/flat/bwd2/dw")) == ["replica1/bwd2/dw", "dp/shape_-1"]
    piece = graph.node(f"{b}/piece/bwd2/dw")
    assert _inputs(piece) == [f"{b}/flat/bwd2/dw"] and [v.type for v in piece.outputs] == [_t(8), _t(2)]
    chunk0, chunk1 = graph.node(f"{b}/chunk0"), graph.node(f"{b}/chunk1")
    assert _inputs(chunk0) == [f"{b}/flat/loss/sum", f"{b}/piece/bwd2/dw_0"] and chunk0.outputs[0].type == _t(9)
    assert _inputs(chunk1) == [f"{b}/piece/bwd2/dw_1", f"{b}/flat/bwd1/dw"] and chunk1.outputs[0].type == _t(8)
    # the ring runs on the chunks: replica 1 adds replica 0's chunk 0 to its own (step 0)
    assert _inputs(graph.node("mirror1/dp/ring/bucket0/rs0_0")) == ["mirror0/dp/bucket0/chunk0", f"{b}/chunk0"]
    mean0 = graph.node("mirror1/dp/mean/bucket0/0")
    assert float(mean0.inputs[1].const.numpy()) == pytest.approx(0.5)  # type: ignore[union-attr]
    assert _inputs(mean0)[0] == "mirror1/dp/ring/bucket0/rs0_0"
    cut0, cut1 = graph.node(f"{b}/cut0"), graph.node(f"{b}/cut1")
    assert _inputs(cut0) == ["mirror1/dp/mean/bucket0/0"] and _inputs(cut1) == ["mirror1/dp/ring/bucket0/ag0_1"]
    assert _inputs(graph.node("mirror1/dp/ring/bucket0/ag0_1")) == ["mirror0/dp/mean/bucket0/1"]
    assert [v.type for v in cut0.outputs] == [_t(1), _t(8)] and [v.type for v in cut1.outputs] == [_t(2), _t(6)]
    whole = graph.node(f"{b}/whole/bwd2/dw")
    assert _inputs(whole) == [f"{b}/cut0_1", f"{b}/cut1_0"] and whole.outputs[0].type == _t(10)
    back = graph.node(f"{b}/shape/bwd1/dw")
    assert _inputs(back) == [f"{b}/cut1_1", "dp/shape_3x2"] and back.outputs[0].type == _t(3, 2)
    assert _inputs(graph.node("mirror1/w1/adam"))[-1] == f"{b}/shape/bwd1/dw"
    assert _inputs(graph.node("mirror1/w2/adam"))[-1] == f"{b}/shape/bwd2/dw"
    assert _inputs(graph.node("mirror1/w0/adam"))[-1] == "mirror1/dp/ring/bwd0/dw/concat"  # its own ring
    assert graph.get_node("mirror0/dp/ring/bwd0/dw/split") is not None
    text = print_module(result.module)
    assert print_module(parse_module(text)) == text


def test_mirrors_go_to_their_replica_and_plain_data_parallelism_runs_dynamic():
    module = mlp_training_step(8)
    module.cluster_spec = "4xV100"
    PassManager(parse_pipeline("profile,data-parallel{replicas=4 sync=allreduce}")).run(module, PassContext())
    devices = data_parallel_devices(module)
    for name, device in devices.items():
        r = mirror_of(name)[0]
        if r >= 0:
            assert device == f"gpu{r}", (name, device)
    # the variables' handles: one per replica, each its own variable
    handles = sorted(n.name for n in module.graph.nodes if n.op == "tf.VarHandleOp" and original_name(n.name) == "w0/h")
    assert handles == [f"mirror{r}/w0/h" for r in range(4)]
    Place.of("pipeline", stages=1).run(module, PassContext())
    placed = {n.name: n.device for n in module.graph.nodes}
    assert all(placed[name] == f"gpu{mirror_of(name)[0]}" for name in placed if mirror_of(name)[0] >= 0)
    assert placed["mirror1/dp/ring/bucket0/rs0_0"] == "gpu1"  # the step's gradients fill one bucket
    assert recorded_order(module) == "dynamic"


def test_sync_errors():
    with pytest.raises(PassError, match="sync must be one of ps|allreduce, got 'ring'"):
        data_parallel(mlp_training_step(8), 2, sync="ring")
    with pytest.raises(ValueError, match="sync must be one of"):
        DataParallel(replicas=2, sync="ring")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bucket-mib must be >= 0"):
        DataParallel(replicas=2, sync="allreduce", bucket_mib=-1)


@pytest.mark.parametrize(("option", "rings"), [("", {"bucket0"}), (" bucket-mib=0", {"bwd0", "bwd1"})])
def test_the_bucket_option_of_the_pass(option: str, rings: set[str]):
    """The MLP's two gradients share the default 25 MiB bucket; ``bucket-mib=0``: one ring per gradient."""
    module = mlp_training_step(8)
    module.cluster_spec = "4xV100"
    pipeline = f"profile,data-parallel{{replicas=2 sync=allreduce{option}}}"
    PassManager(parse_pipeline(pipeline)).run(module, PassContext())
    found = {n.name.split("/")[3] for n in module.graph.nodes if n.name.startswith("mirror0/dp/ring/")}
    assert found == rings


def test_ring_order_keeps_every_hop_on_a_double_nvlink_of_the_dgx1():
    """FastT's DGX-1: in cluster order hops 3 -> 4 and 7 -> 0 have no NVLink (staged through the host).

    The ring 0-3-2-1-5-6-7-4 uses only pairs with two NVLink bricks (the preset's ``NV2`` pairs:
    0-3, 2-3, 1-2, 1-5, 5-6, 6-7, 4-7, 0-4), the fastest ring there is; on celeritas' PCIe tree the
    cluster order already crosses the sockets only twice.
    """
    from graphir.cluster import resolve_cluster
    from graphir.cluster_presets import _DGX1_NVLINKS
    from graphir.links import LinkModel
    from graphir.passes.place.pipeline import accelerators, ring_order

    fastt = resolve_cluster("fastt")
    ring = ring_order(accelerators(fastt), LinkModel.from_cluster(fastt, "topology"))
    assert ring == [0, 3, 2, 1, 5, 6, 7, 4]
    assert all(_DGX1_NVLINKS[tuple(sorted((a, ring[(k + 1) % 8])))] == 2 for k, a in enumerate(ring))
    celeritas = resolve_cluster("celeritas")
    assert ring_order(accelerators(celeritas), LinkModel.from_cluster(celeritas, "topology")) == [0, 1, 2, 3]


def test_zero_replicas_means_one_per_accelerator():
    module = mlp_training_step(8)
    module.cluster_spec = "4xV100"
    stats = DataParallel(replicas=0, sync="allreduce").run(module, PassContext()).stats
    assert stats["replicas"] == 4 and stats["replica-batch"] == 2
