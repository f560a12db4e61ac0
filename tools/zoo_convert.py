"""Building one zoo entry in this process: Keras model -> ONNX (tf2onnx) or training-step GraphDef.

:func:`build_in_process` dispatches on the entry: :func:`build_infer_onnx` (frozen weights),
:func:`build_infer_onnx_external` (weights as ONNX external data, with :func:`fold_constant_nodes` and
:func:`canonicalize_constants` making the file deterministic) or :func:`build_train_graphdef` (one
Adam training step). TensorFlow, Keras and tf2onnx (the ``tf`` extra) are imported on first use, through
:func:`graphir.extras.require`. Callers build in a fresh process (:func:`graphir.tools.zoo.build_entry`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphir.extras import require
from graphir.fileio import write_atomically
from graphir.tools.zoo_models import MODELS_WITH_SOFTMAX, fresh_model

if TYPE_CHECKING:
    from graphir.tools.zoo_entries import Entry

OPSET = 17
"""ONNX opset of the inference conversions."""
FILE_MODE = 0o644
"""Permissions of built files (``tempfile.mkstemp`` creates them 0600)."""
ZOO_FEATURE = "building the model zoo"
"""The feature named when TensorFlow or tf2onnx (the ``tf`` extra) is missing."""


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def build_train_graphdef(model: str, batch: int, config: Sequence[tuple[str, Any]] = ()) -> Any:
    """Trace one training step (forward, GradientTape backward, Adam update) into a GraphDef.

    The update is TensorFlow's fused ``ResourceApplyAdam`` per trainable variable with its two
    slot variables and the ``beta1_power``/``beta2_power`` accumulators, as ``tf.train.AdamOptimizer``
    built it in the graphs the papers placed (one update op per variable, not a dozen
    element-wise ops as Keras 3's own Adam emits).

    Args:
        model: a key of :data:`graphir.tools.zoo_models.MODELS`.
        batch: the batch size.
        config: builder options (layer counts, widths...).

    Returns:
        ``(graph_def, concrete_function)``: the self-contained GraphDef (variables as
        ``VarHandleOp``) and the traced concrete function.
    """
    _quiet_tensorflow()
    tf = require("tensorflow", "tf", ZOO_FEATURE)
    import keras

    from graphir.importers.tf import concrete_function_graphdef

    net, input_specs, label_spec = fresh_model(model, batch, config)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=model not in MODELS_WITH_SOFTMAX)
    trainable = [v.value for v in net.trainable_variables]
    with tf.name_scope("adam"):
        slots = [
            (
                tf.Variable(tf.zeros(v.shape, v.dtype), name=f"{v.name.split(':')[0]}_m"),
                tf.Variable(tf.zeros(v.shape, v.dtype), name=f"{v.name.split(':')[0]}_v"),
            )
            for v in trainable
        ]
        beta1_power = tf.Variable(0.9, name="beta1_power")
        beta2_power = tf.Variable(0.999, name="beta2_power")

    def step(*tensors: Any) -> Any:
        *inputs, labels = tensors
        with tf.GradientTape() as tape:
            prediction = net(inputs if len(inputs) > 1 else inputs[0], training=True)
            loss = loss_fn(labels, prediction)
        gradients = tape.gradient(loss, trainable)
        updates = []
        with tf.name_scope("adam"):
            lr, beta1, beta2, epsilon = (tf.constant(c) for c in (1e-4, 0.9, 0.999, 1e-7))
            for variable, (m, v), gradient in zip(trainable, slots, gradients, strict=True):
                updates.append(
                    tf.raw_ops.ResourceApplyAdam(
                        var=variable.handle,
                        m=m.handle,
                        v=v.handle,
                        beta1_power=beta1_power,
                        beta2_power=beta2_power,
                        lr=lr,
                        beta1=beta1,
                        beta2=beta2,
                        epsilon=epsilon,
                        grad=gradient,
                    )
                )
            with tf.control_dependencies(updates):
                finish = [beta1_power.assign(beta1_power * 0.9), beta2_power.assign(beta2_power * 0.999)]
        with tf.control_dependencies(finish):
            return tf.identity(loss)

    specs = [tf.TensorSpec(shape, dtype, name=f"input_{k}") for k, (shape, dtype) in enumerate(input_specs)]
    specs.append(tf.TensorSpec(label_spec[0], label_spec[1], name="labels"))
    train_step = tf.function(step, autograph=False)
    concrete = train_step.get_concrete_function(*specs)
    concrete.graphir_keepalive = (net, slots, beta1_power, beta2_power)  # it holds weak references only
    return concrete_function_graphdef(concrete), concrete


def build_infer_onnx(model: str, batch: int, config: Sequence[tuple[str, Any]], path: Path) -> None:
    """Convert ``model(x, training=False)`` to ONNX with tf2onnx (weights frozen inline) and write ``path``."""
    _quiet_tensorflow()
    tf = require("tensorflow", "tf", ZOO_FEATURE)
    tf2onnx = require("tf2onnx", "tf", ZOO_FEATURE)

    net, input_specs, _ = fresh_model(model, batch, config)
    specs = [tf.TensorSpec(shape, dtype, name=f"input_{k}") for k, (shape, dtype) in enumerate(input_specs)]

    def serve(*inputs: Any) -> Any:
        return net(list(inputs) if len(inputs) > 1 else inputs[0], training=False)

    serve_fn = tf.function(serve, input_signature=specs, autograph=False)
    proto, _ = tf2onnx.convert.from_function(serve_fn, input_signature=specs, opset=OPSET)
    proto.producer_version = tf2onnx.__version__
    _write_atomically(path, proto.SerializeToString())


WEIGHT_INPUT_PREFIX = "graphir_weight_"
"""Name prefix of the weight arguments while converting with external weights (replaced afterwards)."""


def build_infer_onnx_external(model: str, batch: int, config: Sequence[tuple[str, Any]], path: Path) -> None:
    """Convert ``model(x, training=False)`` with its weights as ONNX external data (``<name>.onnx.data``).

    tf2onnx freezes variables into constants and then needs about ten times the weight bytes of
    memory (15-20 GiB for BERT-large or the Transformer). Here the model is traced with Keras's
    ``stateless_call``, every variable a function argument, so tf2onnx converts a weightless graph
    in seconds. Then the weight arguments become initializers holding the variables' values, the
    ops computing only from weights and constants (weight reshapes, the position-embedding
    lookup) are folded as tf2onnx folds them in a frozen graph (:func:`fold_constant_nodes`), and
    the model is written with every initializer above 1 KiB in one external data file. Peak memory
    is about twice the weight bytes; the graph has the same ops as the frozen conversion.
    """
    _quiet_tensorflow()
    import onnx

    tf = require("tensorflow", "tf", ZOO_FEATURE)
    tf2onnx = require("tf2onnx", "tf", ZOO_FEATURE)

    net, input_specs, _ = fresh_model(model, batch, config)
    variables = list(net.trainable_variables) + list(net.non_trainable_variables)
    n_trainable = len(net.trainable_variables)
    n_inputs = len(input_specs)
    specs = [tf.TensorSpec(shape, dtype, name=f"input_{k}") for k, (shape, dtype) in enumerate(input_specs)]
    weight_specs = [tf.TensorSpec(v.shape, v.dtype, name=f"{WEIGHT_INPUT_PREFIX}{k}") for k, v in enumerate(variables)]

    def serve(*args: Any) -> Any:
        inputs, weights = list(args[:n_inputs]), list(args[n_inputs:])
        outputs, _ = net.stateless_call(
            weights[:n_trainable], weights[n_trainable:], inputs if n_inputs > 1 else inputs[0], training=False
        )
        return outputs

    signature = specs + weight_specs
    serve_fn = tf.function(serve, input_signature=signature, autograph=False)
    proto, _ = tf2onnx.convert.from_function(serve_fn, input_signature=signature, opset=OPSET)
    proto.producer_version = tf2onnx.__version__
    graph = proto.graph
    weight_names = {f"{WEIGHT_INPUT_PREFIX}{k}": v for k, v in enumerate(variables)}
    kept_inputs = [i for i in graph.input if i.name not in weight_names]
    used = {name for node in graph.node for name in node.input}
    renamed: dict[str, str] = {}
    for arg_name, variable in weight_names.items():
        if arg_name not in used:
            continue  # e.g. dropout seed states, unused at inference
        renamed[arg_name] = variable.path
        array = np.asarray(variable.numpy())
        graph.initializer.append(onnx.numpy_helper.from_array(array, variable.path))
    del graph.input[:]
    graph.input.extend(kept_inputs)
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
    del variables, weight_names
    fold_constant_nodes(proto)
    canonicalize_constants(proto, keep=set(renamed.values()))
    _save_with_external_data(proto, path)


def canonicalize_constants(proto: Any, keep: set[str]) -> None:
    """Order the nodes and name and order the initializers deterministically.

    tf2onnx's node order varies between runs: nodes are sorted topologically, ties broken by node
    name (the smallest ready name first). tf2onnx also merges equal constants and keeps the name of
    an arbitrary one of them (it differs between runs, even with ``PYTHONHASHSEED`` fixed). Every
    initializer not in ``keep`` (the weights, named after their Keras variables) is renamed
    ``constant_<k>``, ``k`` counting first
    uses, and the initializers are stored in first-use order. Nodes without subgraphs only (tf2onnx
    output of the zoo models).
    """
    import heapq

    graph = proto.graph
    producer = {name: k for k, node in enumerate(graph.node) for name in node.output}
    waiting = [0] * len(graph.node)
    users: list[list[int]] = [[] for _ in graph.node]
    for k, node in enumerate(graph.node):
        for source in {producer[name] for name in node.input if name in producer}:
            waiting[k] += 1
            users[source].append(k)
    ready = [(node.name, k) for k, node in enumerate(graph.node) if waiting[k] == 0]
    heapq.heapify(ready)
    nodes = []
    while ready:
        _, k = heapq.heappop(ready)
        nodes.append(graph.node[k])
        for user in users[k]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (graph.node[user].name, user))
    copies = [type(node)() for node in nodes]
    for copy, node in zip(copies, nodes, strict=True):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    by_name = {tensor.name: tensor for tensor in graph.initializer}
    taken = {name for node in graph.node for name in node.output} | set(by_name)
    order: dict[str, int] = {}
    renamed: dict[str, str] = {}
    for node in graph.node:
        for name in node.input:
            if name not in by_name or name in order:
                continue
            order[name] = len(order)
            if name not in keep:
                new = f"constant_{len(renamed)}"
                while new in taken:
                    new = f"_{new}"
                renamed[name] = new
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name in renamed:
                node.input[k] = renamed[name]
    for output in graph.output:
        order.setdefault(output.name, len(order))
    tensors = sorted(by_name.values(), key=lambda t: order.get(t.name, len(order)))
    for tensor in tensors:
        tensor.name = renamed.get(tensor.name, tensor.name)
    del graph.initializer[:]
    graph.initializer.extend(tensors)


FOLDABLE_EXCLUDED = frozenset({"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial"})


def fold_constant_nodes(proto: Any) -> int:
    """Replace every node whose inputs are all initializers by initializers holding its outputs.

    This is the constant folding tf2onnx applies to a frozen graph, done after the weights were
    attached (see :func:`build_infer_onnx_external`). Evaluation uses ``onnx.reference``; random
    ops and ops with subgraphs are kept. Initializers no node uses any more are dropped.

    Returns:
        The number of folded nodes.
    """
    import onnx
    from onnx.reference import ReferenceEvaluator

    graph = proto.graph
    opsets = {o.domain: o.version for o in proto.opset_import}
    constants = {t.name: t for t in graph.initializer}
    kept = []
    folded = 0
    for node in graph.node:
        foldable = (
            node.domain in ("", "ai.onnx")
            and node.op_type not in FOLDABLE_EXCLUDED
            and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
            and all(name == "" or name in constants for name in node.input)
        )
        if not foldable:
            kept.append(node)
            continue
        feeds = {name: onnx.numpy_helper.to_array(constants[name]) for name in node.input if name}
        results = ReferenceEvaluator(node, opsets={"": opsets.get("", OPSET)}).run(None, feeds)
        for name, result in zip(node.output, results, strict=True):
            constants[name] = onnx.numpy_helper.from_array(np.asarray(result), name)
        folded += 1
    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    initializers = [tensor for name, tensor in constants.items() if name in used]
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    return folded


def _save_with_external_data(proto: Any, path: Path) -> None:
    """Write ``path`` and its external data file ``<path>.data`` (data first, each replaced atomically)."""
    import onnx

    data_name = f"{path.name}.data"
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as tmp:
        staged = Path(tmp) / path.name
        onnx.save_model(
            proto,
            str(staged),
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=data_name,
            size_threshold=1024,
        )
        for name in (data_name, path.name):
            os.chmod(Path(tmp) / name, FILE_MODE)
            os.replace(Path(tmp) / name, path.parent / name)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write one built file atomically (:func:`graphir.fileio.write_atomically`), creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, data)


GRU_EXPORT_TOLERANCE = 1e-4
"""Largest relative error allowed between the written GRU model (onnxruntime) and the Keras model."""


def build_gru_onnx(model: str, batch: int, config: Sequence[tuple[str, Any]], path: Path) -> None:
    """Write the Keras GRU language model ``model`` as ONNX with one ``GRU`` op per layer, and check it.

    tf2onnx has no rewrite for Keras 3's GRU (it exports each layer's ``tf.while_loop`` as a
    ``Loop``: ``gru_seq_infer``), and PyTorch is not a dependency, so the graph is written with
    ``onnx.helper`` in the form PyTorch's exporter gives ``nn.GRU``: ``Gather`` (embedding),
    ``Transpose`` to ``[seq, batch, units]``, per layer ``GRU`` then ``Squeeze`` of its direction
    axis, ``Transpose`` back, ``MatMul`` + ``Add`` (the logits). Keras's ``GRU(reset_after=True)`` is
    ONNX's ``GRU`` with ``linear_before_reset=1`` (Cho et al. 2014 as cuDNN computes it: the reset
    gate applied after the recurrent matmul and its bias), both with the gates in the order
    ``z, r, h`` and ``h_t = z * h_{t-1} + (1 - z) * h~``: ``W = kernel^T``, ``R = recurrent_kernel^T``,
    ``B = [input bias, recurrent bias]``. The weights are the Keras model's own (the same seed and
    layers as ``gru_seq``); the written model must match the Keras model on seeded tokens within
    :data:`GRU_EXPORT_TOLERANCE` (onnxruntime), else the build fails.
    """
    _quiet_tensorflow()
    require("tensorflow", "tf", ZOO_FEATURE)
    ort = require("onnxruntime", "ort", ZOO_FEATURE)
    import onnx
    from onnx import helper, numpy_helper

    from graphir.errors import GraphIRError

    net, input_specs, _ = fresh_model(model, batch, config)
    options = dict(config)
    layers, units = int(options["layers"]), int(options["units"])
    ((shape, _),) = input_specs
    initializers = [numpy_helper.from_array(np.asarray(net.get_layer("emb").get_weights()[0]), "emb")]
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["embedded"], name="emb"),
        helper.make_node("Transpose", ["embedded"], ["x0"], name="to_time_major", perm=[1, 0, 2]),
    ]
    axis = numpy_helper.from_array(np.array([1], np.int64), "direction_axis")
    initializers.append(axis)
    for i in range(layers):
        layer = net.get_layer(f"gru{i}")
        cell = layer.cell
        if (
            not cell.reset_after
            or cell.activation.__name__ != "tanh"
            or cell.recurrent_activation.__name__ != "sigmoid"
        ):
            raise GraphIRError(f"layer gru{i}: only GRU(reset_after=True, tanh, sigmoid) maps onto ONNX GRU here")
        kernel, recurrent, bias = (np.asarray(w, np.float32) for w in layer.get_weights())
        names = [f"gru{i}_W", f"gru{i}_R", f"gru{i}_B"]
        arrays = [kernel.T[None], recurrent.T[None], bias.reshape(1, -1)]
        initializers.extend(
            numpy_helper.from_array(np.ascontiguousarray(a), n) for a, n in zip(arrays, names, strict=True)
        )
        nodes.append(
            helper.make_node(
                "GRU",
                [f"x{i}", *names],
                [f"gru{i}_Y", f"gru{i}_Y_h"],
                name=f"gru{i}",
                hidden_size=units,
                linear_before_reset=1,
            )
        )
        nodes.append(
            helper.make_node("Squeeze", [f"gru{i}_Y", "direction_axis"], [f"x{i + 1}"], name=f"gru{i}_squeeze")
        )
    dense_w, dense_b = (np.asarray(w, np.float32) for w in net.get_layer("logits").get_weights())
    initializers += [numpy_helper.from_array(dense_w, "logits_W"), numpy_helper.from_array(dense_b, "logits_b")]
    nodes += [
        helper.make_node("Transpose", [f"x{layers}"], ["features"], name="to_batch_major", perm=[1, 0, 2]),
        helper.make_node("MatMul", ["features", "logits_W"], ["projected"], name="logits_matmul"),
        helper.make_node("Add", ["projected", "logits_b"], ["logits"], name="logits_bias"),
    ]
    batch_size, seq = shape
    graph = helper.make_graph(
        nodes,
        "gru_lm",
        [helper.make_tensor_value_info("tokens", onnx.TensorProto.INT32, [batch_size, seq])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [batch_size, seq, dense_w.shape[1]])],
        initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="graphir.tools.zoo")
    proto.ir_version = 8  # what onnx 1.12+ writes for opset 17; onnxruntime reads it
    onnx.checker.check_model(proto)
    tokens = np.random.default_rng(0).integers(0, int(options["vocab"]), (batch_size, seq)).astype(np.int32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(["logits"], {"tokens": tokens})
    want = np.asarray(net(tokens, training=False))
    error = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    if error > GRU_EXPORT_TOLERANCE:
        raise GraphIRError(f"the ONNX GRU model differs from the Keras model by {error:.2e} (relative)")
    _write_atomically(path, proto.SerializeToString())


DIRECT_EXPORTS = {"gru_lm": build_gru_onnx}
"""Inference entries written without tf2onnx: model -> its exporter (see each exporter's docstring)."""


def build_in_process(entry: Entry, directory: Path) -> Path:
    """Build ``entry`` in this process (callers should use a fresh process: see the module doc)."""
    path = entry.path(directory)
    if entry.mode == "infer" and entry.model in DIRECT_EXPORTS:
        DIRECT_EXPORTS[entry.model](entry.model, entry.batch, entry.config, path)
    elif entry.mode == "infer" and entry.external_weights:
        build_infer_onnx_external(entry.model, entry.batch, entry.config, path)
    elif entry.mode == "infer":
        build_infer_onnx(entry.model, entry.batch, entry.config, path)
    else:
        graph_def, _ = build_train_graphdef(entry.model, entry.batch, entry.config)
        _write_atomically(path, graph_def.SerializeToString(deterministic=True))
    return path
