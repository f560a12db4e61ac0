"""The model zoo's Keras model definitions (vision applications, Transformer, BERT/GPT, LSTM).

Each builder of :data:`MODELS` returns a :data:`ModelSpec`: the Keras model (``weights=None``,
random initialisation), its input specs as ``(shape, dtype)`` pairs and its label spec.
:func:`fresh_model` builds one under the zoo's fixed seed. Keras (and so TensorFlow, the ``tf``
extra) is imported inside the builders only. The entries using them are in
:mod:`graphir.tools.zoo_entries`, the conversions to ONNX and GraphDef in :mod:`graphir.tools.zoo_convert`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

SEED = 0
"""Seed of Keras's random initialisation and of the dropout layers."""
DROPOUT = 0.1
"""Dropout rate of the attention models (attention weights and residual branches, as in the papers)."""

# Each builder returns (keras model, input specs as (shape, dtype) pairs, label spec (shape, dtype)).

ModelSpec = tuple[Any, list[tuple[tuple[int, ...], str]], tuple[tuple[int, ...], str]]


def _vision(app: str, size: int, batch: int, classes: int = 1000) -> ModelSpec:
    import keras

    builder = getattr(keras.applications, app)
    model = builder(weights=None, input_shape=(size, size, 3), classes=classes)
    return model, [((batch, size, size, 3), "float32")], ((batch,), "int32")


def _resnet_v2_200(batch: int, size: int = 224, classes: int = 1000) -> ModelSpec:
    """ResNet-200 v2 (pre-activation; He et al. 2016, "Identity Mappings in Deep Residual Networks").

    TF-slim's ``resnet_v2_200`` (``nets/resnet_v2.py``): bottleneck stacks of 3, 24, 36 and 3 units
    of base depth 64, 128, 256 and 512, the stride on each stack's last unit and none on the last
    stack. Keras builds its ResNet152V2 (3, 8, 36, 3) from the same stack function, used here with
    ResNet-200's unit counts; FastT's Table 1 trains this model.
    """
    import keras
    from keras.src.applications import resnet

    def stack(x: Any) -> Any:
        x = resnet.stack_residual_blocks_v2(x, 64, 3, name="conv2")
        x = resnet.stack_residual_blocks_v2(x, 128, 24, name="conv3")
        x = resnet.stack_residual_blocks_v2(x, 256, 36, name="conv4")
        return resnet.stack_residual_blocks_v2(x, 512, 3, stride1=1, name="conv5")

    model = resnet.ResNet(
        stack, True, True, name="resnet200v2", weights=None, input_shape=(size, size, 3), classes=classes
    )
    assert isinstance(model, keras.Model)
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


def _recurrent_lm(batch: int, cell: str, layers: int, units: int, vocab: int, seq: int) -> ModelSpec:
    """A stacked LSTM or GRU language model with Keras's fused recurrent layers (not unrolled).

    tf2onnx exports the LSTM layers as ONNX ``LSTM`` ops; Keras 3's GRU (``reset_after``) has no
    tf2onnx rewrite, so each GRU layer is exported as its ``tf.while_loop``: an ONNX ``Loop``.
    """
    import keras

    layer = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[cell]
    tokens = keras.Input((seq,), batch_size=batch, dtype="int32", name="tokens")
    x = keras.layers.Embedding(vocab, units, name="emb")(tokens)
    for i in range(layers):
        x = layer(units, return_sequences=True, name=f"{cell}{i}")(x)
    logits = keras.layers.Dense(vocab, name="logits")(x)
    model = keras.Model(tokens, logits, name=f"{cell}_seq")
    return model, [((batch, seq), "int32")], ((batch, seq), "int32")


MODELS: dict[str, Callable[..., ModelSpec]] = {
    "inception_v3": lambda batch: _vision("InceptionV3", 299, batch),
    "resnet50": lambda batch: _vision("ResNet50", 224, batch),
    "vgg19": lambda batch: _vision("VGG19", 224, batch),
    "resnet200": _resnet_v2_200,
    "nasnet_mobile": lambda batch: _vision("NASNetMobile", 224, batch),
    "nasnet_large": lambda batch: _vision("NASNetLarge", 331, batch),
    "transformer": _transformer,
    "bert_large": lambda batch, **kw: _encoder_lm(batch, causal=False, name="bert_large", **kw),
    "gpt": lambda batch, **kw: _encoder_lm(batch, causal=True, name="gpt", **kw),
    "lstm": _lstm_lm,
    "lstm_seq": lambda batch, **kw: _recurrent_lm(batch, "lstm", **kw),
    "gru_seq": lambda batch, **kw: _recurrent_lm(batch, "gru", **kw),
    "gru_lm": lambda batch, **kw: _recurrent_lm(batch, "gru", **kw),  # written with ONNX GRU ops (zoo_convert)
}

MODELS_WITH_SOFTMAX = frozenset({"inception_v3", "resnet50", "resnet200", "vgg19", "nasnet_mobile", "nasnet_large"})
"""Keras applications end in a softmax; the language models return logits."""


def fresh_model(model: str, batch: int, config: Sequence[tuple[str, Any]]) -> ModelSpec:
    """Build ``MODELS[model]`` in a cleared Keras session under :data:`SEED`."""
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    return MODELS[model](batch, **dict(config))
