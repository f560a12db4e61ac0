"""The benchmark model zoo: real inference and training graphs, built offline and deterministically.

Every entry is built from Keras 3 (``weights=None``, random initialisation under fixed seeds) into
the git-ignored folder ``zoo/`` at the repository root (override with ``GRAPHIR_ZOO_DIR``):

* ``<model>_infer``: inference ONNX converted by tf2onnx (``tf2onnx.convert.from_function`` on a
  ``tf.function`` wrapping ``model(x, training=False)``, opset :data:`OPSET`), file ``<name>.onnx``.
  The models of :data:`EXTERNAL_WEIGHT_MODELS` (over 500 MB of weights) keep their weights in
  ``<name>.onnx.data`` (ONNX external data) and are converted without freezing the weights
  (:func:`build_infer_onnx_external`): a frozen conversion needs about ten times the weight bytes
  of memory, more than this machine has for BERT-large or the Transformer.
* ``<model>_train``: one training step (forward, ``tf.GradientTape`` backward, Adam update) traced
  into one ``tf.function`` and stored as a **GraphDef** (``<name>.pb``, with its function library).
  GraphDef rather than SavedModel because a SavedModel would have to write every variable's
  values (gigabytes for BERT-large with Adam slots), while the GraphDef records each variable as a
  ``VarHandleOp`` carrying its ``dtype`` and ``shape``
  (:func:`graphir.importers.tf.concrete_function_graphdef`): building needs no execution and no
  weight is written. Import it with ``graphir-opt zoo/<name>.pb`` or ``graphir-opt zoo:<name>``.

Batch sizes follow the papers where they state one (Celeritas: InceptionV3 512, 4-layer LSTM NMT
with 2048 units 512, Transformer 256; Pesto/FastT: 32-128 for the CNNs and BERT); inference
entries use the same batch. Sizes: see ``benchmarks/results/zoo.md`` (written by ``make zoo``).

Files are written atomically: single files through :mod:`graphir.fileio` (mode 0666 less the umask),
an ONNX model and its external-data file staged together with mode 0644 (:data:`FILE_MODE`).

Determinism: each entry is built in a fresh Python process (Keras layer-name counters and TF
function names depend on what the process built before) with ``keras.utils.set_random_seed``, so
building an entry twice gives byte-identical files and `.gir` text.

Command line::

    python tools/zoo.py                       # build every missing entry (2 worker processes)
    python tools/zoo.py resnet50_infer --force
    python tools/zoo.py --list
    python tools/zoo.py --table benchmarks/results/zoo.md   # build, then write the size table
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from graphir.errors import ImportError_
from graphir.fileio import write_atomically
from graphir.ir import Module

ZOO_DIR_ENV = "GRAPHIR_ZOO_DIR"
OPSET = 17
SEED = 0
DROPOUT = 0.1
"""Dropout rate of the attention models (attention weights and residual branches, as in the papers)."""
FILE_MODE = 0o644
"""Permissions of built files (``tempfile.mkstemp`` creates them 0600)."""


def zoo_dir() -> Path:
    """Where entries are built: ``$GRAPHIR_ZOO_DIR`` or ``zoo/`` at the repository root."""
    override = os.environ.get(ZOO_DIR_ENV)
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1] / "zoo"


@attrs.frozen
class Entry:
    """One zoo entry.

    Attributes:
        name: the entry name (``inception_v3_train``), used as ``zoo:<name>`` and as file stem.
        model: key of the model builder in :data:`MODELS`.
        mode: ``"infer"`` (ONNX) or ``"train"`` (TF GraphDef of one training step).
        batch: batch size.
        config: model options passed to the builder (layer counts, widths, sequence length).
        note: where the configuration comes from.
        exclusive: build with no other build running, after the others (memory); no entry needs it
            since the big inference entries are converted with external weights.
        external_weights: inference ONNX with the weights in ``<name>.onnx.data`` (external data),
            converted without freezing them (see :func:`build_infer_onnx_external`).
    """

    name: str
    model: str
    mode: str
    batch: int
    config: tuple[tuple[str, Any], ...] = ()
    note: str = ""
    exclusive: bool = False
    external_weights: bool = False

    @property
    def suffix(self) -> str:
        """File suffix of the built entry."""
        return ".onnx" if self.mode == "infer" else ".pb"

    def path(self, directory: Path | None = None) -> Path:
        """The built file."""
        return (directory or zoo_dir()) / f"{self.name}{self.suffix}"

    def files(self, directory: Path | None = None) -> list[Path]:
        """Every file of the built entry: the model, and its external data file when it has one."""
        path = self.path(directory)
        return [path, path.with_name(path.name + ".data")] if self.external_weights else [path]


# --------------------------------------------------------------------------------- models
# Each builder returns (keras model, input specs as (shape, dtype) pairs, label spec (shape, dtype)).

ModelSpec = tuple[Any, list[tuple[tuple[int, ...], str]], tuple[tuple[int, ...], str]]


def _vision(app: str, size: int, batch: int, classes: int = 1000) -> ModelSpec:
    import keras

    builder = getattr(keras.applications, app)
    model = builder(weights=None, input_shape=(size, size, 3), classes=classes)
    return model, [((batch, size, size, 3), "float32")], ((batch,), "int32")


def _gelu_tanh(x: Any) -> Any:
    """GELU, tanh approximation (GPT-2/BERT); the exact form needs ``Erfc``, which tf2onnx cannot convert."""
    import keras

    return keras.activations.gelu(x, approximate=True)


def _mlp_block(x: Any, d_model: int, d_ff: int, name: str) -> Any:
    import keras

    h = keras.layers.Dense(d_ff, activation=_gelu_tanh, name=f"{name}_ff1")(x)
    h = keras.layers.Dense(d_model, name=f"{name}_ff2")(h)
    h = keras.layers.Dropout(DROPOUT, seed=SEED, name=f"{name}_drop2")(h)
    return keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ln2")(x + h)


def _attention_block(x: Any, context: Any, heads: int, d_model: int, causal: bool, name: str) -> Any:
    import keras

    attention = keras.layers.MultiHeadAttention(heads, d_model // heads, dropout=DROPOUT, seed=SEED, name=f"{name}_mha")
    h = attention(x, context, use_causal_mask=causal)
    h = keras.layers.Dropout(DROPOUT, seed=SEED, name=f"{name}_drop1")(h)
    return keras.layers.LayerNormalization(epsilon=1e-6, name=f"{name}_ln1")(x + h)


def _embed(tokens: Any, vocab: int, seq: int, d_model: int, name: str) -> Any:
    """Token embedding plus a learned position embedding (one trainable ``(seq, d_model)`` table)."""
    import keras

    x = keras.layers.Embedding(vocab, d_model, name=f"{name}_tok")(tokens)
    return _position_embedding_layer()(name=f"{name}_pos")(x)


def _position_embedding_layer() -> type:
    """The Keras layer adding a learned position embedding (defined lazily: Keras loads TensorFlow)."""
    import keras

    class PositionEmbedding(keras.layers.Layer):
        """``x + table`` where ``table`` is a trainable ``(seq, d_model)`` weight, broadcast over the batch."""

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(shape=tuple(input_shape[-2:]), initializer="random_normal", name="embeddings")

        def call(self, x: Any) -> Any:
            return x + keras.ops.expand_dims(self.table, 0)

    return PositionEmbedding


def _transformer(batch: int, layers: int, d_model: int, heads: int, d_ff: int, vocab: int, seq: int) -> ModelSpec:
    """Encoder-decoder Transformer (Vaswani et al.): post-norm blocks, causal decoder self-attention."""
    import keras

    src = keras.Input((seq,), batch_size=batch, dtype="int32", name="src")
    tgt = keras.Input((seq,), batch_size=batch, dtype="int32", name="tgt")
    x = _embed(src, vocab, seq, d_model, "enc")
    for i in range(layers):
        x = _attention_block(x, x, heads, d_model, False, f"enc{i}_self")
        x = _mlp_block(x, d_model, d_ff, f"enc{i}")
    y = _embed(tgt, vocab, seq, d_model, "dec")
    for i in range(layers):
        y = _attention_block(y, y, heads, d_model, True, f"dec{i}_self")
        y = _attention_block(y, x, heads, d_model, False, f"dec{i}_cross")
        y = _mlp_block(y, d_model, d_ff, f"dec{i}")
    logits = keras.layers.Dense(vocab, name="logits")(y)
    model = keras.Model([src, tgt], logits, name="transformer")
    return model, [((batch, seq), "int32"), ((batch, seq), "int32")], ((batch, seq), "int32")


def _encoder_lm(
    batch: int, layers: int, d_model: int, heads: int, d_ff: int, vocab: int, seq: int, causal: bool, name: str
) -> ModelSpec:
    """A BERT-like encoder (``causal=False``) or a GPT-like decoder (``causal=True``) with an LM head."""
    import keras

    tokens = keras.Input((seq,), batch_size=batch, dtype="int32", name="tokens")
    x = _embed(tokens, vocab, seq, d_model, "emb")
    for i in range(layers):
        x = _attention_block(x, x, heads, d_model, causal, f"l{i}_self")
        x = _mlp_block(x, d_model, d_ff, f"l{i}")
    logits = keras.layers.Dense(vocab, name="lm_head")(x)
    model = keras.Model(tokens, logits, name=name)
    return model, [((batch, seq), "int32")], ((batch, seq), "int32")


def _lstm_lm(batch: int, layers: int, units: int, vocab: int, seq: int) -> ModelSpec:
    """A stacked LSTM language model (NMT-style cells), unrolled over ``seq`` steps."""
    import keras

    tokens = keras.Input((seq,), batch_size=batch, dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, units, name="emb")(tokens)
    for i in range(layers):
        x = keras.layers.LSTM(units, return_sequences=True, unroll=True, name=f"lstm{i}")(x)
    logits = keras.layers.Dense(vocab, name="logits")(x)
    model = keras.Model(tokens, logits, name="lstm_lm")
    return model, [((batch, seq), "int32")], ((batch, seq), "int32")


MODELS: dict[str, Callable[..., ModelSpec]] = {
    "inception_v3": lambda batch: _vision("InceptionV3", 299, batch),
    "resnet50": lambda batch: _vision("ResNet50", 224, batch),
    "vgg19": lambda batch: _vision("VGG19", 224, batch),
    "nasnet_mobile": lambda batch: _vision("NASNetMobile", 224, batch),
    "nasnet_large": lambda batch: _vision("NASNetLarge", 331, batch),
    "transformer": _transformer,
    "bert_large": lambda batch, **kw: _encoder_lm(batch, causal=False, name="bert_large", **kw),
    "gpt": lambda batch, **kw: _encoder_lm(batch, causal=True, name="gpt", **kw),
    "lstm": _lstm_lm,
}

_TRANSFORMER = (("layers", 16), ("d_model", 1024), ("heads", 16), ("d_ff", 2048), ("vocab", 32000), ("seq", 64))
_BERT_LARGE = (("layers", 24), ("d_model", 1024), ("heads", 16), ("d_ff", 4096), ("vocab", 30522), ("seq", 128))
_GPT = (("layers", 12), ("d_model", 768), ("heads", 12), ("d_ff", 3072), ("vocab", 50257), ("seq", 256))
_LSTM = (("layers", 4), ("units", 2048), ("vocab", 32000), ("seq", 24))

_SPECS: list[tuple[str, int, tuple[tuple[str, Any], ...], str]] = [
    ("inception_v3", 512, (), "Celeritas: batch 512"),
    ("resnet50", 128, (), "Pesto/FastT range"),
    ("vgg19", 128, (), "Pesto/FastT range"),
    ("nasnet_mobile", 128, (), "Pesto/FastT range"),
    ("nasnet_large", 32, (), "Pesto/FastT range"),
    (
        "transformer",
        256,
        _TRANSFORMER,
        "Celeritas (16+16 layers to reach its graph size), 16 heads, 2048 hidden, batch 256",
    ),
    ("bert_large", 32, _BERT_LARGE, "BERT-large: 24 layers, 1024 hidden, 16 heads, seq 128"),
    ("gpt", 32, _GPT, "GPT-2 small: 12 layers, 768 hidden, seq 256"),
]

EXTERNAL_WEIGHT_MODELS = frozenset({"transformer", "bert_large", "gpt", "vgg19"})
"""Models whose inference ONNX keeps its weights as external data (over 500 MB of weights each)."""

ENTRIES: dict[str, Entry] = {}
for _model, _batch, _config, _note in _SPECS:
    for _mode in ("infer", "train"):
        _external = _model in EXTERNAL_WEIGHT_MODELS and _mode == "infer"
        ENTRIES[f"{_model}_{_mode}"] = Entry(
            f"{_model}_{_mode}", _model, _mode, _batch, _config, _note, external_weights=_external
        )
ENTRIES["lstm_train"] = Entry("lstm_train", "lstm", "train", 512, _LSTM, "Celeritas NMT: 4 LSTM layers, 2048 units")


# --------------------------------------------------------------------------------- building


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _fresh_model(model: str, batch: int, config: Sequence[tuple[str, Any]]) -> ModelSpec:
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    return MODELS[model](batch, **dict(config))


def build_train_graphdef(model: str, batch: int, config: Sequence[tuple[str, Any]] = ()) -> Any:
    """Trace one training step (forward, GradientTape backward, Adam update) into a GraphDef.

    The update is TensorFlow's fused ``ResourceApplyAdam`` per trainable variable with its two
    slot variables and the ``beta1_power``/``beta2_power`` accumulators, as ``tf.train.AdamOptimizer``
    built it in the graphs the papers placed (one update op per variable, not a dozen
    element-wise ops as Keras 3's own Adam emits).

    Args:
        model: a key of :data:`MODELS`.
        batch: the batch size.
        config: builder options (layer counts, widths...).

    Returns:
        ``(graph_def, concrete_function)``: the self-contained GraphDef (variables as
        ``VarHandleOp``) and the traced concrete function.
    """
    _quiet_tensorflow()
    import keras
    import tensorflow as tf

    from graphir.importers.tf import concrete_function_graphdef

    net, input_specs, label_spec = _fresh_model(model, batch, config)
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


MODELS_WITH_SOFTMAX = frozenset({"inception_v3", "resnet50", "vgg19", "nasnet_mobile", "nasnet_large"})
"""Keras applications end in a softmax; the language models return logits."""


def build_infer_onnx(model: str, batch: int, config: Sequence[tuple[str, Any]], path: Path) -> None:
    """Convert ``model(x, training=False)`` to ONNX with tf2onnx (weights frozen inline) and write ``path``."""
    _quiet_tensorflow()
    import tensorflow as tf
    import tf2onnx

    net, input_specs, _ = _fresh_model(model, batch, config)
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
    import numpy as np
    import onnx
    import tensorflow as tf
    import tf2onnx

    net, input_specs, _ = _fresh_model(model, batch, config)
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


def build_in_process(entry: Entry, directory: Path) -> Path:
    """Build ``entry`` in this process (callers should use a fresh process: see the module doc)."""
    path = entry.path(directory)
    if entry.mode == "infer" and entry.external_weights:
        build_infer_onnx_external(entry.model, entry.batch, entry.config, path)
    elif entry.mode == "infer":
        build_infer_onnx(entry.model, entry.batch, entry.config, path)
    else:
        graph_def, _ = build_train_graphdef(entry.model, entry.batch, entry.config)
        _write_atomically(path, graph_def.SerializeToString(deterministic=True))
    return path


def build_entry(name: str, directory: Path | None = None, *, force: bool = False, quiet: bool = False) -> Path:
    """Build the entry ``name`` in a fresh Python process (unless already built) and return its file.

    Raises:
        ImportError_: unknown entry, or the build failed (its last error line is in the message).
    """
    entry = ENTRIES.get(name)
    if entry is None:
        raise ImportError_(f"unknown zoo entry '{name}' (known: {', '.join(ENTRIES)})")
    directory = directory or zoo_dir()
    path = entry.path(directory)
    if all(p.exists() for p in entry.files(directory)) and not force:
        return path
    if not quiet:
        print(f"zoo: building {name} into {path} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow")
    command = [sys.executable, "-m", "graphir.tools.zoo", "--build-one", name, "--dir", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0 or not all(p.exists() for p in entry.files(directory)):
        lines = [line for line in result.stderr.strip().splitlines() if line.strip() and line[:1] not in "IWE"]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        if result.returncode < 0:
            last = f"killed by signal {-result.returncode} (out of memory?)"
        raise ImportError_(f"building zoo entry '{name}' failed: {last}")
    if not quiet:
        size = sum(p.stat().st_size for p in entry.files(directory)) / 2**20
        print(f"zoo: built {name} ({size:.1f} MiB) in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    return path


def load_entry(name: str) -> Module:
    """``graphir-opt zoo:<name>``: build the entry on first use, then import it."""
    from graphir.importers import load_module

    path = build_entry(name)
    module = load_module(path)
    module.name = name
    return module


# --------------------------------------------------------------------------------- table


def entry_stats(name: str, directory: Path | None = None) -> dict[str, Any]:
    """Import a built entry and count its nodes, edges, control edges and parameter bytes."""
    from graphir.importers import load_module
    from graphir.importers.tf import persistent_bytes

    path = ENTRIES[name].path(directory)
    module = load_module(path)
    index = module.graph.index()
    params = sum(v.nbytes for v in module.graph.constants) + sum(persistent_bytes(n) for n in module.graph.nodes)
    return {
        "name": name,
        "nodes": index.num_nodes,
        "edges": index.num_edges,
        "control": int(index.edge_control.sum()),
        "param_mib": params / 2**20,
        "file_mib": sum(p.stat().st_size for p in ENTRIES[name].files(directory)) / 2**20,
    }


TABLE_NOTES = (
    "Notes:",
    "",
    "- *nodes* = IR nodes. For training graphs (TF GraphDef of one step, function calls inlined) this is",
    "  the TF op count after inlining minus the `Const` ops of more than 16 elements, which become graph",
    "  constants like ONNX initializers (tested in `tests/unit/test_zoo.py`). For inference entries it is",
    "  the ONNX node count.",
    "- *file* counts the model file plus its external data file (`<name>.onnx.data`) where there is one:",
    "  `vgg19_infer`, `transformer_infer`, `bert_large_infer` and `gpt_infer` keep their weights as ONNX",
    "  external data and are converted with the weights as function arguments (Keras `stateless_call`),",
    "  then attached as initializers with weight-only ops folded. tf2onnx's usual frozen conversion needs",
    "  about ten times the weight bytes of memory (15-20 GiB for BERT-large and the Transformer), more than",
    "  this 24 GiB machine can spare; the architectures are unchanged. On a 1-layer GPT the result computes",
    "  the same numbers as the frozen conversion, with a few percent more nodes (tf2onnx fuses some",
    "  constant `Mul`/`Add` chains only in frozen graphs).",
    "- GELU is the tanh approximation (GPT-2/BERT): the exact form needs `Erfc`, which tf2onnx cannot",
    "  convert. Position embeddings are a learned `(seq, d_model)` table. Dropout 0.1 in attention models.",
    "- The Transformer is an encoder-decoder with 16+16 layers, d_model 1024, 16 heads, d_ff 2048,",
    "  vocabulary 32000, sequence 64, batch 256 (Celeritas's batch, layers chosen to reach its 20k+ op",
    "  training graph). BERT-large: 24 layers, hidden 1024, 16 heads, d_ff 4096, sequence 128. GPT:",
    "  GPT-2 small, 12 layers, hidden 768, 12 heads, sequence 256.",
)

TIMING_PREFIX = "Build of the whole zoo from scratch:"


def write_table(rows: list[dict[str, Any]], path: Path, build_seconds: float | None) -> None:
    """Write the Markdown size table of the zoo.

    Args:
        rows: :func:`entry_stats` of each entry, in :data:`ENTRIES` order.
        path: the Markdown file.
        build_seconds: the time of a build of every entry from scratch; ``None`` keeps the timing
            line of the existing file (a run that built nothing does not measure a build).
    """
    timing: str | None = None
    if build_seconds is not None:
        timing = f"{TIMING_PREFIX} {build_seconds:.0f} s of `make zoo` on this machine ({os.cpu_count()} cores)."
    elif path.is_file():
        timing = next((line for line in path.read_text().splitlines() if line.startswith(TIMING_PREFIX)), None)
    lines = [
        "# Model zoo sizes",
        "",
        "Written by `make zoo` (`python tools/zoo.py --table benchmarks/results/zoo.md`). Nodes and edges are",
        "those of the imported graphir graph (`graph.index()`): edges count one per (producer, consumer, value)",
        "plus zero-byte control edges (column *control*). Parameters: constant bytes (ONNX) or variable bytes",
        "(`VarHandleOp` dtype x shape, Adam slots included, for training graphs).",
        "",
    ]
    if timing is not None:
        lines += [timing, ""]
    lines += [
        "| entry | batch | nodes | edges | control | params (MiB) | file (MiB) | configuration |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        entry = ENTRIES[row["name"]]
        lines.append(
            f"| `{row['name']}` | {entry.batch} | {row['nodes']} | {row['edges']} | {row['control']} "
            f"| {row['param_mib']:.1f} | {row['file_mib']:.1f} | {entry.note} |"
        )
    lines += ["", *TABLE_NOTES]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Build zoo entries; see the module docstring."""
    parser = argparse.ArgumentParser(prog="zoo", description="Build the graphir model zoo.")
    parser.add_argument("names", nargs="*", help="entries to build (default: all)")
    parser.add_argument("--dir", type=Path, help=f"zoo folder (default: ${ZOO_DIR_ENV} or zoo/ in the repository)")
    parser.add_argument("--force", action="store_true", help="rebuild entries that exist")
    parser.add_argument("--jobs", type=int, default=2, help="parallel build processes (default 2)")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument("--table", type=Path, help="after building, import every entry and write the size table")
    parser.add_argument("--build-one", metavar="NAME", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory = args.dir or zoo_dir()
    if args.list:
        for entry in ENTRIES.values():
            print(f"{entry.name}: {entry.model} {entry.mode}, batch {entry.batch}; {entry.note}")
        return 0
    if args.build_one:
        build_in_process(ENTRIES[args.build_one], directory)
        return 0
    names = args.names or list(ENTRIES)
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        print(f"zoo: error: unknown entries {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 1
    # Biggest builds first, so the two workers finish together.
    order = sorted(names, key=lambda n: (ENTRIES[n].model not in ("transformer", "bert_large", "nasnet_large"), n))
    existed = [n for n in names if all(p.exists() for p in ENTRIES[n].files(directory))]
    start = time.perf_counter()
    failed = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {
            pool.submit(build_entry, n, directory, force=args.force): n for n in order if not ENTRIES[n].exclusive
        }
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
            except ImportError_ as exc:
                print(f"zoo: error: {exc.message}", file=sys.stderr)
                failed = True
    for name in (n for n in order if ENTRIES[n].exclusive):
        try:
            build_entry(name, directory, force=args.force)
        except ImportError_ as exc:
            print(f"zoo: error: {exc.message}", file=sys.stderr)
            failed = True
    elapsed = time.perf_counter() - start
    from_scratch = len(names) == len(ENTRIES) and (args.force or not existed)
    print(f"zoo: {len(names)} entries ready in {elapsed:.0f}s", file=sys.stderr)
    if failed:
        return 1
    if args.table:
        rows = []
        for name in sorted(names):
            print(f"zoo: importing {name} ...", file=sys.stderr, flush=True)
            rows.append(entry_stats(name, directory))
        write_table(rows, args.table, time.perf_counter() - start if from_scratch else None)
        print(f"zoo: wrote {args.table}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
