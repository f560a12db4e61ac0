"""Attention-block ops of the default ONNX domain: ``Attention`` (opsets 23-25), ``RotaryEmbedding``.

Lowering facets only (their cost falls back to bytes-only estimates and they are never split).

* ``Attention``: scaled dot-product attention on 4-D ``[batch, heads, seq, head_size]`` or 3-D
  ``[batch, seq, hidden]`` inputs (``q_num_heads``/``kv_num_heads`` split the hidden size), with
  the KV cache (``past_key``/``past_value`` concatenated before the new keys, returned as
  ``present_key``/``present_value``), boolean or additive masks (padded with "masked" up to the
  total key length), ``is_causal`` aligned bottom-right to the cache (``j <= i + past``, per batch
  ``nonpad_kv_seqlen - q_len`` for an external cache), sliding windows, grouped-query heads (keys and
  values repeated), ``softcap``, ``softmax_precision`` and the four ``qk_matmul_output_mode`` taps.
  The scale is applied as ``sqrt(scale)`` to both Q and K, as the ONNX reference does, and rows
  whose keys are all masked give zeros (not NaN).
* ``RotaryEmbedding``: rotates the first ``rotary_embedding_dim`` features of each head by the
  cached cos/sin rows of each position (``interleaved`` pairs ``(2i, 2i+1)``, else halves).
"""

# The op families share the package-private helpers of graphir.ops.work, split_plan and lower_context.
# pyright: reportPrivateUsage=false
from __future__ import annotations

from typing import Any

import numpy as np

from graphir.ops.lower_context import OpContext, _arg, _onnx_elem_dtype
from graphir.ops.registry import lowering


def _heads(tf: Any, x: Any, heads: int) -> Any:
    """``[batch, seq, heads * size]`` -> ``[batch, heads, seq, size]``."""
    shape = tf.shape(x)
    return tf.transpose(tf.reshape(x, tf.stack([shape[0], shape[1], heads, -1])), [0, 2, 1, 3])


def _masked(tf: Any, allowed: Any, dtype: Any) -> Any:
    """0 where ``allowed``, -inf elsewhere."""
    return tf.where(allowed, tf.zeros([], dtype), tf.fill([], tf.constant(-np.inf, dtype)))


@lowering("Attention")
def _attention(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    q, k, v = operands[:3]
    mask, past_k, past_v, nonpad = (_arg(operands, i) for i in (3, 4, 5, 6))
    dtype = q.dtype
    three_d = cx.rank(0) == 3
    q_heads, kv_heads = cx.param("q_num_heads"), cx.param("kv_num_heads")
    if three_d:
        if q_heads is None or kv_heads is None:
            raise cx.error("has 3-D inputs without q_num_heads/kv_num_heads")
        q, k, v = _heads(tf, q, int(q_heads)), _heads(tf, k, int(kv_heads)), _heads(tf, v, int(kv_heads))
    head_size = tf.cast(tf.shape(q)[3], dtype)
    scale = cx.param("scale")
    scale = tf.math.rsqrt(head_size) if scale is None else tf.constant(float(scale), dtype)
    root = tf.math.sqrt(tf.cast(scale, dtype))
    present_k = k if past_k is None else tf.concat([past_k, k], axis=2)
    present_v = v if past_v is None else tf.concat([past_v, v], axis=2)
    k, v = present_k, present_v
    q_len, kv_len = tf.shape(q)[2], tf.shape(k)[2]
    bias = tf.zeros(tf.stack([q_len, kv_len]), dtype)
    if mask is not None:
        width = kv_len - tf.shape(mask)[-1]
        rank = cx.rank(3)
        paddings = tf.concat([tf.zeros([rank - 1, 2], tf.int32), tf.stack([[0, tf.maximum(width, 0)]])], axis=0)
        fill = False if mask.dtype == tf.bool else tf.constant(-np.inf, mask.dtype)
        mask = tf.pad(mask, paddings, constant_values=fill)
        if mask.dtype == tf.bool:
            mask = _masked(tf, mask, dtype)
        mask = tf.cast(mask, dtype)
    left, right = int(cx.param("left_window_size", -1)), int(cx.param("right_window_size", -1))
    row = tf.range(q_len)[:, None]
    col = tf.range(kv_len)[None, :]
    if past_k is None and nonpad is not None:
        offset: Any = tf.reshape(tf.cast(nonpad, tf.int32), [-1, 1, 1, 1]) - q_len  # per batch
    elif past_k is not None:
        offset = tf.shape(past_k)[2]
    else:
        offset = 0
    if int(cx.param("is_causal", 0)):
        base = bias if mask is None else mask
        bias = base + _masked(tf, col <= row + offset, dtype)
    elif mask is not None:
        bias = bias + mask
    if left >= 0 or right >= 0:
        diff = row + offset - col
        allowed = tf.ones_like(diff, tf.bool)
        if left >= 0:
            allowed = tf.logical_and(allowed, diff <= left)
        if right >= 0:
            allowed = tf.logical_and(allowed, -diff <= right)
        bias = bias + _masked(tf, allowed, dtype)
    if nonpad is not None:
        keep = col[None, None] < tf.reshape(tf.cast(nonpad, tf.int32), [-1, 1, 1, 1])
        bias = bias + _masked(tf, keep, dtype)
    heads_q, heads_k = tf.shape(q)[1], tf.shape(k)[1]
    repeats = heads_q // heads_k
    k = tf.repeat(k, repeats, axis=1)
    v = tf.repeat(v, repeats, axis=1)
    scores = tf.linalg.matmul(q * root, k * root, transpose_b=True)
    softcap = float(cx.param("softcap", 0.0) or 0.0)
    if softcap > 0:
        scores = tf.math.tanh(scores / softcap) * softcap
    with_bias = scores + bias
    mode = int(cx.param("qk_matmul_output_mode", 0))
    tap = with_bias if mode == 2 else scores
    precision = cx.param("softmax_precision")
    logits = with_bias if precision is None else tf.cast(with_bias, _onnx_elem_dtype(tf, int(precision)))
    peak = tf.reduce_max(logits, axis=-1, keepdims=True)
    peak = tf.where(tf.math.is_inf(peak) & (peak < 0), tf.zeros_like(peak), peak)
    weights = tf.math.exp(logits - peak)
    total = tf.reduce_sum(weights, axis=-1, keepdims=True)
    weights = weights / tf.where(total == 0, tf.ones_like(total), total)
    masked_rows = tf.reduce_max(bias, axis=-1, keepdims=True)
    masked_rows = tf.math.is_inf(masked_rows) & (masked_rows < 0)
    weights = tf.where(masked_rows, tf.zeros_like(weights), weights)
    if mode == 3:
        tap = weights
    weights = tf.cast(weights, dtype)
    output = tf.linalg.matmul(weights, v)
    if three_d:
        output = tf.transpose(output, [0, 2, 1, 3])
        shape = tf.shape(output)
        output = tf.reshape(output, tf.stack([shape[0], shape[1], -1]))
    results = [output, present_k, present_v, tf.cast(tap, dtype)]
    return cx.present(results)


@lowering("RotaryEmbedding")
def _rotary_embedding(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, cos_cache, sin_cache = operands[:3]
    positions = _arg(operands, 3)
    rank = cx.rank(0)
    heads = cx.param("num_heads")
    interleaved = bool(int(cx.param("interleaved", 0)))
    rotary = int(cx.param("rotary_embedding_dim", 0))
    if rank == 4:
        x = tf.transpose(x, [0, 2, 1, 3])  # [batch, seq, heads, size]
    else:
        shape = tf.shape(x)
        if heads is None:
            raise cx.error("has a 3-D input without num_heads")
        x = tf.reshape(x, tf.stack([shape[0], shape[1], int(heads), -1]))
    head_size = tf.shape(x)[3]
    if positions is not None:
        cos_cache = tf.gather(cos_cache, positions)  # [batch, seq, rotary / 2]
        sin_cache = tf.gather(sin_cache, positions)
    size = head_size if rotary == 0 else rotary
    half = size // 2
    cos = tf.expand_dims(cos_cache[..., :half], -2)
    sin = tf.expand_dims(sin_cache[..., :half], -2)
    rotate, keep = x[..., :size], x[..., size:]
    if interleaved:
        x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
    else:
        x1, x2 = rotate[..., :half], rotate[..., half:]
    real = x1 * cos - x2 * sin
    imag = x2 * cos + x1 * sin
    if interleaved:
        joined = tf.reshape(tf.stack([real, imag], axis=-1), tf.shape(rotate))
    else:
        joined = tf.concat([real, imag], axis=-1)
    y = tf.concat([joined, keep], axis=-1)
    if rank == 4:
        return [tf.transpose(y, [0, 2, 1, 3])]
    return [tf.reshape(y, tf.shape(operands[0]))]
