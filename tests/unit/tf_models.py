"""Not a test module: tiny training steps traced by the zoo's own builder, for the re-batching tests.

``build_train(model, batch)`` returns the GraphDef of one Adam step (forward, GradientTape backward,
``ResourceApplyAdam`` per variable: :func:`graphir.tools.zoo_convert.build_train_graphdef`) of
``gpt`` (the zoo's GPT at a tiny config whose head size and sequence length equal 6, so that
many dimensions collide with a batch of 6), ``lstm`` and ``transformer`` (the zoo's, tiny), ``cnn``
(a small CNN with Keras batch norm, max and average pooling, a depthwise convolution and a softmax
head) or ``cnn_plain`` (the same without batch norm). ``dropout=False`` turns the GPT's
dropout off (a numeric comparison of two graphs needs the same randomness). Needs TensorFlow.
"""

from __future__ import annotations

from typing import Any

GPT_CONFIG = (("layers", 2), ("d_model", 24), ("heads", 4), ("d_ff", 48), ("vocab", 30), ("seq", 6))
"""A tiny GPT: head size 24 / 4 = 6 and sequence 6."""


LSTM_CONFIG = (("layers", 2), ("units", 16), ("vocab", 20), ("seq", 4))
"""A tiny unrolled LSTM language model."""
TRANSFORMER_CONFIG = (("layers", 1), ("d_model", 24), ("heads", 4), ("d_ff", 48), ("vocab", 30), ("seq", 5))
"""A tiny encoder-decoder Transformer."""


def tiny_cnn(batch: int, size: int = 12, classes: int = 5) -> Any:
    """A small CNN training model (the zoo's ModelSpec shape)."""
    import keras

    images = keras.Input((size, size, 3), batch_size=batch, name="images")
    x = keras.layers.Conv2D(8, 3, padding="same", name="c1")(images)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.MaxPooling2D(2, name="p1")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.Conv2D(12, 3, strides=2, padding="same", name="c2")(x)
    x = keras.layers.BatchNormalization(name="bn2")(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same", name="ap")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(images, x, name="tiny_cnn"), [((batch, size, size, 3), "float32")], ((batch,), "int32")


def plain_cnn(batch: int, size: int = 12, classes: int = 5) -> Any:
    """A small CNN without batch statistics (micro-batches then compute the same step exactly)."""
    import keras

    images = keras.Input((size, size, 3), batch_size=batch, name="images")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu", name="c1")(images)
    x = keras.layers.MaxPooling2D(2, name="p1")(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same", name="dw")(x)
    x = keras.layers.Conv2D(12, 3, strides=2, padding="same", activation="relu", name="c2")(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same", name="ap")(x)
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    x = keras.layers.Dense(classes, activation="softmax", name="fc")(x)
    return keras.Model(images, x, name="plain_cnn"), [((batch, size, size, 3), "float32")], ((batch,), "int32")


def build_train(model: str, batch: int, dropout: bool = True) -> tuple[Any, Any]:
    """``(graph_def, concrete_function)`` of one training step of ``model`` at ``batch``."""
    from graphir.tools import zoo_convert, zoo_models

    if model == "cnn":
        zoo_models.MODELS["tiny_cnn"] = tiny_cnn
        zoo_convert.MODELS_WITH_SOFTMAX = zoo_models.MODELS_WITH_SOFTMAX | {"tiny_cnn"}
        return zoo_convert.build_train_graphdef("tiny_cnn", batch, ())
    if model == "cnn_plain":
        zoo_models.MODELS["plain_cnn"] = plain_cnn
        zoo_convert.MODELS_WITH_SOFTMAX = zoo_models.MODELS_WITH_SOFTMAX | {"plain_cnn"}
        return zoo_convert.build_train_graphdef("plain_cnn", batch, ())
    if not dropout:
        zoo_models.DROPOUT = 0.0
    configs = {"gpt": GPT_CONFIG, "lstm": LSTM_CONFIG, "transformer": TRANSFORMER_CONFIG}
    return zoo_convert.build_train_graphdef(model, batch, configs[model])
