"""``profile{mode=regression}``: Celeritas's Standard Evaluation (per-node fits against batch size)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402  (installed by make: the tf extra)

from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV  # noqa: E402
from graphir.errors import PassError  # noqa: E402
from graphir.importers.tf import concrete_function_graphdef, from_concrete_function, import_graphdef  # noqa: E402
from graphir.pass_infra import PassContext  # noqa: E402
from graphir.passes.profile import Profile  # noqa: E402
from graphir.passes.profile.tf import fit_lines, relative_deviation  # noqa: E402
from graphir.passes.transform.batching import module_batch, register_batch_builder  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# Standard Evaluation on zoo models (the bar): fit batches 1, 2, 4 and predict 4x the largest.
ZOO_BATCHES = (1, 2, 4)
ZOO_TARGET = 16
MEM_DEVIATION_BAR = 0.10


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))


def test_fit_lines_recovers_exact_lines():
    batches = np.array([1, 2, 4])
    values = np.array([[3.0, 5.0, 9.0], [7.0, 7.0, 7.0], [0.0, 4.0, 12.0]])
    intercept, slope = fit_lines(batches, values)
    np.testing.assert_allclose(intercept, [1.0, 7.0, -4.0])
    np.testing.assert_allclose(slope, [2.0, 0.0, 4.0])


def test_relative_deviation_skips_zero_measurements():
    deviation = relative_deviation(np.array([1.1, 5.0, 2.0]), np.array([1.0, 0.0, 4.0]))
    np.testing.assert_allclose(deviation, [0.1, 0.5])


def dense_train_step(batch: int):
    """A two-layer MLP training step traced at ``batch`` (TF's gradient code bakes the batch in)."""
    w1 = tf.Variable(tf.zeros([64, 128]), name="w1")
    w2 = tf.Variable(tf.zeros([128, 32]), name="w2")

    @tf.function(autograph=False)
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(tf.reshape(x, [-1, 64]), w1))
            loss = tf.reduce_mean(tf.square(tf.matmul(h, w2) - y))
        grads = tape.gradient(loss, [w1, w2])
        updates = [w1.assign_sub(0.1 * grads[0]), w2.assign_sub(0.1 * grads[1])]
        with tf.control_dependencies(updates):
            return tf.identity(loss)

    concrete = step.get_concrete_function(
        tf.TensorSpec([batch, 8, 8], tf.float32, name="x"), tf.TensorSpec([batch, 32], tf.float32, name="y")
    )
    concrete.keepalive = (w1, w2)
    return concrete


@pytest.fixture
def mlp():
    module = from_concrete_function(dense_train_step(16), "mlp_train")
    register_batch_builder("mlp_train", lambda batch: concrete_function_graphdef(dense_train_step(batch)))
    yield module
    register_batch_builder("mlp_train", None)


def test_regression_on_a_tiny_training_step(mlp):
    """Fit at 1, 2, 4 and predict the module's own batch 16, validated by measuring it."""
    stats = Profile.of("regression", batches=(1, 2, 4), validate=True, iterations=3).run(mlp, PassContext()).stats
    nodes = mlp.graph.index().nodes
    assert stats["target"] == stats["module-batch"] == 16 == module_batch(mlp)
    assert stats["batch-source"] == "builder"
    assert stats["fitted-ops"] == len(nodes)
    assert all(node.cost is not None and node.mem is not None for node in nodes)
    # Output bytes grow exactly linearly with the batch (TF's size-1 special cases at batch 1 aside).
    assert stats["output-mem-deviation-median"] == 0.0
    assert stats["output-mem-deviation-mean"] < 0.15
    assert stats["mem-compared-ops"] > len(nodes) // 2
    for key in ("time-deviation-mean", "time-deviation-median", "mem-within-20pct", "standard-evaluation-s"):
        assert key in stats
    matmul = mlp.graph.get_node("MatMul")
    assert matmul.mem.activation == 16 * 128 * 4  # predicted from batches 1, 2, 4


def test_regression_predicts_linear_times_and_reports_their_deviation(mlp, monkeypatch):
    """The fit, the prediction and the time-deviation statistics against numbers worked out by hand.

    TF's measurements are replaced by exact lines: node i takes (i + 1) * (10 us + 2 us * batch) at
    batches 1, 2, 4, so the prediction at batch 16 is (i + 1) * 42 us; the "measured" target batch
    takes twice that, so every node's relative time deviation is |p - 2p| / 2p = 0.5.
    """
    from graphir.passes.profile import tf as tf_profile

    def line(batch: int, count: int) -> np.ndarray:
        return np.arange(1, count + 1) * (10e-6 + 2e-6 * batch)

    def measure(module, options, seed, names=None):
        count = len(names)
        batch = int(module.name.rsplit("_b", 1)[1]) if "_b" in module.name else 16
        seconds = line(batch, count) * (2.0 if batch == 16 else 1.0)
        output = np.full(count, 4 * batch, dtype=np.int64)
        return tf_profile.NodeMeasure(seconds, output, np.zeros(count, dtype=np.int64), 1e-3, 1e-3, 1)

    monkeypatch.setattr(tf_profile, "measure_module", measure)
    stats = Profile.of("regression", batches=(1, 2, 4), validate=True).run(mlp, PassContext()).stats
    n = len(mlp.graph)
    assert stats["fitted-ops"] == stats["time-compared-ops"] == n
    assert stats["compute-s"] == pytest.approx(42e-6 * n * (n + 1) / 2, rel=1e-9)
    assert stats["time-deviation-mean"] == pytest.approx(0.5, rel=1e-9)
    assert stats["time-deviation-median"] == pytest.approx(0.5, rel=1e-9)
    assert stats["time-within-20pct"] == 0.0
    assert stats["time-deviation-mean-10us"] == pytest.approx(0.5, rel=1e-9)  # every node >= 10 us
    assert stats["output-mem-deviation-mean"] == 0.0  # 4 * batch bytes: exactly linear


def test_placeholder_rebatching_without_a_builder():
    """A forward graph whose shapes all flow from its inputs is re-batched by rewriting its placeholders."""
    w = tf.Variable(tf.zeros([64, 16]), name="w")

    @tf.function(autograph=False)
    def forward(x):
        return tf.nn.softmax(tf.matmul(tf.reshape(x, [-1, 64]), w))

    concrete = forward.get_concrete_function(tf.TensorSpec([8, 8, 8], tf.float32, name="x"))
    module = from_concrete_function(concrete, "forward")
    stats = Profile.of("regression", batches=(1, 2), target=8, validate=True).run(module, PassContext()).stats
    assert stats["batch-source"] == "placeholders"
    assert stats["fitted-ops"] == len(module.graph)
    assert stats["output-mem-deviation-mean"] == 0.0
    assert module.graph.get_node("MatMul").mem.activation == 8 * 16 * 4


def test_a_baked_batch_without_a_builder_is_a_one_line_error():
    module = import_graphdef(concrete_function_graphdef(dense_train_step(4)), name="unregistered")
    with pytest.raises(PassError, match="register a builder") as info:
        Profile.of("regression", batches=(1, 2)).run(module, PassContext())
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("options", [{"batches": (4,)}, {"batches": (0, 2)}, {"target": -1}])
def test_bad_options(mlp, options):
    with pytest.raises(PassError, match="'batches'|'target'"):
        Profile.of("regression", **options).run(mlp, PassContext())


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["resnet50_train", "inception_v3_train"])
def test_standard_evaluation_on_zoo_models(entry, capsys):
    """The issue's bar: mean per-node memory deviation < 10 % predicting 4x the largest fitted batch.

    The module is the zoo model at the largest fitted batch (built by the zoo's builder, cached in
    ``zoo/batches/``), named like its entry so the regression rebuilds it at each batch the same way.
    """
    from graphir.tools.zoo_source import zoo_builder

    builder = zoo_builder(entry)
    module = import_graphdef(builder(max(ZOO_BATCHES)), name=entry)
    options = Profile.of("regression", batches=ZOO_BATCHES, target=ZOO_TARGET, validate=True, iterations=2)
    stats = options.run(module, PassContext()).stats
    with capsys.disabled():
        shown = {k: v for k, v in stats.items() if "deviation" in k or k.endswith(("ops", "-s"))}
        print(f"\n{entry}: {shown}")
    assert stats["fitted-ops"] > 0.95 * stats["nodes"]
    assert stats["mem-compared-ops"] > 0.5 * stats["nodes"]
    assert stats["mem-deviation-mean"] < MEM_DEVIATION_BAR
    assert stats["output-mem-deviation-mean"] < MEM_DEVIATION_BAR
