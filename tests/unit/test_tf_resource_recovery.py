"""Resource placeholders without handle data get their variable's dtype and shape back (issue 18 item 3).

The fixture is a small DenseNet-style training step (1x1 conv, batch norm, padded 3x3 conv,
concatenation, batch norm, global pooling, dense; GradientTape + Keras Adam in a ``tf.function``)
saved as most tutorials do, ``concrete.graph.as_graph_def()``, so every variable is a bare
``Placeholder``. What the importer must recover, and what is counted:

* every model variable (``count_params()``: kernels, biases, BN gamma/beta/moving mean/variance) and
  Adam's two slots per trainable variable: parameter bytes are exactly
  ``(count_params() + 2 * trainable) * 4``;
* Keras Adam's ``iterations`` and ``learning_rate`` scalars are only read and updated elementwise
  (``iterations + 1``), which fixes no shape, so they are the two the warning names.

The 3x3 conv is ``ZeroPadding2D`` + ``VALID`` (the kernel size is then fixed by the geometry) and the
labels are one-hot (the class count reaches the dense layer's gradient). A ``SAME`` kernel's spatial
size is not in the graph at all; the hand-built graph test shows it kept partial and warned about.
"""

from __future__ import annotations

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from graphir.importers.tf import import_graphdef, import_graphdef_file  # noqa: E402
from graphir.importers.tf_attrs import persistent_bytes, variable_type  # noqa: E402


def _densenet_style() -> keras.Model:
    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 1, use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    y = keras.layers.ZeroPadding2D(1)(x)
    y = keras.layers.Conv2D(4, 3)(y)
    x = keras.layers.Concatenate()([x, y])
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x))


def _train_step_graphdef(model: keras.Model, num_classes: int) -> tf.compat.v1.GraphDef:
    optimizer = keras.optimizers.Adam()
    loss_fn = keras.losses.CategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(images: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    concrete = step.get_concrete_function(tf.TensorSpec((2, *model.input_shape[1:])), tf.TensorSpec((2, num_classes)))
    return concrete.graph.as_graph_def()


@pytest.fixture(scope="module")
def saved_step(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, keras.Model]:
    model = _densenet_style()
    graph_def = _train_step_graphdef(model, 10)
    resource_placeholders = [
        n for n in graph_def.node if n.op == "Placeholder" and n.attr["dtype"].type == tf.resource.as_datatype_enum
    ]
    assert resource_placeholders and not any(n.op == "VarHandleOp" for n in graph_def.node)
    path = tmp_path_factory.mktemp("step") / "train_step.pb"
    tf.io.write_graph(graph_def, str(path.parent), path.name, as_text=False)
    return str(path), model


def test_densenet_style_step_recovers_every_model_variable(
    saved_step: tuple[str, keras.Model], capsys: pytest.CaptureFixture[str]
) -> None:
    path, model = saved_step
    module = import_graphdef_file(path)
    err = capsys.readouterr().err

    variables = [n for n in module.graph.nodes if n.op == "tf.VarHandleOp"]
    trainable = sum(int(v.shape.num_elements()) for v in model.trainable_variables)
    assert sum(persistent_bytes(n) for n in variables) == (model.count_params() + 2 * trainable) * 4
    sized = [n for n in variables if persistent_bytes(n)]
    assert len(sized) == len(model.variables) + 2 * len(model.trainable_variables)
    assert sorted(tuple(variable_type(n).shape) for n in sized if "functional" in n.name) == sorted(
        tuple(v.shape) for v in model.variables
    )

    total = len(sized) + 2
    assert (
        f"{path}: note: recovered the dtype and shape of {len(sized)} of {total} resource variable placeholder(s)"
        in err
    )
    warning = next(line for line in err.splitlines() if "could not be fully recovered" in line)
    assert warning.startswith(f"{path}: warning: 2 resource variable placeholder(s) without handle data")
    unsized = sorted(n.name for n in module.graph.nodes if n.op == "tf.Placeholder" and "adam" in n.name)
    assert len(unsized) == 2 and all(f"'{name}' [*]" in warning for name in unsized)
    # The layers' activations and gradients are typed again: only the optimizer scalars' uses are not.
    unknown = next((line for line in err.splitlines() if "unknown rank" in line), "")
    assert "functional" not in unknown and "gradient_tape" not in unknown


def _resource_placeholder(name: str) -> tf.Tensor:
    return tf.raw_ops.Placeholder(dtype=tf.resource, shape=[], name=name)


def test_same_padded_kernel_stays_partial_and_an_unused_handle_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    graph = tf.Graph()
    with graph.as_default():
        images = tf.raw_ops.Placeholder(dtype=tf.float32, shape=[2, 8, 8, 3], name="images")
        same = _resource_placeholder("same_kernel")
        valid = _resource_placeholder("valid_kernel")
        _resource_placeholder("unused")
        k_same = tf.raw_ops.ReadVariableOp(resource=same, dtype=tf.float32)
        k_valid = tf.raw_ops.ReadVariableOp(resource=valid, dtype=tf.float32)
        y = tf.raw_ops.Conv2D(input=images, filter=k_same, strides=[1, 1, 1, 1], padding="SAME")
        # A later constant shape (as Keras writes for a bias) gives the next conv its input channels.
        y = tf.reshape(y, [2, 8, 8, 5])
        tf.raw_ops.Conv2D(input=y, filter=k_valid, strides=[1, 1, 1, 1], padding="VALID", name="out")
        tf.raw_ops.AssignVariableOp(resource=valid, value=tf.zeros([3, 3, 5, 6]))
    module = import_graphdef(graph.as_graph_def(), source="hand.pb")
    err = capsys.readouterr().err

    kinds = {n.name: (n.op, variable_type(n)) for n in module.graph.nodes}
    assert kinds["valid_kernel"][0] == "tf.VarHandleOp" and kinds["valid_kernel"][1].shape == (3, 3, 5, 6)
    assert kinds["same_kernel"][0] == "tf.VarHandleOp" and kinds["same_kernel"][1].shape == (None, None, 3, None)
    assert kinds["unused"][0] == "tf.Placeholder"
    assert "hand.pb: note: recovered the dtype and shape of 1 of 3 resource variable placeholder(s)" in err
    assert "2 resource variable placeholder(s) without handle data could not be fully recovered" in err
    assert "'same_kernel' [?,?,3,?]" in err and "'unused' [*]" in err


def test_non_variable_resource_placeholder_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    graph = tf.Graph()
    with graph.as_default():
        table = _resource_placeholder("table")
        tf.raw_ops.LookupTableSizeV2(table_handle=table, name="size")
    module = import_graphdef(graph.as_graph_def(), source="table.pb")
    assert next(n for n in module.graph.nodes if n.name == "table").op == "tf.Placeholder"
    assert "resource variable" not in capsys.readouterr().err
