"""Where the batch lives in a graph: a symbolic batch dimension propagated through the ops' batch rules.

:func:`analyze_batch` labels every tensor dimension of a graph, and every element of each small
integer tensor (shape vectors, sizes, the loss's divisor), as **carrying the batch** or not, starting
from the graph's batch inputs (placeholders and graph inputs whose leading dimension is the batch
``B``, :func:`graphir.passes.transform.batching.module_batch`). :mod:`graphir.passes.transform.rebatch`
then rewrites the graph at another batch ``b``: a dimension of size ``c*B`` that carries the batch
becomes ``c*b``, a constant element ``c*B`` that carries it becomes ``c*b``, and a constant tensor
with a batch dimension is sliced along it.

**Provenance, not size.** A dimension carries the batch when it *derives* from a batch input's
leading dimension through the rules (along data edges, both ways), never because its size equals
the batch: a ``[rank, 2]`` paddings constant of 128 rows in a graph at batch 128, a concatenation
offset of 128, a weight slice that keeps 128 rows are not the batch. A dimension no rule labels is
connected to no batch input and is :data:`NO` at the end; a node whose rule could not relate its
dimensions (its paddings, begins or axes are computed at run time:
:meth:`BatchFacts.undecided_by`) refuses the graph when an unlabelled dimension touches it.

**Labels.** A dimension's label is ``None`` (not known yet), :data:`NO` (the batch is not in it),
:data:`SOME` (the batch is in it; where inside is not known) or an integer ``k >= 1``: the dimension
is ``outer * B * k`` in row-major order (``k`` is the product of what is inside the batch: ``[B, S]``
flattened to ``B*S`` has ``k = S``, ``[S, B]`` flattened has ``k = 1``), which is what a ``Reshape``
that splits the dimension again needs to know. A dimension whose size is not a positive multiple of
``B`` is :data:`NO` from the start; so is everything when ``B`` is 1 (nothing can be proven: refused
by :func:`analyze_batch`). A tensor carries the batch in at most one dimension. Elements of small
integer (and scalar float) tensors whose values are known at compile time (``Const`` and what is
computed from constants: ``Shape`` of a static tensor, ``Prod``, ``Cast``, ``Pack``...) have labels too,
``NO`` or ``SOME``.

**Rules** (:data:`BATCH_RULES`, one table keyed by qualified op name): ``rule(node, facts)`` relates
the labels of the node's operands and results (both ways: a ``Fill`` whose result is added to an
activation learns that its shape constant holds the batch) through :class:`BatchFacts`; the
analysis runs every rule until nothing changes (a worklist over the nodes whose values changed).
The rules cover the TensorFlow op families of the zoo's training graphs: elementwise and broadcast
ops, ``MatMul``/``BatchMatMulV2``/``Einsum``, convolutions and their backprops, pooling and its
gradients, ``FusedBatchNormV3`` and its gradient, ``Reshape``, ``Transpose``, reductions, softmax
and cross-entropies, ``GatherV2`` and ``UnsortedSegmentSum`` (its gradient), ``Shape``/``Size``/
``BroadcastGradientArgs``, ``ConcatV2``/``Pack``/``Unpack``/``Split``/``SplitV``/``Slice``/
``StridedSlice``, ``Select``/``SelectV2``, ``OneHot``, ``Fill``/``BroadcastTo``/``Tile``/``Pad``, the
random ops' shapes, variable reads and updates (never batched), arithmetic on shape vectors, and
the gradients' ``StridedSliceGrad`` and ``ConcatOffset``.
They live here rather than as an op facet of :mod:`graphir.ops.registry`: they describe how the
*batch* flows, a property of a training graph's inputs rather than of one op's types, and only
this rewrite uses them.

**The loss's divisor.** Keras and TensorFlow bake ``tf.size``/``tf.shape`` of static tensors into
constants: the mean loss is ``Sum(x) / Cast(Prod(Const [G, S]))``. The divisor rule recognises a
division whose numerator is a ``Sum`` over ``x`` and whose divisor equals the number of elements
summed, and labels the divisor (and, through ``Cast``, the ``Prod``'s constant shape vector, element
by element against ``x``'s dimensions) from ``x``'s labels; the gradient divides by the same value.

**What is refused** (:class:`~graphir.errors.PassError`, one line naming the node): two labels that
disagree (a ``Reshape`` that splits the batch across dimensions, a slice or a padding of part of
the batch, a tensor with the batch twice), an op with no rule whose result has a dimension that
might be the batch, and a node whose rule could not tell (above) with such a dimension around it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import numpy as np

from graphir.attributes import DenseTensor
from graphir.errors import PassError
from graphir.ir import ExternalTensor, Graph, Node, Value
from graphir.types import DType, is_static_shape

__all__ = [
    "BATCH_RULES",
    "NO",
    "SOME",
    "BatchFacts",
    "analyze_batch",
    "batch_rule",
    "const_array",
    "known_values",
]

NO = 0
"""Label: the batch is not in this dimension (or element)."""
SOME = -1
"""Label: the batch is in this dimension (or element); its position inside is not known."""

CONTENT_LIMIT = 64
"""Largest integer tensor (elements) whose values the analysis tracks (shape vectors are short)."""

Rule = Callable[[Node, "BatchFacts"], None]
BATCH_RULES: dict[str, Rule] = {}
"""Qualified op name -> its batch rule (see the module docstring)."""

_INT_KINDS = "iub"


def batch_rule(*ops: str) -> Callable[[Rule], Rule]:
    """Decorator: the function is the batch rule of ``ops`` (bare TF names mean ``tf.<name>``)."""

    def wrap(fn: Rule) -> Rule:
        for op in ops:
            BATCH_RULES[op if "." in op else f"tf.{op}"] = fn
        return fn

    return wrap


class _ConflictError(Exception):
    """Two rules disagree about a label (raised inside the analysis, reported as a PassError)."""


def _carries(label: int | None) -> bool:
    return label is not None and label != NO


def _merge(old: int | None, new: int | None) -> int | None:
    """The label that is both ``old`` and ``new``; raises :class:`_ConflictError` when they disagree."""
    if new is None or old == new:
        return old
    if old is None:
        return new
    if old == NO or new == NO:
        raise _ConflictError
    if old == SOME:
        return new
    if new == SOME:
        return old
    raise _ConflictError  # two different inner factors


def const_array(value: Value) -> np.ndarray | None:
    """The data of a constant value (a graph constant or a ``tf.Const`` result), or None."""
    data = value.const
    producer = value.producer
    if data is None and producer is not None and producer.op == "tf.Const":
        data = producer.params.get("value")
    if isinstance(data, DenseTensor):
        return data.numpy()
    if isinstance(data, ExternalTensor):  # (the one other kind of value with a numpy())
        try:
            return np.asarray(data.numpy())
        except ValueError:
            return None
    return None


class BatchFacts:
    """The labels of one graph at batch ``batch`` (see the module docstring), and the rules' API."""

    def __init__(self, graph: Graph, batch: int):
        self.graph = graph
        self.batch = batch
        self.dims: dict[Value, list[int | None]] = {}
        self.content: dict[Value, np.ndarray] = {}
        self.elements: dict[Value, list[int | None]] = {}
        self._queue: deque[Node] = deque()
        self._queued: set[Node] = set()
        self._node: Node | None = None
        self._changes = 0
        self.undecided: dict[Node, str] = {}
        """Nodes whose rule could not relate all their dimensions (last run), and why (see :meth:`undecided_by`)."""

    # ----------------------------------------------------------------- reading
    def shape(self, value: Value) -> tuple[int, ...]:
        """The static shape of ``value`` (unknown dimensions read as 0)."""
        shape = value.type.shape or ()
        return tuple(d if isinstance(d, int) else 0 for d in shape)

    def dim(self, value: Value, axis: int) -> int | None:
        """The label of dimension ``axis`` of ``value``."""
        return self.dims[value][axis]

    def values_of(self, value: Value) -> np.ndarray | None:
        """The compile-time values of a small tensor, or None when they are not known."""
        return self.content.get(value)

    def element(self, value: Value, index: int) -> int | None:
        """The label of element ``index`` (flat) of a small tensor with known values."""
        labels = self.elements.get(value)
        return None if labels is None else labels[index]

    def ints(self, value: Value) -> list[int] | None:
        """The known values of an integer tensor as a flat list, or None."""
        data = self.content.get(value)
        if data is None or data.dtype.kind not in _INT_KINDS:
            return None
        return [int(x) for x in data.reshape(-1)]

    # ----------------------------------------------------------------- writing
    def set_dim(self, value: Value, axis: int, label: int | None) -> None:
        """Record that dimension ``axis`` of ``value`` has ``label`` (merged with what is known)."""
        if label is None:
            return
        labels = self.dims[value]
        if axis < 0:
            axis += len(labels)
        old = labels[axis]
        if _carries(label):
            shape = value.type.shape
            assert shape is not None, "a label per dimension: the rank is known"
            size = shape[axis]
            if (size if isinstance(size, int) else 0) % self.batch:  # what shape() reads
                raise _ConflictError
        merged = _merge(old, label)
        if merged == old:
            return
        labels[axis] = merged
        if _carries(merged):  # a tensor carries the batch once
            for other, lab in enumerate(labels):
                if other != axis:
                    if _carries(lab):
                        raise _ConflictError
                    labels[other] = NO
        self._changed(value)

    def set_element(self, value: Value, index: int, label: int | None) -> None:
        """Record that element ``index`` of a small tensor carries the batch (``SOME``) or not (``NO``)."""
        labels = self.elements.get(value)
        if label is None or labels is None:
            return
        label = SOME if _carries(label) else NO
        old = labels[index]
        if old == label:
            return
        if old is not None:
            raise _ConflictError
        if label == SOME and self.content[value].reshape(-1)[index] % self.batch:
            raise _ConflictError
        labels[index] = label
        self._changed(value)

    def no_batch(self, value: Value) -> None:
        """No dimension of ``value`` carries the batch."""
        for axis in range(len(self.dims[value])):
            self.set_dim(value, axis, NO)

    def tie(self, a: Value, i: int, b: Value, j: int) -> None:
        """Dimension ``i`` of ``a`` and ``j`` of ``b`` are the same dimension."""
        self.set_dim(a, i, self.dims[b][j])
        self.set_dim(b, j, self.dims[a][i])

    def tie_all(self, a: Value, b: Value) -> None:
        """``a`` and ``b`` have the same shape, dimension for dimension."""
        for axis in range(min(len(self.dims[a]), len(self.dims[b]))):
            self.tie(a, axis, b, axis)

    def tie_element(self, a: Value, i: int, b: Value, j: int) -> None:
        """Element ``i`` of ``a`` and element ``j`` of ``b`` are the same number."""
        self.set_element(a, i, self.element(b, j))
        self.set_element(b, j, self.element(a, i))

    def tie_element_dim(self, shape_value: Value, index: int, value: Value, axis: int) -> None:
        """Element ``index`` of ``shape_value`` is dimension ``axis`` of ``value``."""
        if shape_value not in self.elements:
            return
        if index < 0 or index >= len(self.elements[shape_value]):
            return
        label = self.dims[value][axis]
        if label is not None:
            self.set_element(shape_value, index, SOME if _carries(label) else NO)
        element = self.element(shape_value, index)
        if element is not None:
            self.set_dim(value, axis, SOME if element == SOME else NO)

    def shape_operand(self, shape_value: Value, result: Value) -> None:
        """``shape_value`` lists the dimensions of ``result`` (``Fill``, ``Reshape`` targets, random shapes...).

        ``-1`` entries (a ``Reshape``'s inferred dimension) say nothing. The operand's own length is a rank.
        """
        self.no_batch(shape_value)
        known = self.ints(shape_value)
        if shape_value not in self.elements:
            self.undecided_by(f"the values of its shape operand '%{shape_value.name}' are not known")
        for axis in range(len(self.dims[result])):
            if known is not None and axis < len(known) and known[axis] < 0:
                continue
            self.tie_element_dim(shape_value, axis, result, axis)

    def index_operand(self, value: Value) -> None:
        """``value`` holds axes, permutations, paddings or seeds: no batch in its shape or values."""
        self.no_batch(value)
        labels = self.elements.get(value)
        if labels is not None:
            for index in range(len(labels)):
                self.set_element(value, index, NO)

    def undecided_by(self, reason: str) -> None:
        """The running rule cannot relate its node's dimensions: ``reason`` says what it misses.

        A dimension the rules leave unlabelled does not derive from the batch and is :data:`NO`
        (:func:`analyze_batch`), except around a node whose rule said this: there the batch may pass
        unseen, and an unlabelled dimension of its operands or results refuses the graph naming the node.
        """
        if self._node is not None:
            self.undecided[self._node] = reason

    def _changed(self, value: Value) -> None:
        self._changes += 1
        for node in (value.producer, *value.users):
            if node is not None and node not in self._queued and node is not self._node:
                self._queued.add(node)
                self._queue.append(node)

    # ----------------------------------------------------------------- running
    def run(self, nodes: Sequence[Node]) -> None:
        """Apply the rules until no label changes."""
        self._queue.extend(nodes)
        self._queued.update(nodes)
        while self._queue:
            node = self._queue.popleft()
            self._queued.discard(node)
            rule = BATCH_RULES.get(node.op)
            if rule is None:
                continue
            self._node = node
            self.undecided.pop(node, None)  # the rule's last run says
            before = self._changes
            try:
                rule(node, self)
            except _ConflictError:
                raise PassError(_conflict_message(node, self)) from None
            finally:
                self._node = None
            if self._changes != before and node not in self._queued:  # again, with what it just learnt
                self._queued.add(node)
                self._queue.append(node)


def _conflict_message(node: Node, facts: BatchFacts) -> str:
    def show(value: Value) -> str:
        dims = facts.dims.get(value, [])
        marks = ",".join(
            f"{size}" + ("*" if _carries(lab) else "" if lab == NO else "?")
            for size, lab in zip(facts.shape(value), dims, strict=False)
        )
        return f"[{marks}]"

    operands = ", ".join(show(v) for v in node.inputs)
    results = ", ".join(show(v) for v in node.outputs)
    return (
        f"cannot re-batch node '{node.name}' ({node.op}): its operands ({operands}) and results ({results}) "
        f"disagree on where the batch ({facts.batch}; * marks it) is"
    )


# --------------------------------------------------------------------------- the analysis


def analyze_batch(graph: Graph, batch: int, sources: Iterable[Value]) -> BatchFacts:
    """Label every dimension (and small tensor element) of ``graph`` (see the module docstring).

    Args:
        graph: the graph.
        batch: its batch ``B`` (> 1).
        sources: the values whose leading dimension is the batch (the placeholders' results, graph inputs).

    Raises:
        PassError: ``batch`` is 1, two rules disagree, or a dimension that may be the batch cannot be
            proven either way (one line naming the node).
    """
    if batch <= 1:
        raise PassError(f"cannot re-batch a graph at batch {batch}: its batch cannot be told from unit dimensions")
    facts = BatchFacts(graph, batch)
    nodes = graph.index().nodes
    for value in graph.values:
        shape = facts.shape(value)
        facts.dims[value] = [NO if size < batch or size % batch else None for size in shape]
    _evaluate_content(graph, nodes, facts)
    seeded = set()
    for value in sources:
        labels = facts.dims[value]
        if not labels or facts.shape(value)[0] != batch:
            continue
        seeded.add(value)
        labels[0] = 1
        for axis in range(1, len(labels)):
            labels[axis] = NO
    for value in graph.inputs:
        if value not in seeded:
            facts.dims[value] = [NO] * len(facts.dims[value])
    for node in nodes:
        if node.op in ("tf.Placeholder", "tf.PlaceholderWithDefault") and node.outputs:
            out = node.outputs[0]
            if out not in seeded:
                facts.dims[out] = [NO] * len(facts.dims[out])
    facts.run(nodes)
    _check_unknown(nodes, facts)
    return facts


def _check_unknown(nodes: Sequence[Node], facts: BatchFacts) -> None:
    """Decide the dimensions no rule labelled: by provenance, they do not carry the batch.

    The rules relate every dimension through which the batch flows (from the sources, along data
    edges, both ways); a dimension they leave unlabelled is connected to no batch source, so its size
    being a multiple of ``B`` is a coincidence (a ``[128, 2]``-shaped constant in a graph at batch 128,
    a ``Slice`` of a weight that keeps 128 of its rows) and it is :data:`NO`. That holds only where
    every rule saw all it needed: an op with no rule, or a node whose rule could not relate its
    dimensions (:meth:`BatchFacts.undecided_by`: a ``Pad`` whose paddings are computed at run time),
    with an unlabelled dimension around it refuses the graph naming the node. The defaults are then
    propagated once more, so that a rule they contradict is reported as a disagreement.
    """
    for node in nodes:
        reason = facts.undecided.get(node)
        rule = BATCH_RULES.get(node.op)
        for value in (*node.inputs, *node.outputs) if reason is not None else node.outputs:
            labels = facts.dims[value]
            axis = next((k for k, label in enumerate(labels) if label is None), None)
            if axis is None or value in facts.content:  # a shape vector's length is a rank
                continue
            size = facts.shape(value)[axis]
            if rule is None:
                raise PassError(
                    f"cannot re-batch: node '{node.name}' ({node.op}) has no batch rule and its result "
                    f"'%{value.name}' has a dimension of {size}, a multiple of the batch {facts.batch}"
                )
            if reason is not None:
                raise PassError(
                    f"cannot re-batch: node '{node.name}' ({node.op}) does not tell where the batch "
                    f"{facts.batch} goes ({reason}): dimension {axis} (size {size}) of '%{value.name}' "
                    "might or might not be the batch"
                )
    for value in facts.graph.values:
        for axis, label in enumerate(facts.dims[value]):
            if label is None:
                facts.set_dim(value, axis, NO)
    facts.run([])


# --------------------------------------------------------------------------- compile-time values


def _small(value: Value) -> bool:
    shape = value.type.shape
    if not is_static_shape(shape) or value.type.dtype in (DType.STRING, DType.RESOURCE):
        return False
    count = math.prod(shape)
    if value.type.dtype in (DType.F32, DType.F64, DType.F16, DType.BF16):
        return count == 1
    return len(shape) <= 2 and count <= CONTENT_LIMIT  # shape vectors, and paddings ``[rank, 2]``


def _track(facts: BatchFacts, value: Value, data: Any) -> None:
    array = np.asarray(data)
    if array.dtype.kind not in "iufb" or array.size > CONTENT_LIMIT:
        return
    facts.content[value] = array
    flat = array.reshape(-1)
    batch = facts.batch
    labels: list[int | None] = []
    for x in flat:
        x = float(x)
        labels.append(None if x >= batch and x == int(x) and int(x) % batch == 0 else NO)
    facts.elements[value] = labels


def _evaluate_content(graph: Graph, nodes: Sequence[Node], facts: BatchFacts) -> None:
    """Compute the values of constants and of the small tensors computed from them, in topological order."""
    for value in graph.constants:
        if _small(value):
            data = const_array(value)
            if data is not None:
                _track(facts, value, data)
    for node in nodes:
        if node.op == "tf.BroadcastGradientArgs":
            shapes = [facts.ints(v) for v in node.inputs]
            if shapes[0] is not None and shapes[1] is not None:
                for out, axes in zip(node.outputs, _gradient_axes(shapes[0], shapes[1]), strict=True):
                    _track(facts, out, np.asarray(axes, dtype=np.int32))
            continue
        if node.op == "tf.ConcatOffset":
            offsets = _concat_offsets(node, facts)
            if offsets is not None:
                for out, offset in zip(node.outputs, offsets, strict=True):
                    _track(facts, out, offset)
            continue
        if len(node.outputs) != 1 or not _small(node.outputs[0]):
            continue
        out = node.outputs[0]
        try:
            data = _fold(node, facts)
        except (ValueError, IndexError, TypeError, ZeroDivisionError, FloatingPointError, OverflowError):
            data = None
        if data is not None:
            data = np.asarray(data)
            if tuple(data.shape) == facts.shape(out):
                _track(facts, out, data)


def known_values(graph: Graph) -> dict[Value, np.ndarray]:
    """The compile-time values of ``graph``'s small tensors (constants and what is computed from them)."""
    facts = BatchFacts(graph, 2)
    for value in graph.values:
        facts.dims[value] = [None] * len(facts.shape(value))
    _evaluate_content(graph, graph.index().nodes, facts)
    return facts.content


def _concat_offsets(node: Node, facts: BatchFacts) -> list[np.ndarray] | None:
    """TensorFlow's ``ConcatOffset(axis, shape_0, ...)``: where each part starts in the concatenation."""
    axis_values = facts.ints(node.inputs[0])
    shapes = [facts.values_of(v) for v in node.inputs[1:]]
    if axis_values is None or any(shape is None for shape in shapes):
        return None
    parts = [np.asarray(shape).reshape(-1) for shape in shapes if shape is not None]
    axis = axis_values[0] % len(parts[0])
    offsets: list[np.ndarray] = []
    start = 0
    for part in parts:
        offset = np.zeros_like(part)
        offset[axis] = start
        offsets.append(offset)
        start += int(part[axis])
    return offsets


def _gradient_axes(x: list[int], y: list[int]) -> tuple[list[int], list[int]]:
    """TensorFlow's ``BroadcastGradientArgs``: the axes each operand was broadcast along (both when both are 1)."""
    rank = max(len(x), len(y))
    xs, ys = [1] * (rank - len(x)) + x, [1] * (rank - len(y)) + y
    rx = [k for k in range(rank) if xs[k] == 1]
    ry = [k for k in range(rank) if ys[k] == 1]
    return rx, ry


def _fold(node: Node, facts: BatchFacts) -> Any:  # noqa: C901, PLR0911, PLR0912 - one branch per op
    op = node.op[3:] if node.op.startswith("tf.") else ""
    if op == "Const":
        return const_array(node.outputs[0])
    if op == "Shape":
        return np.asarray(facts.shape(node.inputs[0]), dtype=np.int64)
    if op == "Size":
        return np.asarray(math.prod(facts.shape(node.inputs[0])))
    if op == "Rank":
        return np.asarray(len(facts.shape(node.inputs[0])))
    content = facts.content
    if any(v not in content for v in node.inputs):
        return None
    args = [content[v] for v in node.inputs]
    if op in ("Cast", "Identity", "StopGradient", "Snapshot"):
        return args[0]
    if op == "Pack":
        return np.stack(args, axis=_int_param(node, "axis", 0))
    if op == "ConcatV2":
        return np.concatenate(args[:-1], axis=int(args[-1].item()))
    if op in ("Prod", "Sum", "Max", "Min"):
        reduce = {"Prod": np.prod, "Sum": np.sum, "Max": np.max, "Min": np.min}[op]
        axes = tuple(int(a) for a in np.asarray(args[1]).reshape(-1))
        return reduce(args[0], axis=axes, keepdims=bool(node.params.get("keep_dims", False)))
    binary: dict[str, Callable[[Any, Any], Any]] = {
        "AddV2": np.add,
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Maximum": np.maximum,
        "Minimum": np.minimum,
        "FloorDiv": np.floor_divide,
        "FloorMod": np.mod,
        "RealDiv": np.divide,
    }
    if op in binary:
        with np.errstate(all="raise"):
            return binary[op](args[0], args[1])
    if op == "StridedSlice":
        index = _strided_index(node, len(np.shape(args[0])), args[1], args[2], args[3])
        return None if index is None else np.asarray(args[0])[index]
    if op == "Slice":
        data = np.asarray(args[0])
        begin = [int(b) for b in np.asarray(args[1]).reshape(-1)]
        size = [int(s) for s in np.asarray(args[2]).reshape(-1)]
        return data[tuple(slice(b, None if s < 0 else b + s) for b, s in zip(begin, size, strict=True))]
    if op == "GatherV2":
        return np.take(args[0], np.asarray(args[1]), axis=int(args[2].item()))
    if op in ("Reshape", "ExpandDims", "Squeeze"):
        return np.asarray(args[0]).reshape(facts.shape(node.outputs[0]))
    if op == "InvertPermutation":
        return np.argsort(np.asarray(args[0])).astype(np.asarray(args[0]).dtype)
    return None


# --------------------------------------------------------------------------- slicing


def _int_param(node: Node, key: str, default: int) -> int:
    """The int TF attr ``key`` of ``node`` (``default`` when absent or 0)."""
    return int(cast(int, node.params.get(key, default) or default))  # an int attr (TensorFlow's op def)


def _strided_index(node: Node, rank: int, begin: Any, end: Any, strides: Any) -> tuple[Any, ...] | None:
    """The numpy index equivalent to a ``StridedSlice`` with these constant operands and masks."""
    begin = [int(x) for x in np.asarray(begin).reshape(-1)]
    end = [int(x) for x in np.asarray(end).reshape(-1)]
    strides = [int(x) for x in np.asarray(strides).reshape(-1)]
    masks = {k: _int_param(node, k, 0) for k in _MASKS}
    index: list[Any] = []
    for k in range(len(begin)):
        bit = 1 << k
        if masks["ellipsis_mask"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            index.append(None)
        elif masks["shrink_axis_mask"] & bit:
            index.append(begin[k])
        else:
            start = None if masks["begin_mask"] & bit else begin[k]
            stop = None if masks["end_mask"] & bit else end[k]
            index.append(slice(start, stop, strides[k]))
    del rank
    return tuple(index)


_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def _axis_map(index: tuple[Any, ...], shape: tuple[int, ...]) -> list[tuple[int | None, int | None, bool]]:
    """``(input axis or None, output axis or None, whole)`` per entry of a numpy basic index on ``shape``."""
    explicit = sum(1 for i in index if i is not None and i is not Ellipsis)
    expanded: list[Any] = []
    for item in index:
        if item is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - explicit))
        else:
            expanded.append(item)
    if Ellipsis not in index:
        expanded.extend([slice(None)] * (len(shape) - explicit))
    out: list[tuple[int | None, int | None, bool]] = []
    in_axis = out_axis = 0
    for item in expanded:
        if item is None:
            out.append((None, out_axis, False))
            out_axis += 1
        elif isinstance(item, int):
            out.append((in_axis, None, False))
            in_axis += 1
        else:
            size = shape[in_axis]
            start, stop, step = item.indices(size)
            whole = (start, step) == (0, 1) and stop == size
            out.append((in_axis, out_axis, whole))
            in_axis += 1
            out_axis += 1
    return out


def _sliced(facts: BatchFacts, node: Node, data: Value, out: Value, index: tuple[Any, ...]) -> None:
    """Relate a slice's operand and result dimensions; a part of the batch cannot be sliced."""
    for in_axis, out_axis, whole in _axis_map(index, facts.shape(data)):
        if in_axis is None:
            if out_axis is not None:
                facts.set_dim(out, out_axis, NO)
            continue
        if out_axis is not None and whole:
            facts.tie(data, in_axis, out, out_axis)
        else:
            if _carries(facts.dim(data, in_axis)):
                raise _ConflictError  # a slice of part of the batch
            facts.set_dim(data, in_axis, NO)
            if out_axis is not None:
                facts.set_dim(out, out_axis, NO)


# --------------------------------------------------------------------------- the rules


def _elementwise_content(node: Node, facts: BatchFacts) -> None:
    """Arithmetic on shape vectors and sizes (values known at compile time)."""
    out = node.outputs[0]
    if out not in facts.elements or not all(v in facts.elements for v in node.inputs[:2]):
        return
    a, b = node.inputs[0], node.inputs[1]
    size = len(facts.elements[out])
    ka, kb = len(facts.elements[a]), len(facts.elements[b])
    op = node.op[3:]
    out_values = facts.content[out].reshape(-1)
    a_values, b_values = facts.content[a].reshape(-1), facts.content[b].reshape(-1)
    for k in range(size):
        i, j = (k if ka > 1 else 0), (k if kb > 1 else 0)
        la, lb, lo = facts.element(a, i), facts.element(b, j), facts.element(out, k)
        if op in ("Maximum", "Minimum"):
            if out_values[k] == a_values[i] and out_values[k] != b_values[j]:
                facts.tie_element(out, k, a, i)
            elif out_values[k] == b_values[j] and out_values[k] != a_values[i]:
                facts.tie_element(out, k, b, j)
            elif la == lb == NO:
                facts.set_element(out, k, NO)
        elif op == "Mul":
            if la == NO and lb == NO:
                facts.set_element(out, k, NO)
            elif (la == SOME and lb == NO) or (la == NO and lb == SOME):
                facts.set_element(out, k, SOME)
            elif la == lb == SOME:
                raise _ConflictError
            elif lo == NO:
                facts.set_element(a, i, NO)
                facts.set_element(b, j, NO)
        elif op in ("FloorDiv", "RealDiv", "DivNoNan", "Div"):
            if lb == NO and la is not None:
                facts.set_element(out, k, la)
            elif la == SOME and lb == SOME:
                facts.set_element(out, k, NO)
            elif lb == NO and lo is not None:
                facts.set_element(a, i, lo)
        elif op in ("AddV2", "Add", "Sub"):
            if la == NO and lb == NO:
                facts.set_element(out, k, NO)
            elif b_values[j] == 0 and la is not None:
                facts.tie_element(out, k, a, i)
            elif a_values[i] == 0 and op != "Sub" and lb is not None:
                facts.tie_element(out, k, b, j)


def _broadcast_dims(node: Node, facts: BatchFacts, operands: Sequence[Value], out: Value) -> None:
    """NumPy broadcasting: aligned from the right, an operand dimension equal to the result's is the same."""
    out_shape = facts.shape(out)
    rank = len(out_shape)
    for value in operands:
        shape = facts.shape(value)
        offset = rank - len(shape)
        for axis, size in enumerate(shape):
            target = axis + offset
            if target < 0:
                continue
            if size == out_shape[target]:
                facts.tie(value, axis, out, target)
            else:
                facts.set_dim(value, axis, NO)


_UNARY = (
    "Relu Relu6 Elu Selu Sigmoid Tanh Abs Neg Exp Expm1 Log Log1p Sqrt Rsqrt Square Reciprocal Inv Floor Ceil "
    "Round Rint Sign Erf Erfc Softplus Softsign Sin Cos Tan Atan Acos Asin Sinh Cosh IsNan IsInf IsFinite "
    "LogicalNot Invert Cast Identity StopGradient PreventGradient Snapshot CheckNumerics ZerosLike OnesLike "
    "Gelu LeakyRelu Softmax LogSoftmax Relu6Grad Selu Mish ClipByValue Bitcast"
).split()

_BINARY = (
    "AddV2 Add Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv TruncateMod Maximum Minimum Pow "
    "SquaredDifference Greater GreaterEqual Less LessEqual Equal NotEqual LogicalAnd LogicalOr BitwiseAnd "
    "BitwiseOr BitwiseXor Atan2 Xdivy Xlogy MulNoNan ReluGrad Relu6Grad EluGrad SeluGrad SigmoidGrad TanhGrad "
    "RsqrtGrad SqrtGrad SoftplusGrad SoftsignGrad LeakyReluGrad ReciprocalGrad InvGrad ApproximateEqual "
    "ClipByValue SelectV2 AddN BiasAdd"
).split()


@batch_rule(*_UNARY, *_BINARY)
def _elementwise(node: Node, facts: BatchFacts) -> None:
    """Elementwise ops (one or many operands, NumPy broadcasting; ``BiasAdd``'s bias is the last axis)."""
    if not node.outputs:
        return
    out = node.outputs[0]
    operands = [v for v in node.inputs if v.type.shape is not None]
    if node.op == "tf.BiasAdd" and node.params.get("data_format") == "NCHW" and len(operands) == 2:
        facts.tie_all(operands[0], out)
        facts.tie(operands[1], 0, out, 1)
    else:
        _broadcast_dims(node, facts, operands, out)
    for extra in node.outputs[1:]:
        facts.tie_all(extra, out)
    if out in facts.elements:
        if len(node.inputs) == 1 and node.inputs[0] in facts.elements:
            for k in range(len(facts.elements[out])):
                facts.tie_element(out, k, node.inputs[0], k)
        elif len(node.inputs) == 2:
            _elementwise_content(node, facts)
    if node.op in ("tf.RealDiv", "tf.DivNoNan", "tf.Div", "tf.FloorDiv"):
        _mean_divisor(node, facts)


@batch_rule("Select")
def _select(node: Node, facts: BatchFacts) -> None:
    """``Select(cond, t, e)``: ``cond`` is the result's shape, or a vector along its first axis."""
    cond, then, other = node.inputs
    out = node.outputs[0]
    facts.tie_all(then, out)
    facts.tie_all(other, out)
    if len(facts.shape(cond)) == 1 and len(facts.shape(out)) > 1:
        facts.tie(cond, 0, out, 0)
    else:
        _broadcast_dims(node, facts, [cond], out)


def _mean_divisor(node: Node, facts: BatchFacts) -> None:
    """The loss's mean: ``Sum(x) / n`` with ``n`` the number of elements summed carries the batch as ``x`` does."""
    numerator, divisor = node.inputs[0], node.inputs[1]
    if divisor not in facts.elements or len(facts.elements[divisor]) != 1 or facts.element(divisor, 0) is not None:
        return
    producer = numerator.producer
    if producer is not None and producer.op in ("tf.Tile", "tf.BroadcastTo"):
        _broadcast_divisor(facts, producer, divisor)
        return
    if producer is None or producer.op != "tf.Sum":
        return
    summed = producer.inputs[0]
    axes = facts.ints(producer.inputs[1])
    if axes is None:
        return
    shape = facts.shape(summed)
    axes = sorted(a % len(shape) for a in axes) if shape else []
    count = math.prod(shape[a] for a in axes)
    if float(facts.content[divisor].reshape(-1)[0]) != count:
        return
    labels = [facts.dim(summed, a) for a in axes]
    if any(label is None for label in labels):
        return
    facts.set_element(divisor, 0, SOME if any(_carries(label) for label in labels) else NO)
    # Through Cast/Identity to the Prod of a constant shape vector: tie it to the summed dimensions.
    value = divisor
    while value.producer is not None and value.producer.op in ("tf.Cast", "tf.Identity") and value.producer.inputs:
        value = value.producer.inputs[0]
    prod = value.producer
    if prod is None or prod.op != "tf.Prod" or not prod.inputs:
        return
    vector = prod.inputs[0]
    values = facts.ints(vector)
    if values is not None and values == [shape[a] for a in axes]:
        for k, a in enumerate(axes):
            facts.tie_element_dim(vector, k, summed, a)


def _broadcast_divisor(facts: BatchFacts, producer: Node, divisor: Value) -> None:
    """A mean's gradient: ``Tile(g) / n`` with ``n`` the tiling factor carries the batch when a tiled axis does."""
    data, out = producer.inputs[0], producer.outputs[0]
    src, dst = facts.shape(data), facts.shape(out)
    if len(src) != len(dst) or not math.prod(src):
        return
    if float(facts.content[divisor].reshape(-1)[0]) != math.prod(dst) // math.prod(src):
        return
    tiled = [facts.dim(out, k) for k in range(len(dst)) if dst[k] != src[k]]
    if any(label is None for label in tiled):
        return
    facts.set_element(divisor, 0, SOME if any(_carries(label) for label in tiled) else NO)


@batch_rule("Prod")
def _prod(node: Node, facts: BatchFacts) -> None:
    """``Prod`` of a shape vector: carries the batch when exactly one factor does; else a reduction."""
    _reduce(node, facts)
    data, out = node.inputs[0], node.outputs[0]
    if data not in facts.elements or out not in facts.elements or len(facts.elements[out]) != 1:
        return
    labels = facts.elements[data]
    if all(label == NO for label in labels):
        facts.set_element(out, 0, NO)
    elif sum(1 for label in labels if label == SOME) == 1 and all(label is not None for label in labels):
        facts.set_element(out, 0, SOME)
    elif sum(1 for label in labels if label == SOME) > 1:
        raise _ConflictError
    if facts.element(out, 0) == NO:
        for k in range(len(labels)):
            facts.set_element(data, k, NO)
    elif facts.element(out, 0) == SOME:
        open_ = [k for k, label in enumerate(labels) if label != NO]
        if len(open_) == 1:
            facts.set_element(data, open_[0], SOME)


@batch_rule("Shape", "Size", "Rank", "ShapeN")
def _shape(node: Node, facts: BatchFacts) -> None:
    """``Shape(x)``: its elements are ``x``'s dimensions; ``Size`` carries the batch when ``x`` does."""
    for out in node.outputs:
        facts.no_batch(out)
    if node.op == "tf.ShapeN":
        for data, out in zip(node.inputs, node.outputs, strict=False):
            for axis in range(len(facts.dims[data])):
                facts.tie_element_dim(out, axis, data, axis)
        return
    data, out = node.inputs[0], node.outputs[0]
    if node.op == "tf.Shape":
        for axis in range(len(facts.dims[data])):
            facts.tie_element_dim(out, axis, data, axis)
    elif node.op == "tf.Size":
        labels = facts.dims[data]
        if any(_carries(label) for label in labels):
            facts.set_element(out, 0, SOME)
        elif all(label == NO for label in labels):
            facts.set_element(out, 0, NO)
    else:
        facts.set_element(out, 0, NO)


@batch_rule("BroadcastGradientArgs")
def _broadcast_gradient_args(node: Node, facts: BatchFacts) -> None:
    """Two shape vectors in, two lists of axes out: the axes never carry the batch."""
    for value in (*node.inputs, *node.outputs):
        facts.no_batch(value)
    for out in node.outputs:
        facts.index_operand(out)


@batch_rule("MatMul", "_MklMatMul", "_FusedMatMul")
def _matmul(node: Node, facts: BatchFacts) -> None:
    """``[m, k] x [k, n] -> [m, n]`` (``transpose_a``/``transpose_b`` swap an operand's axes)."""
    a, b = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    ta, tb = bool(node.params.get("transpose_a")), bool(node.params.get("transpose_b"))
    m, ka = (1, 0) if ta else (0, 1)
    kb, n = (1, 0) if tb else (0, 1)
    facts.tie(a, m, out, 0)
    facts.tie(b, n, out, 1)
    facts.tie(a, ka, b, kb)
    for extra in node.inputs[2:]:
        _broadcast_dims(node, facts, [extra], out)


@batch_rule("BatchMatMulV2", "BatchMatMulV3", "BatchMatMul")
def _batch_matmul(node: Node, facts: BatchFacts) -> None:
    """Leading axes broadcast; the last two multiply as matrices (``adj_x``/``adj_y`` transpose them)."""
    x, y = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    rx, ry, ro = len(facts.dims[x]), len(facts.dims[y]), len(facts.dims[out])
    ax, ay = bool(node.params.get("adj_x")), bool(node.params.get("adj_y"))
    xm, xk = (rx - 1, rx - 2) if ax else (rx - 2, rx - 1)
    yk, yn = (ry - 1, ry - 2) if ay else (ry - 2, ry - 1)
    facts.tie(x, xm, out, ro - 2)
    facts.tie(y, yn, out, ro - 1)
    facts.tie(x, xk, y, yk)
    out_shape = facts.shape(out)
    for value, rank in ((x, rx), (y, ry)):
        shape = facts.shape(value)
        for axis in range(rank - 2):
            target = ro - rank + axis
            if shape[axis] == out_shape[target]:
                facts.tie(value, axis, out, target)
            else:
                facts.set_dim(value, axis, NO)


@batch_rule("Einsum")
def _einsum(node: Node, facts: BatchFacts) -> None:
    """Dimensions named by one letter of the equation are the same dimension (no ellipsis)."""
    equation = str(node.params.get("equation", "")).replace(" ", "")
    if "..." in equation or "->" not in equation:
        facts.undecided_by(f"its equation '{equation}' has an ellipsis or no result")
        return
    lhs, rhs = equation.split("->")
    where: dict[str, tuple[Value, int]] = {}
    for value, letters in zip([*node.inputs, node.outputs[0]], [*lhs.split(","), rhs], strict=False):
        for axis, letter in enumerate(letters):
            if letter in where:
                other, other_axis = where[letter]
                if facts.shape(other)[other_axis] == facts.shape(value)[axis]:
                    facts.tie(other, other_axis, value, axis)
            else:
                where[letter] = (value, axis)


def _reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]] | None:
    """Row-major groups of axes with equal products (unit axes left out); None when the sizes disagree."""
    a = [i for i, s in enumerate(src) if s != 1]
    b = [j for j, s in enumerate(dst) if s != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i >= len(a) or j >= len(b):
            return None
        ga, gb = [a[i]], [b[j]]
        pa, pb = src[a[i]], dst[b[j]]
        i += 1
        j += 1
        while pa != pb:
            if pa < pb:
                if i >= len(a):
                    return None
                ga.append(a[i])
                pa *= src[a[i]]
                i += 1
            else:
                if j >= len(b):
                    return None
                gb.append(b[j])
                pb *= dst[b[j]]
                j += 1
        groups.append((ga, gb))
    return groups


def _place_batch(facts: BatchFacts, src: Value, src_axes: list[int], dst: Value, dst_axes: list[int]) -> None:
    """Within one reshape group: the axis of ``dst`` that holds the batch of ``src``'s carrying axis."""
    src_shape, dst_shape = facts.shape(src), facts.shape(dst)
    carrying = [a for a in src_axes if _carries(facts.dim(src, a))]
    if not carrying:
        if all(facts.dim(src, a) == NO for a in src_axes):
            for axis in dst_axes:
                facts.set_dim(dst, axis, NO)
        return
    axis = carrying[0]
    label = facts.dim(src, axis)
    assert label is not None
    after = math.prod(src_shape[a] for a in src_axes if a > axis)
    if label == SOME:
        if src_shape[axis] != facts.batch:
            facts.undecided_by(f"where the batch lies inside the {src_shape[axis]} of '%{src.name}' is not known")
            return
        inner = 1
    else:
        inner = label
    low = inner * after  # the batch's stride in the group, row-major
    high = low * facts.batch
    stride = 1
    for target in reversed(dst_axes):
        size = dst_shape[target]
        if stride <= low and high <= stride * size and low % stride == 0 and (stride * size) % high == 0:
            facts.set_dim(dst, target, low // stride)
            for other in dst_axes:
                if other != target:
                    facts.set_dim(dst, other, NO)
            return
        stride *= size
    raise _ConflictError  # the batch is split over several axes


@batch_rule("Reshape")
def _reshape(node: Node, facts: BatchFacts) -> None:
    """Axes grouped by equal row-major products; the batch goes to the one axis of its group that can hold it."""
    data, target = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    facts.shape_operand(target, out)
    _regroup(facts, data, out)


def _regroup(facts: BatchFacts, data: Value, out: Value) -> None:
    if data in facts.elements and out in facts.elements:  # a reshaped shape vector: same elements
        for k in range(min(len(facts.elements[data]), len(facts.elements[out]))):
            facts.tie_element(out, k, data, k)
    src, dst = facts.shape(data), facts.shape(out)
    groups = _reshape_groups(src, dst)
    if groups is None:
        facts.undecided_by(f"its operand's shape {list(src)} and its result's {list(dst)} do not regroup")
        return
    for axis, size in enumerate(src):
        if size == 1:
            facts.set_dim(data, axis, NO)
    for axis, size in enumerate(dst):
        if size == 1:
            facts.set_dim(out, axis, NO)
    for src_axes, dst_axes in groups:
        _place_batch(facts, data, src_axes, out, dst_axes)
        _place_batch(facts, out, dst_axes, data, src_axes)


@batch_rule("ExpandDims", "Squeeze")
def _expand_squeeze(node: Node, facts: BatchFacts) -> None:
    """Axes of size one added or removed: the others keep their order."""
    data, out = node.inputs[0], node.outputs[0]
    for extra in node.inputs[1:]:
        facts.index_operand(extra)
    _regroup(facts, data, out)


@batch_rule("Transpose")
def _transpose(node: Node, facts: BatchFacts) -> None:
    """Result axis ``j`` is operand axis ``perm[j]``."""
    data, perm = node.inputs
    out = node.outputs[0]
    facts.index_operand(perm)
    order = facts.ints(perm)
    if order is None:
        facts.undecided_by("its permutation is not known at compile time")
        return
    for j, i in enumerate(order):
        facts.tie(data, i % len(order), out, j)


@batch_rule("Sum", "Mean", "Max", "Min", "All", "Any", "EuclideanNorm", "ArgMax", "ArgMin")
def _reduce(node: Node, facts: BatchFacts) -> None:
    """Kept axes are the operand's axes that are not reduced (all of them in place with ``keep_dims``)."""
    data, axes_value = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    facts.index_operand(axes_value)
    axes = facts.ints(axes_value)
    if axes is None:
        facts.undecided_by("its axes are not known at compile time")
        return
    rank = len(facts.dims[data])
    reduced = {a % rank for a in axes} if rank else set()
    keep = bool(node.params.get("keep_dims", False)) and node.op not in ("tf.ArgMax", "tf.ArgMin")
    target = 0
    for axis in range(rank):
        if axis in reduced:
            if keep:
                facts.set_dim(out, target, NO)
                target += 1
            continue
        facts.tie(data, axis, out, target)
        target += 1


@batch_rule("Cumsum", "Cumprod", "ReverseV2")
def _along_axis(node: Node, facts: BatchFacts) -> None:
    """Same shape as the operand; the second operand names axes."""
    facts.tie_all(node.inputs[0], node.outputs[0])
    facts.index_operand(node.inputs[1])


@batch_rule("ConcatV2", "Concat")
def _concat(node: Node, facts: BatchFacts) -> None:
    """Other axes are the same; along the axis the result carries the batch when every part does."""
    parts = list(node.inputs[:-1]) if node.op == "tf.ConcatV2" else list(node.inputs[1:])
    axis_value = node.inputs[-1] if node.op == "tf.ConcatV2" else node.inputs[0]
    out = node.outputs[0]
    facts.index_operand(axis_value)
    found = facts.ints(axis_value)
    if found is None:
        facts.undecided_by("its axis is not known at compile time")
        return
    rank = len(facts.dims[out])
    axis = found[0] % rank if rank else 0
    for part in parts:
        for k in range(rank):
            if k != axis:
                facts.tie(part, k, out, k)
    labels = [facts.dim(p, axis) for p in parts]
    if all(label == NO for label in labels):
        facts.set_dim(out, axis, NO)
    elif all(_carries(label) for label in labels):
        facts.set_dim(out, axis, SOME)
    elif any(_carries(label) for label in labels) and any(label == NO for label in labels):
        raise _ConflictError
    if facts.dim(out, axis) == NO:
        for part in parts:
            facts.set_dim(part, axis, NO)
    if out in facts.elements and rank == 1:
        offset = 0
        for part in parts:
            count = len(facts.elements.get(part, [])) or facts.shape(part)[0]
            if part in facts.elements:
                for k in range(count):
                    facts.tie_element(out, offset + k, part, k)
            offset += count


@batch_rule("Pack")
def _pack(node: Node, facts: BatchFacts) -> None:
    """A new axis of the operands' count; the operands' axes keep their order around it."""
    out = node.outputs[0]
    rank = len(facts.dims[out])
    axis = _int_param(node, "axis", 0) % rank if rank else 0
    facts.set_dim(out, axis, NO)
    for part in node.inputs:
        for k in range(rank - 1):
            facts.tie(part, k, out, k if k < axis else k + 1)
    if out in facts.elements and rank == 1:
        for k, part in enumerate(node.inputs):
            if part in facts.elements:
                facts.tie_element(out, k, part, 0)


@batch_rule("Unpack")
def _unpack(node: Node, facts: BatchFacts) -> None:
    """The operand's ``axis`` is removed from each result."""
    data = node.inputs[0]
    rank = len(facts.dims[data])
    axis = _int_param(node, "axis", 0) % rank if rank else 0
    facts.set_dim(data, axis, NO)
    for out in node.outputs:
        for k in range(rank - 1):
            facts.tie(data, k if k < axis else k + 1, out, k)


@batch_rule("Split", "SplitV")
def _split(node: Node, facts: BatchFacts) -> None:
    """Other axes are the same; along the split axis each part carries the batch when the whole does."""
    if node.op == "tf.Split":
        axis_value, data = node.inputs[0], node.inputs[1]
    else:
        data, sizes, axis_value = node.inputs
        facts.index_operand(sizes)
    facts.index_operand(axis_value)
    found = facts.ints(axis_value)
    if found is None:
        facts.undecided_by("its axis is not known at compile time")
        return
    rank = len(facts.dims[data])
    axis = found[0] % rank if rank else 0
    for out in node.outputs:
        for k in range(rank):
            if k != axis:
                facts.tie(data, k, out, k)
    if _carries(facts.dim(data, axis)):
        raise _ConflictError  # splitting the batch: the part sizes would change
    facts.set_dim(data, axis, NO)
    for out in node.outputs:
        facts.set_dim(out, axis, NO)


def _strided_spec(facts: BatchFacts, node: Node, bounds: Sequence[Value]) -> tuple[Any, ...] | None:
    """The index of a ``StridedSlice`` (or its gradient) with operands ``begin, end, strides``, or None."""
    begin, end, strides = bounds
    for value in bounds:
        facts.no_batch(value)
    b, e, s = facts.values_of(begin), facts.values_of(end), facts.values_of(strides)
    if b is None or e is None or s is None:
        facts.undecided_by("its begin, end or strides are not known at compile time")
        return None
    for value in (begin, strides):
        facts.index_operand(value)
    return _strided_index(node, 0, b, e, s)


def _strided_ends(facts: BatchFacts, node: Node, data: Value, end: Value, index: tuple[Any, ...]) -> None:
    """An ``end`` element equal to the whole axis it stops (not masked) is that axis's size; others are not."""
    shape = facts.shape(data)
    ends = facts.ints(end) or []
    masks = _int_param(node, "end_mask", 0)
    for k, entry in enumerate(_spec_entries(index, shape)):
        if k >= len(ends):
            break
        if entry is None:
            facts.set_element(end, k, NO)
            continue
        in_axis, _, whole = entry
        if in_axis is not None and whole and not masks & (1 << k) and ends[k] == shape[in_axis]:
            facts.tie_element_dim(end, k, data, in_axis)
        else:
            facts.set_element(end, k, NO)


def _spec_entries(index: tuple[Any, ...], shape: tuple[int, ...]) -> list[tuple[int | None, int | None, bool] | None]:
    """:func:`_axis_map`'s entry for each position of a strided-slice spec (None for the ellipsis)."""
    entries = _axis_map(index, shape)
    explicit = sum(1 for i in index if i is not None and i is not Ellipsis)
    found: list[tuple[int | None, int | None, bool] | None] = []
    position = 0
    for item in index:
        if item is Ellipsis:
            found.append(None)
            position += len(shape) - explicit
        else:
            found.append(entries[position])
            position += 1
    return found


@batch_rule("StridedSlice")
def _strided_slice(node: Node, facts: BatchFacts) -> None:
    """Whole axes keep their label; a partly sliced axis cannot carry the batch; shape vectors are sliced too."""
    data, *bounds = node.inputs
    out = node.outputs[0]
    index = _strided_spec(facts, node, bounds)
    if index is None:
        return
    shape = facts.shape(data)
    _sliced(facts, node, data, out, index)
    _strided_ends(facts, node, data, bounds[1], index)
    if data in facts.elements and out in facts.elements:
        positions = np.arange(len(facts.elements[data])).reshape(shape)[index].reshape(-1)
        for k, position in enumerate(positions):
            facts.tie_element(out, k, data, int(position))


@batch_rule("StridedSliceGrad")
def _strided_slice_grad(node: Node, facts: BatchFacts) -> None:
    """``StridedSliceGrad(shape, begin, end, strides, dy)``: ``dy`` scattered into zeros of ``shape``.

    The result is the forward slice's operand (``shape`` lists its dimensions) and ``dy`` its result,
    so the forward rule relates them: a whole axis keeps its label, a partly sliced one is not the batch.
    """
    shape, *bounds, grad = node.inputs
    out = node.outputs[0]
    facts.shape_operand(shape, out)
    index = _strided_spec(facts, node, bounds)
    if index is None:
        return
    _sliced(facts, node, out, grad, index)
    _strided_ends(facts, node, out, bounds[1], index)


@batch_rule("ConcatOffset")
def _concat_offset(node: Node, facts: BatchFacts) -> None:
    """``ConcatOffset(axis, shape_0, ...)``: part ``i`` starts at the sum of the earlier parts' sizes on ``axis``.

    Zero elsewhere. An offset carries the batch when an earlier part's size on the axis does (a
    concatenation along the batch: the ``Slice`` it feeds then refuses to cut part of the batch).
    """
    axis_value, *shapes = node.inputs
    facts.index_operand(axis_value)
    for value in (*shapes, *node.outputs):
        facts.no_batch(value)
    found = facts.ints(axis_value)
    if found is None or not all(v in facts.elements for v in (*shapes, *node.outputs)):
        facts.undecided_by("its shapes are not known at compile time")
        return
    rank = len(facts.elements[shapes[0]])
    axis = found[0] % rank if rank else 0
    for i, out in enumerate(node.outputs):
        for k in range(rank):
            if k != axis:
                facts.set_element(out, k, NO)
        earlier = [facts.element(part, axis) for part in shapes[:i]]
        if all(label == NO for label in earlier):
            facts.set_element(out, axis, NO)
        elif any(label == SOME for label in earlier):
            facts.set_element(out, axis, SOME)
        if facts.element(out, axis) == NO:
            for part in shapes[:i]:
                facts.set_element(part, axis, NO)


@batch_rule("Slice")
def _slice(node: Node, facts: BatchFacts) -> None:
    """``Slice(x, begin, size)``: a whole axis (``size`` = its size or -1 from 0) keeps its label."""
    data, begin, size = node.inputs
    out = node.outputs[0]
    facts.index_operand(begin)
    facts.no_batch(size)
    starts, sizes = facts.ints(begin), facts.ints(size)
    if starts is None or sizes is None:
        facts.undecided_by("its begin or size is not known at compile time")
        return
    shape = facts.shape(data)
    index = tuple(slice(b, None if s < 0 else b + s) for b, s in zip(starts, sizes, strict=True))
    _sliced(facts, node, data, out, index)
    for k, (first, count) in enumerate(zip(starts, sizes, strict=True)):
        if first == 0 and count == shape[k]:
            facts.tie_element_dim(size, k, data, k)
        else:
            facts.set_element(size, k, NO)
    if data in facts.elements and out in facts.elements:
        positions = np.arange(len(facts.elements[data])).reshape(shape)[index].reshape(-1)
        for k, position in enumerate(positions):
            facts.tie_element(out, k, data, int(position))


@batch_rule("GatherV2", "ResourceGather")
def _gather(node: Node, facts: BatchFacts) -> None:
    """``params[:axis] + indices.shape + params[axis+1:]`` (``batch_dims`` leading axes shared)."""
    out = node.outputs[0]
    if node.op == "tf.ResourceGather":
        indices = node.inputs[1]
        for k in range(len(facts.dims[indices])):
            facts.tie(indices, k, out, k)
        return
    params, indices, axis_value = node.inputs
    facts.index_operand(axis_value)
    found = facts.ints(axis_value)
    if found is None:
        facts.undecided_by("its axis is not known at compile time")
        return
    rank_p, rank_i = len(facts.dims[params]), len(facts.dims[indices])
    axis = found[0] % rank_p if rank_p else 0
    batch_dims = _int_param(node, "batch_dims", 0)
    for k in range(axis):
        facts.tie(params, k, out, k)
    if rank_p:
        facts.set_dim(params, axis, NO)
    for k in range(batch_dims, rank_i):
        facts.tie(indices, k, out, axis + k - batch_dims)
    for k in range(axis + 1, rank_p):
        facts.tie(params, k, out, k - 1 + rank_i - batch_dims)
    if params in facts.elements and out in facts.elements and rank_p == 1:
        positions = facts.ints(indices)
        if positions is not None:
            for k, position in enumerate(positions):
                facts.tie_element(out, k, params, position)


@batch_rule("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd")
def _segment(node: Node, facts: BatchFacts) -> None:
    """``[num_segments] + data.shape[ids.rank:]``; the ids index the data's leading axes."""
    data, ids, count = node.inputs
    out = node.outputs[0]
    rank_i = len(facts.dims[ids])
    for k in range(rank_i):
        facts.tie(data, k, ids, k)
    for k in range(rank_i, len(facts.dims[data])):
        facts.tie(data, k, out, k - rank_i + 1)
    facts.no_batch(count)
    facts.tie_element_dim(count, 0, out, 0)


@batch_rule("OneHot")
def _one_hot(node: Node, facts: BatchFacts) -> None:
    """The indices' shape with the depth axis inserted at ``axis``."""
    indices, depth, on, off = node.inputs
    out = node.outputs[0]
    rank = len(facts.dims[out])
    axis = _int_param(node, "axis", -1)
    axis = axis % rank if rank else 0
    for value in (depth, on, off):
        facts.index_operand(value)
    facts.set_dim(out, axis, NO)
    for k in range(rank - 1):
        facts.tie(indices, k, out, k if k < axis else k + 1)


@batch_rule("Fill")
def _fill(node: Node, facts: BatchFacts) -> None:
    """``Fill(dims, value)``: ``dims`` lists the result's dimensions."""
    facts.shape_operand(node.inputs[0], node.outputs[0])


@batch_rule("BroadcastTo")
def _broadcast_to(node: Node, facts: BatchFacts) -> None:
    """``BroadcastTo(x, shape)``: ``shape`` lists the result's dimensions; ``x`` broadcasts to it."""
    data, shape = node.inputs
    out = node.outputs[0]
    facts.shape_operand(shape, out)
    _broadcast_dims(node, facts, [data], out)


@batch_rule(
    "RandomUniform",
    "RandomStandardNormal",
    "TruncatedNormal",
    "RandomUniformInt",
    "StatelessRandomUniform",
    "StatelessRandomNormal",
    "StatelessTruncatedNormal",
    "StatelessRandomUniformV2",
    "StatelessRandomNormalV2",
    "StatelessTruncatedNormalV2",
    "StatelessRandomUniformIntV2",
    "StatelessRandomUniformFullIntV2",
    "Empty",
)
def _random(node: Node, facts: BatchFacts) -> None:
    """The first operand lists the result's dimensions; the others are seeds, keys and bounds."""
    facts.shape_operand(node.inputs[0], node.outputs[0])
    for value in node.inputs[1:]:
        facts.index_operand(value)


@batch_rule("StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg")
def _seeds(node: Node, facts: BatchFacts) -> None:
    """Seeds, keys and counters never carry the batch."""
    for value in (*node.inputs, *node.outputs):
        facts.index_operand(value)


@batch_rule("Tile")
def _tile(node: Node, facts: BatchFacts) -> None:
    """``Tile(x, multiples)``: result axis ``k`` is ``x``'s times ``multiples[k]``; one of them holds the batch."""
    data, multiples = node.inputs
    out = node.outputs[0]
    facts.no_batch(multiples)
    counts = facts.ints(multiples)
    if counts is None:
        facts.undecided_by("its multiples are not known at compile time")
        return
    for k, count in enumerate(counts):
        if count == 1:
            facts.tie(data, k, out, k)
            facts.set_element(multiples, k, NO)
            continue
        label_in, label_out = facts.dim(data, k), facts.dim(out, k)
        if _carries(label_in):
            facts.set_element(multiples, k, NO)
            facts.set_dim(out, k, SOME)
        elif label_in == NO and label_out is not None:
            facts.set_element(multiples, k, SOME if _carries(label_out) else NO)
        element = facts.element(multiples, k)
        if element == SOME:
            facts.set_dim(out, k, SOME)
            facts.set_dim(data, k, NO)
        elif element == NO and label_in == NO:
            facts.set_dim(out, k, NO)
        elif element == NO and label_out == NO:
            facts.set_dim(data, k, NO)


@batch_rule("Pad", "PadV2", "MirrorPad", "MirrorPadGrad")
def _pad(node: Node, facts: BatchFacts) -> None:
    """An axis padded by nothing keeps its label; a padded axis cannot carry the batch.

    ``MirrorPadGrad`` (the padded gradient folded back to the operand's shape) relates the same axes.
    """
    data, paddings = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    for value in node.inputs[1:]:
        facts.index_operand(value)
    pads = facts.ints(paddings)
    if pads is None:
        facts.undecided_by("its paddings are not known at compile time")
        return
    for k in range(len(facts.dims[data])):
        if pads[2 * k] == pads[2 * k + 1] == 0:
            facts.tie(data, k, out, k)
        else:
            if _carries(facts.dim(data, k)):
                raise _ConflictError
            facts.set_dim(data, k, NO)
            facts.set_dim(out, k, NO)


@batch_rule("Range")
def _range(node: Node, facts: BatchFacts) -> None:
    """``Range(0, n, 1)`` has ``n`` elements."""
    start, limit, delta = node.inputs
    out = node.outputs[0]
    for value in (start, delta):
        facts.index_operand(value)
    facts.no_batch(limit)
    first, step = facts.ints(start), facts.ints(delta)
    if first == [0] and step == [1] and limit in facts.elements:
        facts.tie_element_dim(limit, 0, out, 0)
    elif first is not None and step is not None and limit in facts.elements:
        facts.index_operand(limit)
    else:
        facts.undecided_by("its bounds are not known at compile time")


def _layout(node: Node, rank: int) -> tuple[int, int, list[int]]:
    """(batch axis, channel axis, spatial axes) of an image op from its ``data_format``."""
    fmt = str(node.params.get("data_format", "NHWC") or "NHWC")
    channel = 1 if fmt.startswith("NC") else rank - 1
    return 0, channel, [k for k in range(rank) if k not in (0, channel)]


def _image(facts: BatchFacts, node: Node, data: Value, out: Value, same_channels: bool) -> None:
    rank = len(facts.dims[data])
    batch_axis, channel, spatial = _layout(node, rank)
    facts.tie(data, batch_axis, out, batch_axis)
    if same_channels:
        facts.tie(data, channel, out, channel)
    for k in spatial:
        if facts.shape(data)[k] == facts.shape(out)[k]:
            facts.tie(data, k, out, k)
        else:
            facts.set_dim(data, k, NO)
            facts.set_dim(out, k, NO)


@batch_rule("Conv2D", "Conv3D", "DepthwiseConv2dNative", "_FusedConv2D")
def _conv(node: Node, facts: BatchFacts) -> None:
    """``[N, H, W, C] * [kh, kw, C, M] -> [N, H', W', M]`` (NCHW too); the filter never carries the batch."""
    data, filters = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    facts.no_batch(filters)
    _image(facts, node, data, out, node.op == "tf.DepthwiseConv2dNative")
    for extra in node.inputs[2:]:
        facts.no_batch(extra)


@batch_rule("Conv2DBackpropInput", "Conv3DBackpropInputV2", "DepthwiseConv2dNativeBackpropInput")
def _conv_backprop_input(node: Node, facts: BatchFacts) -> None:
    """``(input_sizes, filter, out_backprop) -> [N, H, W, C]``: ``input_sizes`` lists the result's dimensions."""
    sizes, filters, grad = node.inputs
    out = node.outputs[0]
    facts.no_batch(filters)
    facts.shape_operand(sizes, out)
    _image(facts, node, grad, out, False)


@batch_rule("Conv2DBackpropFilter", "Conv3DBackpropFilterV2", "DepthwiseConv2dNativeBackpropFilter")
def _conv_backprop_filter(node: Node, facts: BatchFacts) -> None:
    """``(input, filter_sizes, out_backprop) -> filter``: both operands share the batch axis; the result has none."""
    data, sizes, grad = node.inputs
    out = node.outputs[0]
    facts.no_batch(out)
    facts.shape_operand(sizes, out)
    facts.tie(data, 0, grad, 0)
    _, channel, spatial = _layout(node, len(facts.dims[data]))
    for k in (channel, *spatial):
        facts.set_dim(data, k, NO)
        facts.set_dim(grad, k, NO)


@batch_rule("MaxPool", "AvgPool", "MaxPool3D", "AvgPool3D", "MaxPoolV2")
def _pool(node: Node, facts: BatchFacts) -> None:
    """Batch and channels kept, spatial axes pooled."""
    _image(facts, node, node.inputs[0], node.outputs[0], True)
    for extra in node.inputs[1:]:
        facts.index_operand(extra)


@batch_rule("MaxPoolGrad", "MaxPool3DGrad", "MaxPoolGradV2")
def _max_pool_grad(node: Node, facts: BatchFacts) -> None:
    """``(orig_input, orig_output, grad) -> orig_input``'s shape."""
    orig_in, orig_out, grad = node.inputs[:3]
    out = node.outputs[0]
    facts.tie_all(orig_in, out)
    facts.tie_all(orig_out, grad)
    _image(facts, node, orig_in, grad, True)
    for extra in node.inputs[3:]:
        facts.index_operand(extra)


@batch_rule("AvgPoolGrad", "AvgPool3DGrad")
def _avg_pool_grad(node: Node, facts: BatchFacts) -> None:
    """``(orig_input_shape, grad) -> orig input``: the shape operand lists the result's dimensions."""
    sizes, grad = node.inputs
    out = node.outputs[0]
    facts.shape_operand(sizes, out)
    _image(facts, node, grad, out, True)


def _channels(facts: BatchFacts, node: Node, data: Value, vectors: Iterable[Value]) -> None:
    rank = len(facts.dims[data])
    if not rank:
        return
    _, channel, _ = _layout(node, rank)
    for vector in vectors:
        if len(facts.dims[vector]) == 1 and facts.shape(vector)[0] == facts.shape(data)[channel]:
            facts.tie(vector, 0, data, channel)
        else:
            facts.no_batch(vector)


@batch_rule("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "_FusedBatchNormEx")
def _batch_norm(node: Node, facts: BatchFacts) -> None:
    """``y`` is ``x``'s shape; scale, offset, statistics and reserve spaces are per channel."""
    data = node.inputs[0]
    facts.tie_all(data, node.outputs[0])
    _channels(facts, node, data, [*node.inputs[1:], *node.outputs[1:]])


@batch_rule("FusedBatchNormGrad", "FusedBatchNormGradV2", "FusedBatchNormGradV3")
def _batch_norm_grad(node: Node, facts: BatchFacts) -> None:
    """``x_backprop`` is ``y_backprop``'s and ``x``'s shape; the rest is per channel."""
    grad, data = node.inputs[0], node.inputs[1]
    facts.tie_all(grad, data)
    facts.tie_all(data, node.outputs[0])
    _channels(facts, node, data, [*node.inputs[2:], *node.outputs[1:]])


@batch_rule("BiasAddGrad")
def _bias_add_grad(node: Node, facts: BatchFacts) -> None:
    """The channel axis of the operand."""
    data, out = node.inputs[0], node.outputs[0]
    rank = len(facts.dims[data])
    _, channel, _ = _layout(node, rank)
    facts.tie(data, channel, out, 0)


@batch_rule("SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits")
def _cross_entropy(node: Node, facts: BatchFacts) -> None:
    """``logits [N, C]``, labels ``[N]`` (or ``[N, C]``) -> loss ``[N]``, backprop ``[N, C]``."""
    logits, labels = node.inputs
    loss, backprop = node.outputs
    facts.tie_all(logits, backprop)
    facts.tie(logits, 0, loss, 0)
    facts.tie(labels, 0, loss, 0)
    if len(facts.dims[labels]) == 2:
        facts.tie_all(labels, logits)


@batch_rule("L2Loss")
def _to_scalar(node: Node, facts: BatchFacts) -> None:
    """A scalar result: nothing to relate."""


@batch_rule("InvertPermutation")
def _invert_permutation(node: Node, facts: BatchFacts) -> None:
    """Permutations never carry the batch."""
    facts.index_operand(node.inputs[0])
    facts.index_operand(node.outputs[0])


@batch_rule(
    "VarHandleOp",
    "ReadVariableOp",
    "AssignVariableOp",
    "AssignAddVariableOp",
    "AssignSubVariableOp",
    "ResourceApplyAdam",
    "ResourceApplyGradientDescent",
    "ResourceApplyMomentum",
    "ResourceApplyKerasMomentum",
    "ResourceApplyRMSProp",
    "ResourceApplyAdagrad",
    "ResourceApplyAdagradV2",
    "ResourceApplyAdamWithAmsgrad",
    "ResourceApplyAdaMax",
    "ResourceApplyFtrl",
    "VariableV2",
    "NoOp",
)
def _variables(node: Node, facts: BatchFacts) -> None:
    """A variable's value, its reads and its updates never carry the batch."""
    for value in (*node.inputs, *node.outputs):
        facts.no_batch(value)


@batch_rule("Placeholder", "PlaceholderWithDefault", "Const")
def _source(node: Node, facts: BatchFacts) -> None:
    """Sources: labelled at the start (placeholders) or by their users (constants)."""


@batch_rule("IdentityN")
def _identity_n(node: Node, facts: BatchFacts) -> None:
    """Each result is its operand."""
    for data, out in zip(node.inputs, node.outputs, strict=False):
        facts.tie_all(data, out)
        if data in facts.elements and out in facts.elements:
            for k in range(len(facts.elements[out])):
                facts.tie_element(out, k, data, k)
