"""Ops carrying decoding state between calls (ONNX opset 24+): CausalConvWithState, TensorScatter, LinearAttention.

* ``CausalConvWithState(input[B, C, L], weight[C, 1, k], bias[C]?, past_state[B, C, k-1]?)``
  (``activation`` ``none``/``silu``/``swish``): the input left-padded with the past state (zeros
  when absent), a depthwise 1-D convolution without padding (``group = C``), the bias, the
  activation (``x · sigmoid(x)`` for both names); results ``output[B, C, L]`` and
  ``present_state[B, C, k-1]``, the last ``k - 1`` positions of the padded input.
  **Lowering**: ``tf.nn.depthwise_conv2d`` on ``[B, 1, L + k - 1, C]`` (float16 computed in float32,
  TensorFlow's CPU kernel has no half variant). **Cost**: ``2 · B · C · L · k`` FLOPs.
* ``TensorScatter(past_cache, update, write_indices[B]?)`` (``axis`` default -2, ``mode``
  ``linear``/``circular``): a copy of the cache in which, for every batch row ``b`` (axis 0) and
  every prefix index before ``axis``, positions ``write_indices[b] + s`` along ``axis`` (modulo the
  cache length in ``circular`` mode) take ``update``'s position ``s``. **Lowering**: the axis moved
  next to the batch, ``tf.tensor_scatter_nd_update`` with ``(b, position)`` indices, moved back.
  **Cost**: bytes only (a copy and a scatter).
* ``LinearAttention(query, key, value [B, T, H*D], past_state[B, Hkv, dk, dv]?, decay?, beta?)``
  (``q_num_heads``, ``kv_num_heads``, ``scale`` (0: ``1/sqrt(dk)``), ``update_rule``
  ``linear``/``gated``/``delta``/``gated_delta``): per step ``S <- S · exp(g)`` (gated),
  ``v <- beta · (v - S^T k)`` (delta), ``S <- S + k v^T``, ``out = scale · q^T S`` (the state
  repeated over each group of query heads); results the outputs ``[B, T, Hq*dv]`` and the last
  state. **Lowering**: ``tf.scan`` over time in float32 (as the reference computes). **Cost**:
  about ``6 · B · T · Hq · dk · dv`` FLOPs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg
from graphir.ops.registry import Estimate, cost, lowering

if TYPE_CHECKING:
    from graphir.ir import Node

__all__: list[str] = []


@cost("onnx.CausalConvWithState")
def _causal_conv_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """``2 · B · C · L · k`` FLOPs (a depthwise convolution), bytes in + out."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None or len(ins[0]) != 3 or len(ins[1]) != 3:
        return None
    batch, channels, length = ins[0]
    return 2.0 * batch * channels * length * ins[1][2], float(sum(ib) + sum(ob)), 0


@lowering("CausalConvWithState")
def _causal_conv_with_state(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    x, weight = operands[0], operands[1]
    bias, past = _arg(operands, 2), _arg(operands, 3)
    activation = str(cx.param("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise cx.error(f"has activation '{activation}', expected none, silu or swish")
    dtype = x.dtype
    compute = tf.float32 if dtype == tf.float16 else dtype
    x, weight = tf.cast(x, compute), tf.cast(weight, compute)
    k = tf.shape(weight)[2]
    shape = tf.shape(x)
    if past is None:
        past = tf.zeros(tf.stack([shape[0], shape[1], k - 1]), compute)
    padded = tf.concat([tf.cast(past, compute), x], axis=2)  # [B, C, L + k - 1]
    images = tf.transpose(padded, [0, 2, 1])[:, None]  # [B, 1, L + k - 1, C]
    kernel = tf.transpose(weight[:, 0, :])[None, :, :, None]  # [1, k, C, 1]
    out = tf.nn.depthwise_conv2d(images, kernel, strides=[1, 1, 1, 1], padding="VALID")
    out = tf.transpose(out[:, 0], [0, 2, 1])  # [B, C, L]
    if bias is not None:
        out = out + tf.cast(bias, compute)[None, :, None]
    if activation != "none":
        out = out * tf.sigmoid(out)
    present = padded[:, :, tf.shape(padded)[2] - (k - 1) :]
    return cx.present([tf.cast(out, dtype), tf.cast(present, dtype)])


@cost("onnx.TensorScatter")
def _tensor_scatter_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """No arithmetic: the cache copied and the update written (bytes in + out)."""
    return 0.0, float(sum(ib) + sum(ob)), 0


@lowering("TensorScatter")
def _tensor_scatter(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    cache, update = operands[0], operands[1]
    indices = _arg(operands, 2)
    mode = str(cx.param("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise cx.error(f"has mode '{mode}', expected linear or circular")
    rank = cache.shape.rank
    if rank is None:
        raise cx.error("past_cache has unknown rank; lowering needs it")
    axis = int(cx.param("axis", -2)) % rank
    if axis == 0:
        raise cx.error("scatters along the batch axis 0, which its write_indices index")
    perm = [0, axis, *(d for d in range(1, rank) if d != axis)]
    inverse = [perm.index(d) for d in range(rank)]
    moved_cache, moved_update = tf.transpose(cache, perm), tf.transpose(update, perm)  # [B, S, ...]
    batch, steps, capacity = tf.shape(moved_update)[0], tf.shape(moved_update)[1], tf.shape(moved_cache)[1]
    starts = tf.zeros([batch], tf.int64) if indices is None else tf.cast(tf.reshape(indices, [-1]), tf.int64)
    positions = starts[:, None] + tf.range(tf.cast(steps, tf.int64), dtype=tf.int64)[None, :]  # [B, S]
    if mode == "circular":
        positions = positions % tf.cast(capacity, tf.int64)
    rows = tf.broadcast_to(tf.range(tf.cast(batch, tf.int64), dtype=tf.int64)[:, None], tf.shape(positions))
    scattered = tf.tensor_scatter_nd_update(moved_cache, tf.stack([rows, positions], axis=-1), moved_update)
    return [tf.transpose(scattered, inverse)]


@cost("onnx.LinearAttention")
def _linear_attention_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """A rank-1 state update, a read and the delta rule's retrieval per step and head: ``~6 · B · T · H · dk · dv``."""
    if len(ins) < 3 or any(s is None or len(s) != 3 for s in ins[:3]):
        return None
    heads = node.params.get("q_num_heads")
    if not isinstance(heads, int) or heads <= 0:
        return None
    batch, steps, width = ins[0]  # the head widths multiply out: H * dk * dv = width * dv
    value_width = ins[2][2]
    kv_heads = node.params.get("kv_num_heads")
    dv = value_width // kv_heads if isinstance(kv_heads, int) and kv_heads > 0 else value_width
    return 6.0 * batch * steps * width * dv, float(sum(ib) + sum(ob)), 0


@lowering("LinearAttention")
def _linear_attention(cx: OpContext, operands: list[Any]) -> list[Any]:
    """``tf.scan`` over time of the state recurrence (linear / gated / delta / gated-delta rules)."""
    tf = cx.tf
    query, key, value = operands[0], operands[1], operands[2]
    past, decay, beta = (_arg(operands, k) for k in (3, 4, 5))
    rule = str(cx.param("update_rule", "gated_delta"))
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise cx.error(f"has update_rule '{rule}', expected linear, gated, delta or gated_delta")
    q_heads, kv_heads = int(cx.param("q_num_heads", 0)), int(cx.param("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise cx.error(f"has q_num_heads {q_heads} and kv_num_heads {kv_heads}: not a positive multiple")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if (decay is None) == gating or (beta is None) == delta:
        raise cx.error(
            f"update_rule '{rule}' needs decay {'given' if gating else 'absent'}, beta {'given' if delta else 'absent'}"
        )
    out_dtype = query.dtype
    state_dtype = past.dtype if past is not None else out_dtype
    batch, steps = tf.shape(query)[0], tf.shape(query)[1]
    dk = tf.shape(query)[2] // q_heads
    dv = tf.shape(value)[2] // kv_heads

    def time_major(x: Any, heads: int) -> Any:  # [B, T, H*D] -> [T, B, H, D] in float32
        x = tf.reshape(tf.cast(x, tf.float32), tf.stack([batch, steps, heads, -1]))
        return tf.transpose(x, [1, 0, 2, 3])

    elems = [time_major(query, q_heads), time_major(key, kv_heads), time_major(value, kv_heads)]
    if gating:  # decay [B, T, H] or [B, T, H*dk] -> [T, B, H, 1 or dk]
        elems.append(time_major(decay, kv_heads))
    if delta:  # beta [B, T, H] or [B, T, 1] -> [T, B, H or 1, 1]
        elems.append(time_major(beta, int(beta.shape[-1]) if beta.shape[-1] is not None else kv_heads))
    scale = float(cx.param("scale", 0.0) or 0.0)
    scale_value = tf.math.rsqrt(tf.cast(dk, tf.float32)) if scale == 0.0 else tf.constant(scale)
    group = q_heads // kv_heads
    if past is None:
        state0 = tf.zeros(tf.stack([batch, kv_heads, dk, dv]), tf.float32)
    else:
        state0 = tf.cast(past, tf.float32)

    def step(carry: tuple[Any, Any], inputs: tuple[Any, ...]) -> tuple[Any, Any]:
        state, _ = carry
        q_t, k_t, v_t = inputs[0], inputs[1], inputs[2]
        rest = list(inputs[3:])
        if gating:
            state = state * tf.exp(rest.pop(0))[..., None]  # [B, H, 1 or dk, 1]
        if delta:
            retrieved = tf.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = rest.pop(0) * (v_t - retrieved)
        state = state + k_t[..., :, None] * v_t[..., None, :]
        read = state if group == 1 else tf.repeat(state, group, axis=1)
        return state, scale_value * tf.einsum("bhd,bhdm->bhm", q_t, read)

    out0 = tf.zeros(tf.stack([batch, q_heads, dv]), tf.float32)
    states, outs = tf.scan(step, tuple(elems), initializer=(state0, out0))
    output = tf.reshape(tf.transpose(outs, [1, 0, 2, 3]), tf.stack([batch, steps, q_heads * dv]))
    present = tf.cond(steps > 0, lambda: states[-1], lambda: state0)
    return cx.present([tf.cast(output, out_dtype), tf.cast(present, state_dtype)])
