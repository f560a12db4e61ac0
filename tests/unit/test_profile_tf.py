"""``profile{mode=tf}``: a tiny TF training step measured with TF's tracer, mapped back to IR nodes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402  (installed by make: the tf extra)

from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV  # noqa: E402
from graphir.backends.tf.measure import module_graphdef  # noqa: E402
from graphir.driver import run  # noqa: E402
from graphir.errors import PassError  # noqa: E402
from graphir.importers import load_module  # noqa: E402
from graphir.importers.tf import concrete_function_graphdef, from_concrete_function, import_graphdef, tf_tensor_name  # noqa: E402
from graphir.ir import Graph, Module  # noqa: E402
from graphir.pass_infra import PassContext  # noqa: E402
from graphir.passes.profile import Profile  # noqa: E402
from graphir.printer import print_module  # noqa: E402
from graphir.types import DType, TensorType  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))


def tiny_train_step(batch: int, features: int = 48, units: int = 64):
    """A dense layer's training step (forward, gradient, SGD update) traced at ``batch``."""
    w = tf.Variable(tf.zeros([features, units]), name="w")
    b = tf.Variable(tf.zeros([units]), name="b")

    @tf.function(autograph=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(tf.reshape(x, [-1, features]), w) + b)
            loss = tf.reduce_mean(tf.square(h - y))
        grads = tape.gradient(loss, [w, b])
        updates = [w.assign_sub(0.1 * grads[0]), b.assign_sub(0.1 * grads[1])]
        with tf.control_dependencies(updates):
            return tf.identity(loss)

    specs = (tf.TensorSpec([batch, 4, features // 4], tf.float32, name="x"), tf.TensorSpec([batch, units], tf.float32))
    concrete = step.get_concrete_function(*specs)
    concrete.keepalive = (w, b)
    return concrete


@pytest.fixture(scope="module")
def tiny() -> Module:
    return from_concrete_function(tiny_train_step(8), "tiny")


def test_tf_mode_annotates_every_node_with_measured_times_and_memory(tiny):
    result = Profile.of("tf", iterations=3, warmup=1).run(tiny, PassContext())
    stats = result.stats
    nodes = tiny.graph.index().nodes
    assert stats["nodes"] == len(nodes)
    assert all(node.cost is not None and node.mem is not None for node in nodes)
    assert stats["unmeasured-ops"] == 0  # fed placeholders are mapped back from their _arg_ feed nodes
    assert stats["iterations"] == 3
    assert 0 < stats["measured-node-sum-s"] <= stats["measured-run-s"] * 3
    matmul = tiny.graph.get_node("MatMul")
    assert matmul.cost.times[0][1] > 0
    assert matmul.mem.activation == 8 * 64 * 4  # measured output bytes: f32[8,64]
    # Variables keep the analytical persistent bytes, not their handle's bytes.
    w = next(n for n in nodes if n.op == "tf.VarHandleOp" and n.params.get("shape") == (48, 64))
    assert (w.mem.persistent, w.mem.activation) == (48 * 64 * 4, 0)
    assert 0 <= stats["persistent-bytes"] - (48 * 64 + 64) * 4 < 200  # variables + small Consts
    # Every device kind of the cluster gets the same measured time.
    assert len({kind for kind, _ in matmul.cost.times}) == len(tiny.cluster.kinds)


def test_reexported_graphdef_imports_to_the_same_ir(tiny):
    outputs = [tf_tensor_name(v) for v in tiny.graph.outputs]
    again = import_graphdef(module_graphdef(tiny, np.random.default_rng(0)), name="tiny", outputs=outputs)
    strip = Profile(mode="analytical")
    for module in (tiny, again):
        strip.run(module, PassContext())
    assert print_module(again) == print_module(tiny)


def test_graphdef_file_through_the_driver(tmp_path, capsys):
    path = tmp_path / "tiny.pb"
    path.write_bytes(concrete_function_graphdef(tiny_train_step(4)).SerializeToString())
    assert run([str(path), "--passes=profile{mode=tf iterations=2 warmup=1}", "--cluster=1xcpu", "--stats"]) == 0
    err = capsys.readouterr().err
    assert "profile.unmeasured-ops = 0" in err
    assert "profile.measured-run-s" in err
    module = load_module(path)
    assert len(module.graph) > 30


def test_non_tf_module_is_a_one_line_error():
    g = Graph()
    x = g.add_input("x", TensorType(DType.F32, (2, 2)))
    n = g.add_node("onnx.Relu", [x], [TensorType(DType.F32, (2, 2))], name="r")
    g.set_outputs(n.outputs)
    with pytest.raises(PassError, match="runs TensorFlow ops only") as info:
        Profile(mode="tf").run(Module("m", g), PassContext())
    assert "\n" not in str(info.value)


def test_importing_graphir_does_not_import_tensorflow():
    code = (
        "import sys, graphir, graphir.passes.profile, graphir.passes.profile.tf, graphir.backends.tf.measure, "
        "graphir.passes.transform.batching; assert 'tensorflow' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
