"""A DenseNet121-style training step saved as tutorials do recovers every variable (issue 18 item 3, Must show).

The fixture is DenseNet121's construction with real Keras layers (the same layer kinds, kernel
sizes, strides and paddings as ``keras.applications.DenseNet121``, which a test checks) and one conv
block per dense block instead of 6/12/24/16, on 32x32 inputs, so it builds in seconds. The training
step is the TensorFlow custom-training-loop tutorial's: ``GradientTape``, Keras ``Adam``, sparse
integer labels (``SparseCategoricalCrossentropy``); the user saves the traced graph with
``tf.io.write_graph(concrete.graph, ...)`` and, as the tutorial does, a
``tf.train.Checkpoint(model=..., optimizer=...)`` after training.

What the GraphDef alone fixes, and what needs the checkpoint (``--tf-variables``), is stated by the
second test: the 3x3 ``SAME`` kernels' and the 7x7/2 stem kernel's spatial sizes, the class count
(sparse labels: the last dense layer's kernel and bias), each with its two Adam slots, and Adam's
``iteration``/``learning_rate`` scalars. The 1x1 ``VALID`` kernels are fixed by the graph.

Parameter bytes compared: the module's variables that are the model's (every variable outside the
optimizer's ``adam/`` scope) sum to ``count_params() * 4``; all variables together to that plus
Adam's two float32 slots per trainable weight, its float32 learning rate and its int64 iteration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from graphir.errors import ImportError_  # noqa: E402
from graphir.importers import load_module  # noqa: E402
from graphir.importers.tf_attrs import persistent_bytes, variable_type  # noqa: E402

CLASSES = 10


def densenet(blocks: tuple[int, ...], size: int, classes: int = CLASSES) -> keras.Model:
    """Keras's DenseNet construction with public layers only (``blocks`` conv blocks per dense block)."""
    layers = keras.layers

    def bn(name: str) -> Any:
        return layers.BatchNormalization(epsilon=1.001e-5, name=name)

    def conv_block(x: Any, name: str) -> Any:
        y = layers.Activation("relu", name=f"{name}_0_relu")(bn(f"{name}_0_bn")(x))
        y = layers.Conv2D(4 * 32, 1, use_bias=False, name=f"{name}_1_conv")(y)
        y = layers.Activation("relu", name=f"{name}_1_relu")(bn(f"{name}_1_bn")(y))
        y = layers.Conv2D(32, 3, padding="same", use_bias=False, name=f"{name}_2_conv")(y)
        return layers.Concatenate(name=f"{name}_concat")([x, y])

    def transition(x: Any, name: str) -> Any:
        x = layers.Activation("relu", name=f"{name}_relu")(bn(f"{name}_bn")(x))
        x = layers.Conv2D(int(x.shape[-1] * 0.5), 1, use_bias=False, name=f"{name}_conv")(x)
        return layers.AveragePooling2D(2, strides=2, name=f"{name}_pool")(x)

    inputs = keras.Input((size, size, 3))
    x = layers.ZeroPadding2D(((3, 3), (3, 3)))(inputs)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="conv1_conv")(x)
    x = layers.Activation("relu", name="conv1_relu")(bn("conv1_bn")(x))
    x = layers.ZeroPadding2D(((1, 1), (1, 1)))(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(x)
    for stage, count in enumerate(blocks):
        for block in range(count):
            x = conv_block(x, f"conv{stage + 2}_block{block + 1}")
        if stage < len(blocks) - 1:
            x = transition(x, f"pool{stage + 2}")
    x = layers.Activation("relu", name="relu")(bn("bn")(x))
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    outputs = layers.Dense(classes, activation="softmax", name="predictions")(x)
    return keras.Model(inputs, outputs, name="densenet")


def save_training_step(
    model: keras.Model, directory: Path, batch: int
) -> tuple[Path, Path, dict[str, tuple[str, tuple]]]:
    """Trace, run once and save a tutorial training step: the GraphDef, a checkpoint, and the truth.

    Returns:
        (GraphDef file, checkpoint directory, placeholder name -> (variable path, shape)).
    """
    # Named, so that its variables sit under "adam/" even after another test made an Adam (Keras
    # numbers unnamed optimizers per process: "adam_1/...").
    optimizer = keras.optimizers.Adam(name="adam")
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    size = model.input_shape[1]
    concrete = train_step.get_concrete_function(
        tf.TensorSpec((batch, size, size, 3)), tf.TensorSpec((batch,), tf.int32)
    )
    concrete(tf.random.uniform((batch, size, size, 3)), tf.zeros((batch,), tf.int32))
    tf.io.write_graph(concrete.graph, str(directory), "train_step.pb", as_text=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    checkpoint.save(str(directory / "checkpoints" / "ckpt"))
    by_handle = {id(v.value.handle): (v.path, tuple(v.shape)) for v in [*model.variables, *optimizer.variables]}
    truth = {
        internal.op.name: by_handle[id(external)]
        for external, internal in zip(concrete.captured_inputs, concrete.graph.internal_captures, strict=True)
        if internal.dtype == tf.resource
    }
    return directory / "train_step.pb", directory / "checkpoints", truth


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, tuple[str, tuple]], keras.Model]:
    model = densenet((1, 1, 1, 1), 32)
    path, checkpoints, truth = save_training_step(model, tmp_path_factory.mktemp("densenet"), batch=4)
    return path, checkpoints, truth, model


def _variables(module: Any) -> dict[str, Any]:
    return {n.name: n for n in module.graph.nodes if n.op == "tf.VarHandleOp"}


def _check_bytes(variables: dict[str, Any], truth: dict[str, tuple[str, tuple]], model: keras.Model) -> None:
    model_bytes = sum(persistent_bytes(variables[n]) for n, (p, _) in truth.items() if not p.startswith("adam/"))
    assert model_bytes == model.count_params() * 4
    trainable = sum(int(v.shape.num_elements()) for v in model.trainable_variables)
    assert sum(persistent_bytes(n) for n in variables.values()) == (model.count_params() + 2 * trainable + 1) * 4 + 8


def test_fixture_has_densenet121_layer_kinds() -> None:
    def kinds(model: keras.Model) -> set[tuple]:
        out = set()
        for layer in model.layers:
            config = layer.get_config()
            out.add(
                tuple(str(config.get(k)) for k in ("kernel_size", "strides", "padding", "pool_size"))
                + (type(layer).__name__,)
            )
        return out

    assert kinds(densenet((1, 1, 1, 1), 32)) == kinds(keras.applications.DenseNet121(weights=None))


def test_graphdef_with_checkpoint_recovers_every_variable(
    saved: tuple[Path, Path, dict[str, tuple[str, tuple]], keras.Model], capsys: pytest.CaptureFixture[str]
) -> None:
    path, checkpoints, truth, model = saved
    module = load_module(path, tf_variables=checkpoints)
    err = capsys.readouterr().err

    variables = _variables(module)
    assert {name: tuple(variable_type(variables[name]).shape) for name in truth} == {
        name: shape for name, (_, shape) in truth.items()
    }
    _check_bytes(variables, truth, model)
    note = next(line for line in err.splitlines() if "note: recovered" in line)
    assert f"recovered the dtype and shape of {len(truth)} of {len(truth)} resource variable placeholder(s)" in note
    assert f"from '{checkpoints}' (" in note and "could not be fully recovered" not in err


def _needs_checkpoint(variable_path: str) -> bool:
    """The variables the GraphDef alone cannot size (see the module docstring), Adam's slots included."""
    flat = variable_path.replace("/", "_")
    return variable_path in ("adam/iteration", "adam/learning_rate") or bool(
        re.search(r"(_2_conv|conv1_conv)_kernel|predictions_", flat)
    )


def test_graphdef_alone_fixes_all_but_same_kernels_class_count_and_scalars(
    saved: tuple[Path, Path, dict[str, tuple[str, tuple]], keras.Model], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, truth, _ = saved
    module = load_module(path)
    err = capsys.readouterr().err

    variables = _variables(module)
    sized = {name for name, node in variables.items() if persistent_bytes(node)}
    unsized = set(truth) - sized
    assert {truth[name][0] for name in unsized} == {p for p, _ in truth.values() if _needs_checkpoint(p)}
    for name in sized:  # what the graph fixed is exact
        assert tuple(variable_type(variables[name]).shape) == truth[name][1]
    one_by_one = {name for name, (_, shape) in truth.items() if shape[:2] == (1, 1)}
    assert len(one_by_one) == 3 * 7 and one_by_one <= sized  # 1x1 VALID kernels (4 dense, 3 transition) + slots
    assert tuple(variable_type(variables[_name_of(truth, "conv2_block1_2_conv/kernel")]).shape) == (None, None, 128, 32)
    warning = next(line for line in err.splitlines() if "could not be fully recovered" in line)
    assert f"warning: {len(unsized)} resource variable placeholder(s)" in warning
    assert "--tf-variables" in warning and f"({len(unsized) - 5} more)" in warning


def _name_of(truth: dict[str, tuple[str, tuple]], variable_path: str) -> str:
    return next(name for name, (p, _) in truth.items() if p == variable_path)


def test_tf_variables_is_refused_for_other_inputs_and_bad_paths(
    saved: tuple[Path, Path, dict[str, tuple[str, tuple]], keras.Model], tmp_path: Path
) -> None:
    path, checkpoints, _, _ = saved
    with pytest.raises(ImportError_, match="applies to a TensorFlow GraphDef"):
        load_module(tmp_path / "model.onnx", tf_variables=checkpoints)
    with pytest.raises(ImportError_, match="not a TensorFlow checkpoint prefix"):
        load_module(path, tf_variables=tmp_path / "nowhere")


@pytest.mark.slow
def test_real_densenet121_training_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real ``keras.applications.DenseNet121`` (224x224, 1000 classes): all 1,336 variables with the checkpoint."""
    model = keras.applications.DenseNet121(weights=None)
    path, checkpoints, truth = save_training_step(model, tmp_path, batch=8)
    module = load_module(path, tf_variables=checkpoints)
    variables = _variables(module)
    assert len(truth) == 1336
    assert {name: tuple(variable_type(variables[name]).shape) for name in truth} == {
        name: shape for name, (_, shape) in truth.items()
    }
    _check_bytes(variables, truth, model)
    assert "could not be fully recovered" not in capsys.readouterr().err


def test_checkpoint_matching_never_picks_between_shapes() -> None:
    from graphir.importers.tf_checkpoint import CheckpointVariable, match_variables

    f32, i64 = tf.float32.as_datatype_enum, tf.int64.as_datatype_enum
    variables = [
        CheckpointVariable("a/kernel", f32, (3, 3, 8, 4)),
        CheckpointVariable("b/kernel", f32, (5, 5, 8, 4)),
        CheckpointVariable("c/kernel", f32, (3, 3, 4, 4)),
        CheckpointVariable("lr", f32, ()),
        CheckpointVariable("step", i64, ()),
    ]
    unresolved = {"ambiguous": (f32, (None, None, 8, 4)), "forced": (f32, (None, None, 4, 4)), "lr": (f32, None)}
    assert match_variables(variables, unresolved, {}) == {"forced": (f32, (3, 3, 4, 4), "shape")}
    # Once the rest is known, the float scalar is the only float shape left: matched by elimination.
    known = {"k1": (f32, (3, 3, 8, 4)), "k2": (f32, (5, 5, 8, 4)), "k3": (f32, (3, 3, 4, 4)), "s": (i64, ())}
    assert match_variables(variables, {"lr": (f32, None)}, known) == {"lr": (f32, (), "elimination")}
    # A recovered variable the checkpoint lacks breaks the one-to-one correspondence: no elimination.
    assert match_variables(variables, {"lr": (f32, None)}, {**known, "extra": (f32, (7,))}) == {}
