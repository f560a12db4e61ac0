"""Re-batching in the IR (passes/transform/rebatch.py, batch_rules.py).

Hand-built graphs check the rules and the refusals without TensorFlow; the zoo's training steps
(a tiny GPT and a tiny CNN, traced by the zoo's own builder at two batches in a subprocess) check
that the IR's re-batched module equals, type for type and constant for constant, what TensorFlow's
re-tracing at the new batch gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import mlp_training_step, tf_tensor

from graphir.attributes import DenseTensor
from graphir.errors import PassError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.profile import Profile
from graphir.passes.transform.rebatch import rebatch
from graphir.passes.transform.replicate import data_parallel
from graphir.printer import print_module
from graphir.types import DType
from graphir.verifier import verify

F32, I32 = DType.F32, DType.I32


def _const(graph: Graph, name: str, array: np.ndarray):
    tensor = DenseTensor.from_numpy(array)
    return graph.add_node(
        "tf.Const", [], [tensor.type], name=name, params={"dtype": tensor.type.dtype.short, "value": tensor}
    ).outputs[0]


def _value(module: Module, name: str) -> list:
    return module.graph.node(name).params["value"].numpy().tolist()  # type: ignore[union-attr]


def test_mlp_rebatched_prints_exactly_as_built_at_the_new_batch():
    for old, new in ((8, 4), (8, 2), (6, 9), (4, 12)):
        got = rebatch(mlp_training_step(old), new)
        verify(got)
        assert print_module(got) == print_module(mlp_training_step(new))


def _baked(batch: int, seq: int = 3, width: int = 4, same_samples: bool = False) -> Module:
    """A forward + loss graph with the batch baked in: Reshape targets, a Fill seed, the mean divisor, a mask."""
    g = Graph("main")
    x = g.add_node(
        "tf.Placeholder", [], [tf_tensor(batch, seq, width)], name="x", params={"shape": (batch, seq, width)}
    )
    flat = g.add_node(
        "tf.Reshape",
        [x.outputs[0], _const(g, "flat/shape", np.asarray([batch * seq, width], np.int32))],
        [tf_tensor(batch * seq, width)],
        name="flat",
    )
    data = np.arange(batch * seq * width, dtype=np.float32).reshape(batch, seq * width)
    if same_samples:
        data = np.broadcast_to(data[:1], data.shape)
    mask = _const(g, "mask", np.ascontiguousarray(data).reshape(batch * seq, width))
    masked = g.add_node("tf.Mul", [flat.outputs[0], mask], [tf_tensor(batch * seq, width)], name="masked")
    back = g.add_node(
        "tf.Reshape",
        [masked.outputs[0], _const(g, "back/shape", np.asarray([batch, seq * width], np.int32))],
        [tf_tensor(batch, seq * width)],
        name="back",
    )
    ones = g.add_node(
        "tf.Fill",
        [_const(g, "seed/dims", np.asarray([batch, seq * width], np.int32)), _const(g, "one", np.float32(1))],
        [tf_tensor(batch, seq * width)],
        name="seed",
    )
    prod = g.add_node("tf.Mul", [back.outputs[0], ones.outputs[0]], [tf_tensor(batch, seq * width)], name="prod")
    total = g.add_node(
        "tf.Sum", [prod.outputs[0], _const(g, "axes", np.asarray([0, 1], np.int32))], [tf_tensor()], name="total"
    )
    count = g.add_node(
        "tf.Prod",
        [
            _const(g, "count/shape", np.asarray([batch, seq * width], np.int32)),
            _const(g, "count/axis", np.asarray([0], np.int32)),
        ],
        [tf_tensor(dtype=I32)],
        name="count",
    )
    divisor = g.add_node("tf.Cast", [count.outputs[0]], [tf_tensor()], name="divisor", params={"DstT": "f32"})
    mean = g.add_node("tf.RealDiv", [total.outputs[0], divisor.outputs[0]], [tf_tensor()], name="mean")
    g.set_outputs([mean.outputs[0]])
    return Module("baked", g)


def test_baked_constants_are_rewritten():
    got = rebatch(_baked(8), 2)
    verify(got)
    assert got.graph.value("x").type == tf_tensor(2, 3, 4)
    assert got.graph.node("x").params["shape"] == (2, 3, 4)
    assert _value(got, "flat/shape") == [6, 4]
    assert _value(got, "back/shape") == [2, 12]
    assert _value(got, "seed/dims") == [2, 12]
    assert _value(got, "count/shape") == [2, 12]  # the loss divisor, proven through Cast and Prod
    assert _value(got, "axes") == [0, 1] and _value(got, "count/axis") == [0]
    assert _value(got, "mask") == np.arange(24, dtype=np.float32).reshape(6, 4).tolist()  # the first 2 samples
    assert got.graph.value("mean").type == tf_tensor()
    # the input module is unchanged
    assert _baked(8).graph.value("flat").type == tf_tensor(24, 4)


def test_a_batch_hidden_in_a_merged_dimension_is_found_where_it_is():
    """``[S, B, D] -> [S*B, D] -> [S, B, D]``: the batch is the inner factor of the merged axis."""
    g = Graph("main")
    x = g.add_node("tf.Placeholder", [], [tf_tensor(4, 3, 5)], name="x")
    t = g.add_node(
        "tf.Transpose",
        [x.outputs[0], _const(g, "perm", np.asarray([1, 0, 2], np.int32))],
        [tf_tensor(3, 4, 5)],
        name="t",
    )
    m = g.add_node(
        "tf.Reshape", [t.outputs[0], _const(g, "m/s", np.asarray([12, 5], np.int32))], [tf_tensor(12, 5)], name="m"
    )
    s = g.add_node(
        "tf.Reshape",
        [m.outputs[0], _const(g, "s/s", np.asarray([3, 4, 5], np.int32))],
        [tf_tensor(3, 4, 5)],
        name="s",
    )
    g.set_outputs([s.outputs[0]])
    got = rebatch(Module("m", g), 2)
    assert _value(got, "m/s") == [6, 5] and _value(got, "s/s") == [3, 2, 5]
    assert got.graph.value("s").type == tf_tensor(3, 2, 5)


def test_refusals_name_the_node():
    g = Graph("main")
    x = g.add_node("tf.Placeholder", [], [tf_tensor(4, 6)], name="x")
    g.add_node(
        "tf.Reshape", [x.outputs[0], _const(g, "r/s", np.asarray([2, 12], np.int32))], [tf_tensor(2, 12)], name="r"
    )
    with pytest.raises(PassError, match="node 'r' \\(tf.Reshape\\).*disagree on where the batch"):
        rebatch(Module("m", g), 2)

    g = Graph("main")
    x = g.add_node("tf.Placeholder", [], [tf_tensor(4, 6)], name="x")
    g.add_node("tf.MysteryOp", [x.outputs[0]], [tf_tensor(4, 6)], name="mystery")
    with pytest.raises(PassError, match="node 'mystery' \\(tf.MysteryOp\\) has no batch rule"):
        rebatch(Module("m", g), 2)

    g = Graph("main")
    x = g.add_node("tf.Placeholder", [], [tf_tensor(4, 6)], name="x")
    paddings = g.add_node(
        "tf.Abs", [_const(g, "p", np.asarray([[0, 0], [1, 1]], np.int32))], [tf_tensor(2, 2, dtype=I32)], name="p/abs"
    )  # computed paddings: the analysis does not evaluate Abs
    g.add_node("tf.Pad", [x.outputs[0], paddings.outputs[0]], [tf_tensor(4, 8)], name="pad")
    with pytest.raises(PassError, match="node 'pad' \\(tf.Pad\\) does not tell where the batch 4 goes \\(its paddings"):
        rebatch(Module("m", g), 2)

    with pytest.raises(PassError, match="batch must be >= 1"):
        rebatch(mlp_training_step(4), 0)
    with pytest.raises(PassError, match="cannot re-batch a graph at batch 1"):
        rebatch(mlp_training_step(1), 2)

    g = Graph("main")
    x = g.add_node("tf.Placeholder", [], [tf_tensor(4, 6)], name="x")
    g.add_node(
        "tf.StridedSlice",
        [x.outputs[0], *(_const(g, n, np.asarray(v, np.int32)) for n, v in (("b", [0]), ("e", [2]), ("s", [1])))],
        [tf_tensor(2, 6)],
        name="half",
    )
    with pytest.raises(PassError, match="node 'half' \\(tf.StridedSlice\\)"):
        rebatch(Module("m", g), 2)


def test_a_larger_batch_repeats_equal_constant_samples_and_refuses_different_ones():
    got = rebatch(_baked(2, same_samples=True), 4)
    assert got.graph.value("x").type == tf_tensor(4, 3, 4)
    assert _value(got, "mask") == np.tile(np.arange(12, dtype=np.float32).reshape(3, 4), (4, 1)).tolist()
    with pytest.raises(PassError, match="cannot re-batch constant 'mask' to batch 4: its 2 samples along axis 0"):
        rebatch(_baked(2), 4)


def test_profiled_costs_are_rescaled_and_mem_recomputed():
    module = mlp_training_step(64, (256, 512, 128))
    Profile().run(module, PassContext())
    got = rebatch(module, 16)
    fresh = mlp_training_step(16, (256, 512, 128))
    Profile().run(fresh, PassContext())
    for name in ("fwd0/mm", "bwd1/dw", "w0/adam"):
        want = fresh.graph.node(name).cost.time("V100")  # type: ignore[union-attr]
        assert got.graph.node(name).cost.time("V100") == pytest.approx(want, rel=1e-9)  # type: ignore[union-attr]
        assert got.graph.node(name).mem == fresh.graph.node(name).mem


def test_data_parallel_goes_through_the_ir_rebatching():
    """No replica model given: ``module_at_batch`` re-batches in the IR (no TensorFlow, no builder)."""
    module = mlp_training_step(8)
    result = data_parallel(module, 2)
    reference = data_parallel(module, 2, replica=mlp_training_step(4))
    assert print_module(result.module) == print_module(reference.module)


# --------------------------------------------------------------------------- against TensorFlow's re-tracing

_BUILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from helpers import build_train
    model, batches, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[4])
    for batch in batches:
        graph_def, _ = build_train(model, batch)
        (out / f"{model}_b{batch}.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    """
)


def build_graphs(model: str, batches: list[int], directory: Path) -> list[Path]:
    """Trace the zoo's training step of ``model`` (tests/unit/tf_models.py) at each batch, in a subprocess."""
    root = Path(__file__).resolve().parent
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", _BUILD, json.dumps(model), json.dumps(batches), str(root), str(directory)]
    subprocess.run(command, env=env, timeout=600, check=True, capture_output=True)
    return [directory / f"{model}_b{batch}.pb" for batch in batches]


def live_nodes(module: Module) -> set:
    """Nodes a graph output or a stateful sink (a node without results) depends on."""
    stack = [v.producer for v in module.graph.outputs if v.producer is not None]
    stack += [n for n in module.graph.nodes if not n.outputs]
    live: set = set()
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend((*node.predecessors, *node.control_inputs))
    return live


def unread_elements(module: Module, name: str, known: dict) -> set[int]:
    """Elements of a constant vector that no user reads (a StridedSlice reads only the elements it slices)."""
    node = module.graph.node(name)
    size = int(known[node.outputs[0]].size)
    read: set[int] = set()
    for user in node.outputs[0].users:
        if user.op != "tf.StridedSlice" or user.inputs[0] is not node.outputs[0]:
            return set()
        begin, end = (int(known[v].reshape(-1)[0]) for v in user.inputs[1:3])
        read.update(range(size)[slice(begin, end)])
    return set(range(size)) - read


def differences(rebatched: Module, traced: Module) -> list[str]:
    """Where the IR's re-batched module and TensorFlow's re-traced one differ (live nodes, read elements)."""
    from graphir.passes.transform.batch_rules import const_array, known_values

    known = known_values(traced.graph)
    found: list[str] = []
    for value in traced.graph.values:
        other = rebatched.graph.get_value(value.name)
        if other is None or other.type != value.type:
            found.append(f"type of %{value.name}: {other.type if other else None} != {value.type}")
    for node in live_nodes(traced):
        mine = rebatched.graph.node(node.name)
        if mine.op != node.op:
            found.append(f"op of {node.name}")
        for key, value in node.params.items():
            if key != "value":
                if mine.params.get(key) != value:
                    found.append(f"param {key} of {node.name}")
                continue
            want, got = const_array(node.outputs[0]), const_array(mine.outputs[0])
            assert want is not None and got is not None
            if want.shape != got.shape:
                found.append(f"constant {node.name}: shape {got.shape} != {want.shape}")
                continue
            differ = set(np.flatnonzero(want.reshape(-1) != got.reshape(-1)).tolist())
            if differ - unread_elements(traced, node.name, known):
                found.append(f"constant {node.name}: {got.tolist()} != {want.tolist()}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "batches"),
    [
        ("gpt", (6, 3, 2)),
        ("cnn", (6, 3, 2)),
        ("lstm", (6, 3, 2)),
        ("transformer", (6, 3, 2)),
        ("cnn_padded", (8, 4, 2)),
    ],
)
def test_zoo_training_steps_rebatch_as_tensorflow_retraces_them(model, batches, tmp_path):
    """``cnn_padded`` (helpers.padded_cnn): Pad, StridedSliceGrad, ConcatOffset, sizes of 8 at batch 8."""
    from graphir.importers import load_module

    big, *smalls = build_graphs(model, list(batches), tmp_path)
    module = load_module(big)
    for path, batch in zip(smalls, batches[1:], strict=True):
        got = rebatch(module, batch)
        verify(got)
        assert differences(got, load_module(path)) == []
