"""Recurrent ops of the default ONNX domain: ``LSTM``, ``GRU`` and ``RNN`` (opsets 7-22).

Every attribute of the ONNX spec is honoured:

* ``direction`` (``forward``, ``reverse``, ``bidirectional``: two directions, the reverse one reading
  each batch row's sequence backwards *within its length*, as ``tf.reverse_sequence`` does);
* ``activations`` (per direction, ``f, g, h`` for LSTM, ``f, g`` for GRU, ``f`` for RNN; names are
  case-insensitive; one direction's list is repeated for the other when a bidirectional op gives only
  one, as onnxruntime does) with ``activation_alpha``/``activation_beta``, consumed in activation
  order by the functions that take them (Affine, LeakyRelu, ThresholdedRelu, ScaledTanh,
  HardSigmoid, Elu), each missing value defaulting to its ONNX operator's default;
* ``clip``: every activation input of a gate is clipped to ``[-clip, clip]`` (the cell state before
  LSTM's ``h`` is not: it is no gate input, as in onnxruntime);
* ``layout`` 0 (``X[seq, batch, in]``, ``Y[seq, dirs, batch, H]``, states ``[dirs, batch, H]``) and 1
  (batch first: ``X[batch, seq, in]``, ``Y[batch, seq, dirs, H]``, states ``[batch, dirs, H]``);
* ``sequence_lens``: steps at or past a row's length leave its state unchanged and write zeros to
  ``Y``; ``Y_h``/``Y_c`` hold each row's state after its last valid step;
* ``initial_h``/``initial_c`` (zeros when absent), ``B`` (zeros when absent), LSTM peepholes ``P``
  (``[dirs, 3H]``, order ``i, o, f``) and ``input_forget`` (``f = 1 - i``), GRU's
  ``linear_before_reset``; ``hidden_size`` (else read from ``R``).

Gate orders are ONNX's: LSTM ``W``/``R``/``B`` rows in ``i, o, f, c`` order, GRU in ``z, r, h``.

**Lowering.** Per direction, the input projection of every step is one matrix product
``X · Wᵀ + Wb (+ Rb)`` before the loop; the recurrence then runs in a ``tf.while_loop`` over the
(possibly dynamic) sequence length, through ``tf.scan``, whose carried state is ``(H, C)``. A loop
rather than a Python-unrolled chain keeps the TensorFlow graph's size independent of the sequence
length and accepts a sequence length known only at run time; each step is a ``[batch, H] x [H, G·H]``
product plus the gate arithmetic.

**Cost.** Per direction and step: ``2 · batch · G·H · (in + H)`` FLOPs for the two products plus
``k · batch · H`` for the gate arithmetic (``k`` = 30 LSTM, 20 GRU, 6 RNN: roughly 3 FLOPs for each
bias add, product and activation element). Bytes: the inputs and outputs once, plus ``R`` once per
step: at the small batches recurrent models run at the recurrent product is weight-bound, and
every step rereads ``R`` (cuDNN's persistent kernels avoid this only for small ``H``). Temporary:
the precomputed input projection ``seq · batch · G·H`` of one direction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphir.ops.lower_context import OpContext, _arg, onnx_inputs
from graphir.ops.registry import Estimate, cost, lowering, type_rule
from graphir.ops.work import float_params, int_params

if TYPE_CHECKING:
    from graphir.ir import Node
    from graphir.types import Dim, TensorType

__all__ = ["ACTIVATIONS", "GATES", "activation_specs", "num_directions"]

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
"""Gates per op type: how many ``H``-row blocks ``W`` and ``R`` stack."""

_DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
_STEP_FLOPS = {"LSTM": 30, "GRU": 20, "RNN": 6}
_DIRECTIONS = ("forward", "reverse", "bidirectional")

ACTIVATIONS: dict[str, tuple[float | None, float | None]] = {
    "relu": (None, None),
    "tanh": (None, None),
    "sigmoid": (None, None),
    "affine": (1.0, 0.0),
    "leakyrelu": (0.01, None),
    "thresholdedrelu": (1.0, None),
    "scaledtanh": (1.0, 1.0),
    "hardsigmoid": (0.2, 0.5),
    "elu": (1.0, None),
    "softsign": (None, None),
    "softplus": (None, None),
}
"""Lower-case activation name -> (default alpha, default beta); ``None``: the function takes none."""


def _op_type(node: Node) -> str:
    return node.op.rsplit(".", 1)[-1]


def num_directions(node: Node) -> int:
    """2 for a ``bidirectional`` recurrent op, else 1."""
    return 2 if node.params.get("direction") == "bidirectional" else 1


def activation_specs(node: Node) -> list[tuple[str, float, float]]:
    """``(lower-case name, alpha, beta)`` of every activation, per direction in order (``f, g, h`` ...).

    Raises:
        ValueError: an unknown activation name, or a list whose length fits neither one direction
            nor every direction.
    """
    op_type = _op_type(node)
    per_direction = len(_DEFAULT_ACTIVATIONS[op_type])
    dirs = num_directions(node)
    given = node.params.get("activations")
    names = [str(n) for n in given] if isinstance(given, tuple) else list(_DEFAULT_ACTIVATIONS[op_type]) * dirs
    if len(names) == per_direction and dirs == 2:
        names = names * 2
    if len(names) != per_direction * dirs:
        expected = f"{per_direction * dirs} ({per_direction} per direction)"
        raise ValueError(f"has {len(names)} activations, expected {expected}")
    alphas = list(float_params(node, "activation_alpha"))
    betas = list(float_params(node, "activation_beta"))
    specs: list[tuple[str, float, float]] = []
    for name in names:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise ValueError(f"has unknown activation '{name}' (expected one of {', '.join(sorted(ACTIVATIONS))})")
        default_alpha, default_beta = ACTIVATIONS[key]
        alpha = beta = 0.0
        if default_alpha is not None:
            alpha = alphas.pop(0) if alphas else default_alpha
        if default_beta is not None:
            beta = betas.pop(0) if betas else default_beta
        specs.append((key, alpha, beta))
    return specs


# --------------------------------------------------------------------------- type rule


def _dims_differ(a: Dim, b: Dim) -> bool:
    return isinstance(a, int) and isinstance(b, int) and a != b


def _check_shape(what: str, tensor_type: TensorType | None, expected: tuple[Dim, ...]) -> str | None:
    if tensor_type is None or tensor_type.shape is None:
        return None
    shape = tensor_type.shape
    if len(shape) != len(expected) or any(_dims_differ(a, b) for a, b in zip(shape, expected, strict=True)):
        shown = ", ".join("?" if d is None else str(d) for d in expected)
        return f"{what} has type {tensor_type}, expected shape [{shown}]"
    return None


def _outputs_at_positions(node: Node) -> list[TensorType | None]:
    """The result types at ONNX positions ``Y, Y_h, Y_c`` (``None`` where absent)."""
    absent = set(int_params(node, "_absent_outputs"))
    results = iter(node.outputs)
    return [None if k in absent else getattr(next(results, None), "type", None) for k in range(3)]


@type_rule("onnx.LSTM", "onnx.GRU", "onnx.RNN")
def _recurrent_type(node: Node, in_types: list[TensorType], out_types: list[TensorType]) -> str | None:
    """Attributes are legal and ``X``, ``W``, ``R``, ``B``, the states and the results agree in shape.

    ``W[dirs, G·H, in]``, ``R[dirs, G·H, H]``, ``B[dirs, 2·G·H]``, ``sequence_lens[batch]``, states
    ``[dirs, batch, H]`` (``[batch, dirs, H]`` at layout 1), ``P[dirs, 3H]``; ``Y`` is
    ``[seq, dirs, batch, H]`` (``[batch, seq, dirs, H]``). Unknown dims are not checked.
    """
    op_type = _op_type(node)
    direction = node.params.get("direction", "forward")
    if direction not in _DIRECTIONS:
        return f"has direction {direction!r}, expected one of {', '.join(_DIRECTIONS)}"
    layout = node.params.get("layout", 0)
    if layout not in (0, 1):
        return f"has layout {layout!r}, expected 0 or 1"
    try:
        activation_specs(node)
    except ValueError as exc:
        return str(exc)
    inputs = [None if v is None else v.type for v in onnx_inputs(node)]
    inputs += [None] * (8 - len(inputs))
    x, w, r = inputs[0], inputs[1], inputs[2]
    if x is None or w is None or r is None:
        return "needs the inputs X, W and R"
    for what, t in (("X", x), ("W", w), ("R", r)):
        if t.rank is not None and t.rank != 3:
            return f"{what} has type {t}, expected rank 3"
    dirs = num_directions(node)
    gates = GATES[op_type]
    given = node.params.get("hidden_size")
    hidden: Dim = given if isinstance(given, int) and not isinstance(given, bool) else None
    if hidden is None and r.shape is not None:
        hidden = r.shape[2]
    seq: Dim = None
    batch: Dim = None
    size: Dim = None
    if x.shape is not None:
        seq, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if layout else tuple(x.shape)
    gh: Dim = gates * hidden if isinstance(hidden, int) else None
    state = (batch, dirs, hidden) if layout else (dirs, batch, hidden)
    checks: list[tuple[str, TensorType | None, tuple[Dim, ...]]] = [
        ("W", w, (dirs, gh, size)),
        ("R", r, (dirs, gh, hidden)),
        ("B", inputs[3], (dirs, 2 * gh if gh is not None else None)),
        ("sequence_lens", inputs[4], (batch,)),
        ("initial_h", inputs[5], state),
    ]
    if op_type == "LSTM":
        checks.append(("initial_c", inputs[6], state))
        checks.append(("P", inputs[7], (dirs, 3 * hidden if isinstance(hidden, int) else None)))
    results = _outputs_at_positions(node)
    y_shape = (batch, seq, dirs, hidden) if layout else (seq, dirs, batch, hidden)
    checks.append(("result Y", results[0], y_shape))
    checks.append(("result Y_h", results[1], state))
    if op_type == "LSTM":
        checks.append(("result Y_c", results[2], state))
    for what, t, expected in checks:
        problem = _check_shape(what, t, expected)
        if problem is not None:
            return problem
    return None


# --------------------------------------------------------------------------- cost


def _recurrent_cost(node: Node, ins, outs, ib, ob) -> Estimate | None:
    """``seq · dirs · (2·batch·G·H·(in + H) + k·batch·H)`` FLOPs; bytes in + out + ``R`` per step."""
    if len(ins) < 3 or ins[0] is None or ins[2] is None or len(ins[0]) != 3 or len(ins[2]) != 3:
        return None
    op_type = _op_type(node)
    layout = node.params.get("layout", 0)
    seq, batch, size = (ins[0][1], ins[0][0], ins[0][2]) if layout else ins[0]
    dirs, gate_rows, hidden = ins[2]
    step = 2.0 * batch * gate_rows * (size + hidden) + _STEP_FLOPS[op_type] * batch * hidden
    flops = seq * dirs * step
    nbytes = float(sum(ib) + sum(ob) + max(seq - 1, 0) * ib[2])
    itemsize = ib[0] // max(seq * batch * size, 1) if seq * batch * size else 4
    temporary = seq * batch * gate_rows * itemsize
    return flops, nbytes, temporary


cost("onnx.LSTM", "onnx.GRU", "onnx.RNN")(_recurrent_cost)


# --------------------------------------------------------------------------- lowering


def _activation(tf: Any, name: str, alpha: float, beta: float) -> Callable[[Any], Any]:
    """The ONNX recurrent activation ``name`` (lower case) as a TensorFlow function."""
    table: dict[str, Callable[[Any], Any]] = {
        "relu": tf.nn.relu,
        "tanh": tf.math.tanh,
        "sigmoid": tf.math.sigmoid,
        "affine": lambda x: alpha * x + beta,
        "leakyrelu": lambda x: tf.where(x >= 0, x, alpha * x),
        "thresholdedrelu": lambda x: tf.where(x >= alpha, x, tf.zeros_like(x)),
        "scaledtanh": lambda x: alpha * tf.math.tanh(beta * x),
        "hardsigmoid": lambda x: tf.clip_by_value(alpha * x + beta, 0.0, 1.0),
        "elu": lambda x: tf.where(x >= 0, x, alpha * (tf.math.exp(x) - 1)),
        "softsign": tf.math.softsign,
        "softplus": tf.math.softplus,
    }
    return table[name]


def _dim(tf: Any, x: Any, axis: int) -> Any:
    """Dimension ``axis`` of ``x``: an int when static (no shape op for the runtime to fold away), else a tensor."""
    static = x.shape[axis] if x.shape.rank is not None else None
    return int(static) if static is not None else tf.shape(x)[axis]


def _dynamic(dim: Any) -> bool:
    return not isinstance(dim, int)


def _reverse(tf: Any, x: Any, lengths: Any) -> Any:
    """``x[seq, batch, ...]`` with each row's first ``lengths[b]`` steps reversed (all steps when ``None``)."""
    if lengths is None:
        return tf.reverse(x, [0])
    return tf.reverse_sequence(x, lengths, seq_axis=0, batch_axis=1)


class _Direction:
    """One direction of a recurrent op: its weights, activations and step function."""

    def __init__(self, cx: OpContext, operands: list[Any], d: int, acts: list[Callable[[Any], Any]]):
        tf = cx.tf
        self.tf = tf
        self.op_type = _op_type(cx.node)
        self.gates = GATES[self.op_type]
        w, r = operands[1][d], operands[2][d]
        bias = _arg(operands, 3)
        peep = _arg(operands, 7) if self.op_type == "LSTM" else None
        self.r_t = tf.transpose(r)  # [H, G·H]
        self.w_t = tf.transpose(w)  # [in, G·H]
        self.w_bias = self.r_bias = None
        if bias is not None:
            self.w_bias, self.r_bias = tf.split(bias[d], 2)
        self.peep = None if peep is None else tf.split(peep[d], 3)  # i, o, f
        self.acts = acts
        clip = cx.param("clip")
        self.clip = None if clip is None else float(clip)
        self.input_forget = bool(int(cx.param("input_forget", 0)))
        self.linear_before_reset = bool(int(cx.param("linear_before_reset", 0)))

    def clipped(self, x: Any) -> Any:
        return x if self.clip is None else self.tf.clip_by_value(x, -self.clip, self.clip)

    def projection(self, x: Any) -> Any:
        """``X · Wᵀ + Wb`` for every step (plus ``Rb`` where it is added unconditionally)."""
        tf = self.tf
        seq, batch, size = (_dim(tf, x, k) for k in range(3))
        flat = tf.linalg.matmul(tf.reshape(x, tf.stack([-1, size]) if _dynamic(size) else [-1, size]), self.w_t)
        target = [seq, batch, -1]
        projected = tf.reshape(flat, tf.stack(target) if any(_dynamic(d) for d in target) else target)
        if self.w_bias is not None:
            projected = projected + self.w_bias
            if self.op_type != "GRU":
                projected = projected + self.r_bias
        return projected

    def step(self, h: Any, c: Any, xg: Any) -> tuple[Any, Any]:
        """One time step: the new ``(H, C)`` from the previous ones and the step's input projection."""
        tf = self.tf
        f = self.acts[0]
        if self.op_type == "RNN":
            return f(self.clipped(xg + tf.linalg.matmul(h, self.r_t))), c
        if self.op_type == "GRU":
            return self._gru(h, xg), c
        g, h_act = self.acts[1], self.acts[2]
        gates = xg + tf.linalg.matmul(h, self.r_t)
        i, o, fg, cell = tf.split(gates, 4, axis=-1)
        if self.peep is not None:
            i = i + self.peep[0] * c
        i = f(self.clipped(i))
        if self.input_forget:
            fg = 1 - i
        else:
            if self.peep is not None:
                fg = fg + self.peep[2] * c
            fg = f(self.clipped(fg))
        cell = g(self.clipped(cell))
        c_new = fg * c + i * cell
        if self.peep is not None:
            o = o + self.peep[1] * c_new
        o = f(self.clipped(o))
        return o * h_act(c_new), c_new

    def _gru(self, h: Any, xg: Any) -> Any:
        tf = self.tf
        f, g = self.acts[0], self.acts[1]
        x_z, x_r, x_h = tf.split(xg, 3, axis=-1)
        r_z, r_r, r_h = tf.split(self.r_t, 3, axis=-1)
        rb = tf.split(self.r_bias, 3) if self.r_bias is not None else (0, 0, 0)
        z = f(self.clipped(x_z + tf.linalg.matmul(h, r_z) + rb[0]))
        reset = f(self.clipped(x_r + tf.linalg.matmul(h, r_r) + rb[1]))
        if self.linear_before_reset:
            candidate = x_h + reset * (tf.linalg.matmul(h, r_h) + rb[2])
        else:
            candidate = x_h + tf.linalg.matmul(reset * h, r_h) + rb[2]
        candidate = g(self.clipped(candidate))
        return (1 - z) * candidate + z * h


def _run_direction(
    tf: Any, direction: _Direction, x: Any, h0: Any, c0: Any, mask: Any, lengths: Any, reverse: bool
) -> tuple[Any, Any, Any]:
    """``(Y[seq, batch, H], H_last, C_last)`` of one direction, through ``tf.scan`` (a ``tf.while_loop``).

    Only the LSTM carries a cell state ``C`` through the loop (``c0`` and ``C_last`` are ``None``
    for GRU and RNN): a carried value no result reads would still be stacked on every step.
    """
    source = _reverse(tf, x, lengths) if reverse else x
    projected = direction.projection(source)
    lstm = direction.op_type == "LSTM"

    def body(carry: tuple[Any, ...], elems: Any) -> tuple[Any, ...]:
        h, c = carry if lstm else (carry[0], None)
        xg, valid = (elems, None) if mask is None else elems
        h_new, c_new = direction.step(h, c, xg)
        if valid is not None:
            h_new = tf.where(valid, h_new, h)
            c_new = None if c is None else tf.where(valid, c_new, c)
        return (h_new, c_new) if lstm else (h_new,)

    carried = tf.scan(body, projected if mask is None else (projected, mask), initializer=(h0, c0) if lstm else (h0,))
    hs = carried[0]
    y = hs if mask is None else tf.where(mask, hs, tf.zeros_like(hs))
    if reverse:
        y = _reverse(tf, y, lengths)
    return y, hs[-1], carried[1][-1] if lstm else None


def _lower_recurrent(cx: OpContext, operands: list[Any]) -> list[Any]:
    tf = cx.tf
    op_type = _op_type(cx.node)
    try:
        specs = activation_specs(cx.node)
    except ValueError as exc:
        raise cx.error(str(exc)) from None
    x = operands[0]
    layout = int(cx.param("layout", 0))
    dirs = num_directions(cx.node)
    direction_name = cx.param("direction", "forward")
    h0, c0 = _arg(operands, 5), _arg(operands, 6) if op_type == "LSTM" else None
    if layout:
        x = tf.transpose(x, [1, 0, 2])
        h0 = None if h0 is None else tf.transpose(h0, [1, 0, 2])
        c0 = None if c0 is None else tf.transpose(c0, [1, 0, 2])
    dtype = x.dtype
    hidden, batch = _dim(tf, operands[2], 2), _dim(tf, x, 1)

    def zeros() -> Any:  # made only when an initial state is absent (an unused op would never run)
        return tf.zeros(tf.stack([batch, hidden]) if _dynamic(batch) or _dynamic(hidden) else [batch, hidden], dtype)

    lengths = _arg(operands, 4)
    mask = None
    if lengths is not None:
        lengths = tf.cast(lengths, tf.int32)
        valid = tf.sequence_mask(lengths, _dim(tf, x, 0))  # [batch, seq]
        mask = tf.transpose(valid)[:, :, None]  # [seq, batch, 1]
    per_direction = len(_DEFAULT_ACTIVATIONS[op_type])
    ys, hs, cs = [], [], []
    for d in range(dirs):
        acts = [_activation(tf, *spec) for spec in specs[d * per_direction : (d + 1) * per_direction]]
        direction = _Direction(cx, operands, d, acts)
        reverse = direction_name == "reverse" or d == 1
        h_init = zeros() if h0 is None else h0[d]
        c_init = None if op_type != "LSTM" else zeros() if c0 is None else c0[d]
        y, h_last, c_last = _run_direction(tf, direction, x, h_init, c_init, mask, lengths, reverse)
        ys.append(y)
        hs.append(h_last)
        cs.append(c_last)
    y = tf.stack(ys, axis=1)  # [seq, dirs, batch, H]
    states = [tf.stack(hs), *([tf.stack(cs)] if op_type == "LSTM" else [])]  # Y_h (, Y_c): [dirs, batch, H]
    if layout:
        y = tf.transpose(y, [2, 0, 1, 3])
        states = [tf.transpose(s, [1, 0, 2]) for s in states]
    return cx.present([y, *states])


lowering("LSTM", "GRU", "RNN")(_lower_recurrent)
