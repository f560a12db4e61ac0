"""Training-step and sequence ops: optimizers, variable updates, random generators, losses, RNN cells, top-k.

Cost facets, and the lowerings of ONNX's two losses (no split rules):

* optimizers (``ResourceApplyAdam``, ``ApplyGradientDescent``... and their sparse forms): ``k`` FLOPs
  per element and ``t`` variable-sized tensors read and written (variable, slots, gradient), per rule;
* variable assignment: read the value, write the variable (``AssignAdd``/``AssignSub``: read both);
* random generators: ``4 · |out|`` FLOPs, bytes out;
* recurrent cells (ONNX ``LSTM``/``GRU``/``RNN``, TF ``BlockLSTM``...): two GEMMs per step plus ~10 FLOPs
  per gate unit; their gradients twice the forward GEMM work;
* softmax cross-entropy: ~8 FLOPs per logit; top-k: ``|in| · log2(k)`` comparisons.

Lowerings: ``NegativeLogLikelihoodLoss`` picks each target's log-probability through a one-hot
product (classes moved last), with per-class weights and ``ignore_index`` (ignored positions weigh
0; ``mean`` divides by the total weight); ``SoftmaxCrossEntropyLoss`` is that loss on the
log-softmax over the class axis, whose values are its optional second result.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg
from graphir.ops.registry import Estimate, Estimator, Shape, cost, lowering
from graphir.ops.work import _elems, _produce

if TYPE_CHECKING:
    from graphir.ir import Node

cost(
    *("RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "RandomStandardNormal"),
    *("TruncatedNormal", "RandomUniformInt", "StatelessRandomUniformV2", "StatelessRandomNormalV2"),
    *("StatelessTruncatedNormalV2", "StatelessRandomUniformIntV2", "Multinomial", "Bernoulli"),
    *("StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal", "StatelessRandomGetKeyCounter"),
)(_produce(4))

# --------------------------------------------------------------------------- recurrent cells


@cost("LSTM", "GRU", "RNN")
def _onnx_rnn(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """ONNX RNNs: two GEMMs per step plus ~10 FLOPs per gate unit.

    With X = [seq, batch, in], W = [dirs, gates·h, in], R = [dirs, gates·h, h]:
    ``2 · seq · batch · dirs · gates·h · (in + h)``.
    """
    if len(ins) < 3:
        return None
    x, w, r = ins[0], ins[1], ins[2]
    if x is None or w is None or r is None or len(x) != 3 or len(w) != 3 or len(r) != 3:
        return None
    seq, batch, dirs, gate_units, width, hidden = x[0], x[1], w[0], w[1], w[2], r[2]
    flops = 2.0 * seq * batch * dirs * gate_units * (width + hidden) + 10.0 * seq * batch * dirs * gate_units
    return flops, float(sum(ib) + sum(ob)), 0


@cost("LSTMBlockCell", "BlockLSTM", "BlockLSTMV2", "GRUBlockCell")
def _tf_lstm_block(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """TF fused LSTM cell(s): x = [(seq,) batch, in], w = [in + h, 4h]: ``2 · steps · batch · (in+h) · 4h``."""
    weight = next((s for s in ins if s is not None and len(s) == 2 and s[0] > 0 and s[1] % 4 == 0), None)
    x = ins[1] if node.op.endswith(("BlockLSTM", "BlockLSTMV2")) and len(ins) > 1 else (ins[0] if ins else None)
    if weight is None or x is None or len(x) < 2:
        return None
    steps = x[0] if len(x) == 3 else 1
    batch = x[-2]
    flops = 2.0 * steps * batch * weight[0] * weight[1] + 10.0 * steps * batch * weight[1]
    return flops, float(sum(ib) + sum(ob)), 0


@cost("LSTMBlockCellGrad", "BlockLSTMGrad", "BlockLSTMGradV2", "GRUBlockCellGrad")
def _tf_lstm_block_grad(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Fused LSTM gradients: about twice the forward GEMM work."""
    forward = _tf_lstm_block(node, ins, outs, ib, ob)
    return None if forward is None else (2.0 * forward[0], forward[1], 0)


# --------------------------------------------------------------------------- optimizers


def _optimizer(flops_per_element: float, tensors_touched: int) -> Estimator:
    """Optimizer updates (``ResourceApply*``): ``k`` FLOPs per element.

    The update reads/writes ``tensors_touched`` variable-sized tensors (variable, slots, gradient);
    the size is the gradient's (variable inputs are resource handles of zero bytes).
    """

    def estimate(
        node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
    ) -> Estimate | None:
        known = [_elems(s) for s in ins if s is not None]
        if not known:
            return None
        elements = max(known)
        itemsize = max((b // e for b, e in zip(ib, (_elems(s) for s in ins), strict=True) if e), default=4)
        return flops_per_element * elements, float(tensors_touched * elements * itemsize), 0

    estimate.__doc__ = f"Optimizer: ``{flops_per_element:g}`` FLOPs per element, {tensors_touched} tensors moved."
    return estimate


_OPTIMIZERS: dict[str, tuple[float, int]] = {
    # name: (FLOPs per element, variable-sized tensors read + written)
    "GradientDescent": (2, 3),  # var -= lr * g
    "ProximalGradientDescent": (6, 3),
    "Momentum": (4, 5),  # accum = m·accum + g; var -= lr·accum
    "KerasMomentum": (4, 5),
    "Adagrad": (5, 5),
    "AdagradV2": (6, 5),
    "ProximalAdagrad": (9, 5),
    "AdagradDA": (10, 7),
    "Adadelta": (12, 7),
    "RMSProp": (10, 7),
    "CenteredRMSProp": (14, 9),
    "Adam": (18, 7),  # m, v updates, bias-corrected step: read var, m, v, g; write var, m, v
    "AdamWithAmsgrad": (20, 9),
    "AdaMax": (12, 7),
    "Ftrl": (20, 7),
    "FtrlV2": (22, 7),
    "PowerSign": (10, 5),
    "AddSign": (10, 5),
}
for _name, (_flops, _tensors) in _OPTIMIZERS.items():
    cost(f"ResourceApply{_name}", f"Apply{_name}", f"ResourceSparseApply{_name}", f"SparseApply{_name}")(
        _optimizer(_flops, _tensors)
    )


@cost("AssignVariableOp", "Assign", "AssignVariableXlaConcatND")
def _assign(node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]) -> Estimate:
    """Variable assignment: read the value, write the variable."""
    return 0.0, float(2 * max(ib, default=0)), 0


@cost("AssignAddVariableOp", "AssignSubVariableOp", "AssignAdd", "AssignSub")
def _assign_update(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate:
    """In-place add/sub into a variable: read both, write one; one FLOP per element."""
    largest = max((s for s in ins if s is not None), key=_elems, default=None)
    return float(_elems(largest)), float(3 * max(ib, default=0)), 0


# --------------------------------------------------------------------------- losses, top-k


@cost("TopK", "TopKV2")
def _topk(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Partial sort: ``|in| · log2(k)`` comparisons (k from the values output's last dimension)."""
    if not ins or ins[0] is None or not outs or outs[0] is None or not outs[0]:
        return None
    return float(_elems(ins[0]) * max(1.0, math.log2(max(outs[0][-1], 2)))), float(sum(ib) + sum(ob)), 0


@cost("SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyLoss")
def _softmax_xent(
    node: Node, ins: list[Shape | None], outs: list[Shape | None], ib: list[int], ob: list[int]
) -> Estimate | None:
    """Softmax + log + loss + gradient over the logits: ~8 FLOPs per logit."""
    if not ins or ins[0] is None:
        return None
    return 8.0 * _elems(ins[0]), float(sum(ib) + sum(ob)), 0


# --------------------------------------------------------------------------- lowering (losses)


def _nll(cx: OpContext, log_prob: Any, target: Any, weight: Any) -> Any:
    """``NegativeLogLikelihoodLoss`` of ``log_prob`` [N, C, d...] at ``target`` [N, d...]."""
    tf = cx.tf
    ignore = cx.param("ignore_index")
    rank = log_prob.shape.rank
    classes = tf.shape(log_prob)[1]
    last = tf.transpose(log_prob, [0, *range(2, rank), 1])  # [N, d..., C]
    target = tf.cast(target, tf.int64)
    keep = tf.ones_like(target, tf.bool) if ignore is None else tf.not_equal(target, int(ignore))
    safe = tf.where(keep, target, tf.zeros_like(target))
    picked = tf.reduce_sum(last * tf.one_hot(safe, classes, dtype=log_prob.dtype), axis=-1)
    w = tf.cast(keep, log_prob.dtype)
    if weight is not None:
        w = w * tf.gather(weight, safe)
    loss = -picked * w
    reduction = cx.param("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return tf.reduce_sum(loss)
    return tf.reduce_sum(loss) / tf.reduce_sum(w)


@lowering("NegativeLogLikelihoodLoss")
def _negative_log_likelihood(cx: OpContext, operands: list[Any]) -> list[Any]:
    return [_nll(cx, operands[0], operands[1], _arg(operands, 2))]


@lowering("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    scores = operands[0]
    rank = cx.rank(0)
    moved = tf.transpose(scores, [0, *range(2, rank), 1]) if rank > 2 else scores
    log_prob = tf.nn.log_softmax(moved, axis=-1)
    if rank > 2:
        log_prob = tf.transpose(log_prob, [0, rank - 1, *range(1, rank - 1)])
    loss = _nll(cx, log_prob, operands[1], _arg(operands, 2))
    return cx.present([loss, log_prob])


# --------------------------------------------------------------------------- lowering (optimizers)
# The ``ai.onnx.preview.training`` optimizers update n tensors at once: inputs are the rate R, the
# step count T, then n X, n G and the n state tensors of each kind; results the n new X and states.
# The arithmetic runs in float64 and is cast back, as the reference computes it.


def _optimizer_groups(operands: list[Any], states: int) -> tuple[Any, Any, list[list[Any]]]:
    n = (len(operands) - 2) // (2 + states)
    groups = [[operands[2 + k * n + i] for k in range(2 + states)] for i in range(n)]
    return operands[0], operands[1], groups


def _wide(tf: Any, value: Any) -> Any:
    return tf.cast(value, tf.float64)


@lowering("onnx.ai.onnx.preview.training.Adagrad")
def _adagrad(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    r, t, groups = _optimizer_groups(operands, 1)
    decay, eps = float(cx.param("decay_factor", 0.0)), float(cx.param("epsilon", 1e-6))
    norm = float(cx.param("norm_coefficient", 0.0))
    rate = _wide(tf, r) / (1 + _wide(tf, t) * decay)
    xs, hs = [], []
    for x, g, h in groups:
        grad = norm * _wide(tf, x) + _wide(tf, g)
        h_new = _wide(tf, h) + grad * grad
        xs.append(tf.cast(_wide(tf, x) - rate * grad / (tf.math.sqrt(h_new) + eps), x.dtype))
        hs.append(tf.cast(h_new, h.dtype))
    return xs + hs


@lowering("onnx.ai.onnx.preview.training.Momentum")
def _momentum(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    r, t, groups = _optimizer_groups(operands, 1)
    alpha, beta, norm = (float(cx.param(k)) for k in ("alpha", "beta", "norm_coefficient"))
    nesterov = cx.param("mode", "standard") == "nesterov"
    beta_t = tf.where(_wide(tf, t) > 0, tf.constant(beta, tf.float64), tf.constant(1.0, tf.float64))
    xs, vs = [], []
    for x, g, v in groups:
        grad = norm * _wide(tf, x) + _wide(tf, g)
        v_new = alpha * _wide(tf, v) + beta_t * grad
        step = grad + alpha * v_new if nesterov else v_new
        xs.append(tf.cast(_wide(tf, x) - _wide(tf, r) * step, x.dtype))
        vs.append(tf.cast(v_new, v.dtype))
    return xs + vs


@lowering("onnx.ai.onnx.preview.training.Adam")
def _adam(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    r, t, groups = _optimizer_groups(operands, 2)
    alpha, beta = float(cx.param("alpha", 0.9)), float(cx.param("beta", 0.999))
    eps = float(cx.param("epsilon", 1e-6))
    norm, post = float(cx.param("norm_coefficient", 0.0)), float(cx.param("norm_coefficient_post", 0.0))
    step = _wide(tf, t)
    rate = tf.where(step > 0, _wide(tf, r) * tf.math.sqrt(1 - beta**step) / (1 - alpha**step), _wide(tf, r))
    xs, vs, hs = [], [], []
    for x, g, v, h in groups:
        grad = norm * _wide(tf, x) + _wide(tf, g)
        v_new = alpha * _wide(tf, v) + (1 - alpha) * grad
        h_new = beta * _wide(tf, h) + (1 - beta) * grad * grad
        x_new = (1 - post) * (_wide(tf, x) - rate * (v_new / (tf.math.sqrt(h_new) + eps)))
        xs.append(tf.cast(x_new, x.dtype))
        vs.append(tf.cast(v_new, v.dtype))
        hs.append(tf.cast(h_new, h.dtype))
    return xs + vs + hs
