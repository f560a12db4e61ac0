"""Recover resource variables that a GraphDef holds only as bare ``Placeholder`` handles.

A training step saved the way most tutorials do (``concrete.graph.as_graph_def()``,
``tf.io.write_graph``) keeps each captured variable as a ``Placeholder`` with ``dtype=resource``
and ``shape {}``: the handle data that told TensorFlow the variable's dtype and shape while tracing
is not part of the GraphDef. Imported as is, every ``ReadVariableOp`` has unknown rank, so the
activations behind it do too, and the variable counts 0 bytes. :func:`recover_resource_variables`
rewrites such a placeholder into the ``VarHandleOp`` :func:`graphir.importers.tf.concrete_function_graphdef`
would have written (``dtype``, ``shape``, ``shared_name`` = the placeholder's name), so the rest of
the importer types it and :func:`~graphir.importers.tf_attrs.persistent_bytes` sizes it like any
variable.

TensorFlow's shape inference runs forward only, and a layer's sizes enter the graph through its
variables, so it cannot start on its own. The solver therefore iterates (approach "c" of issue 18,
fed by "a" and "b"):

1. Import the flat graph into a ``tf.Graph`` (TensorFlow infers what it can).
2. For every unresolved placeholder, merge the partial shapes its uses imply:

   * ``ReadVariableOp``: its inferred output shape.
   * ``AssignVariableOp`` / ``AssignAddVariableOp`` / ``AssignSubVariableOp``: the value's shape.
     Optimizer updates compute that value elementwise from the gradient and reads of the variable
     and its slots, whose shapes are unknown; :meth:`_Round.value_shape` broadcasts only the known
     operands of elementwise ops. The assumption (an operand of unknown shape does not widen the
     broadcast) holds for optimizer updates, where the unknown operands are the variable itself,
     its slots (same shape) and scalars.
   * ``ResourceApply*`` (TF optimizers): the ``grad``/``delta`` input's shape, for every resource
     input of the op (the variable and its slots).
   * Reads consumed by ``BiasAdd`` (bias), ``FusedBatchNorm*`` (scale, offset, mean, variance):
     the channel dim of the data input.
   * A convolution kernel (``Conv2D``/``Conv3D``/``DepthwiseConv2dNative`` filter, and the
     ``Conv*BackpropFilter`` whose ``filter_sizes`` is the ``Shape``/``ShapeN`` of that read):
     the input channels from the data, the output channels from the output or the output gradient,
     and each spatial size where the geometry fixes it: ``VALID`` padding at stride 1
     (``k = (in - out) / dilation + 1``), or any stride when only one size fits.

   Shapes here are TensorFlow's refined by :class:`~graphir.importers.tf_dims.DimSolver`, the dim
   equalities the graph implies beyond forward inference: the gradient code wrote static sizes into
   constants while tracing (a batch mean's ``Tile`` multiples), ``ReluGrad`` ties each activation
   to its gradient, ``ConcatV2`` its inputs to one another. So a 1x1 ``VALID`` conv whose input and
   output are unknown forward (every size behind a strided stem is) still gets ``k = 1``.

3. Rewrite the placeholders whose shape grew into ``VarHandleOp`` nodes (unknown dims ``-1``) and
   repeat until a round learns nothing new. Then, when the training checkpoint is given
   (``variables``, read by :func:`~graphir.importers.tf_checkpoint.read_variables`), give the
   placeholders still unresolved the checkpoint shapes the evidence forces
   (:func:`~graphir.importers.tf_checkpoint.match_variables`) and repeat from 1.

What the graph alone cannot fix: a kernel's spatial size under ``SAME`` padding (the output has
the input's size whatever the kernel) or under a stride that several sizes fit (7 and 8 at stride 2
both map 230 to 112); a class count that only sparse integer labels carry (nothing in a sparse
cross-entropy's graph holds it, so the last dense layer's kernel and bias stay ``[n, ?]``/``[?]``);
a variable used only elementwise together with others (the optimizer's learning rate and
iteration count: no rank even); a handle nobody uses. Such a placeholder keeps what was learned (a
``VarHandleOp`` of partial shape, 0 bytes; a ``Placeholder`` when not even the rank is known) and
one warning names them with their partial shapes. A one-line note says how many were recovered and
from where.

Placeholders are candidates only when every use of the handle (through ``Identity``) is a variable
op: a resource placeholder fed to a lookup table or an iterator op is left alone.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from graphir.importers.tf_checkpoint import CheckpointVariable, match_variables
from graphir.importers.tf_dims import BROADCASTING_BINARY, DimSolver
from graphir.importers.tf_inline import _split_ref

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2, node_def_pb2, types_pb2


PartialShape = tuple[int | None, ...] | None
"""A shape with ``None`` for an unknown dim; ``None`` itself for unknown rank."""

MAX_ROUNDS = 16
"""Rounds of TensorFlow shape inference before the solver gives up (each round imports the graph)."""

_MAX_NAMES = 5

_ASSIGN_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"})
_OTHER_VARIABLE_OPS = frozenset(
    {"ReadVariableOp", "VarIsInitializedOp", "VariableShape", "DestroyResourceOp", "ResourceGather", "ResourceGatherNd"}
)
_VARIABLE_OP_PREFIXES = ("ResourceApply", "ResourceSparseApply", "ResourceScatter", "ResourceStridedSliceAssign")
_HANDLE_FORWARDERS = frozenset({"Identity", "IdentityN"})

_UNARY_ELEMENTWISE = frozenset(
    {
        "Abs",
        "Cast",
        "Exp",
        "Identity",
        "Log",
        "Neg",
        "Reciprocal",
        "Relu",
        "Rsqrt",
        "Sigmoid",
        "Sign",
        "Sqrt",
        "Square",
        "StopGradient",
        "Tanh",
    }
)
_BROADCAST_ELEMENTWISE = (BROADCASTING_BINARY - {"BiasAdd"}) | {"AddN"}
_CONV_OPS = {"Conv2D": 2, "Conv3D": 3, "DepthwiseConv2dNative": 2}
_CONV_FILTER_GRADS = {"Conv2DBackpropFilter": 2, "Conv3DBackpropFilterV2": 3, "DepthwiseConv2dNativeBackpropFilter": 2}
_BATCH_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})


def is_variable_use(op_type: str) -> bool:
    """True for an op that takes a variable's handle (read, assign, optimizer apply, scatter...)."""
    return op_type in _ASSIGN_OPS or op_type in _OTHER_VARIABLE_OPS or op_type.startswith(_VARIABLE_OP_PREFIXES)


@dataclass
class RecoveryReport:
    """What :func:`recover_resource_variables` did.

    Attributes:
        recovered: placeholder name -> (TF dtype enum, full shape) for every variable recovered.
        partial: placeholder name -> partial shape for those not fully recovered (``None``: rank
            unknown too).
        from_checkpoint: placeholder name -> how the checkpoint's shape was matched (``"shape"``,
            ``"elimination"``) for those of ``recovered`` the graph alone did not fix.
        rounds: rounds of TensorFlow shape inference run.
    """

    recovered: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    from_checkpoint: dict[str, str] = field(default_factory=dict)
    partial: dict[str, PartialShape] = field(default_factory=dict)
    rounds: int = 0


def recover_resource_variables(
    flat: graph_pb2.GraphDef,
    source: str,
    write: Callable[[str], object] | None = None,
    variables: Sequence[CheckpointVariable] | None = None,
    variables_source: str = "the checkpoint",
) -> RecoveryReport:
    """Turn resource placeholders of ``flat`` into typed ``VarHandleOp`` nodes, in place.

    Args:
        flat: a graph without function calls (after inlining); modified in place.
        source: how the note and warning name the input.
        write: where the note and warning lines go (default: standard error).
        variables: the training checkpoint's variables (:func:`~graphir.importers.tf_checkpoint.read_variables`),
            consulted when the graph's evidence runs out (:func:`~graphir.importers.tf_checkpoint.match_variables`).
        variables_source: how the note names the checkpoint.

    Returns:
        The report (empty, and no TensorFlow import, when the graph has no such placeholder).
    """
    write_line: Callable[[str], object] = write or sys.stderr.write
    report = RecoveryReport()
    candidates = _candidates(flat)
    if not candidates:
        return report
    by_name = {node.name: node for node in flat.node}
    originals = {name: _copy(by_name[name]) for name in candidates}
    shapes: dict[str, PartialShape] = dict.fromkeys(candidates)
    dtypes: dict[str, int] = {}
    rewritten: dict[str, node_def_pb2.NodeDef] = {}  # the last round's rewrites, as they were before
    while report.rounds < MAX_ROUNDS:
        try:
            graph = _import(flat)
        except Exception:  # TensorFlow rejects the graph: the importer reports it when no rewrite is to blame
            if not rewritten:
                return report
            for name, before in rewritten.items():  # a use contradicting the evidence: give these up
                by_name[name].CopyFrom(before)
                shapes[name] = None
                report.from_checkpoint.pop(name, None)
            break
        report.rounds += 1
        learned = _Round(graph, candidates, shapes).learn(dtypes)
        if not any(name in dtypes for name in learned) and variables:
            learned = _from_checkpoint(variables, candidates, shapes, dtypes, report)
        rewritten = {name: _copy(by_name[name]) for name in learned if name in dtypes}
        if not rewritten:
            break
        for name in rewritten:
            _make_var_handle(by_name[name], dtypes[name], shapes[name])
    for name in candidates:
        shape = shapes[name]
        if _full(shape) and name in dtypes:
            report.recovered[name] = (dtypes[name], tuple(d for d in shape or () if d is not None))
            continue
        report.partial[name] = shape
        if name not in dtypes or shape is None:  # nothing usable: keep the original placeholder
            by_name[name].CopyFrom(originals[name])
    _write_summary(report, len(candidates), source, variables_source if variables is not None else None, write_line)
    return report


def _full(shape: PartialShape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _from_checkpoint(
    variables: Sequence[CheckpointVariable],
    candidates: list[str],
    shapes: dict[str, PartialShape],
    dtypes: dict[str, int],
    report: RecoveryReport,
) -> list[str]:
    """Give the unresolved placeholders the checkpoint shapes the evidence forces; the names given one."""
    unresolved = {n: (dtypes.get(n), shapes[n]) for n in candidates if not (_full(shapes[n]) and n in dtypes)}
    known = {n: (dtypes[n], tuple(d or 0 for d in shapes[n] or ())) for n in candidates if n not in unresolved}
    forced = match_variables(variables, unresolved, known)
    for name, (dtype, shape, how) in forced.items():
        dtypes[name], shapes[name] = dtype, shape
        report.from_checkpoint[name] = how
    return list(forced)


def _write_summary(
    report: RecoveryReport, total: int, source: str, variables_source: str | None, write: Callable[[str], object]
) -> None:
    """The one-line note (how many, from where) and the warning naming the placeholders still unknown."""
    from_graph = len(report.recovered) - len(report.from_checkpoint)
    where = f"{from_graph} from their uses ({report.rounds} round(s) of TF shape inference)"
    if variables_source is not None:
        hows = Counter(report.from_checkpoint.values())
        detail = ", ".join(f"{count} by {how}" for how, count in sorted(hows.items()))
        where += f", {len(report.from_checkpoint)} from {variables_source}" + (f" ({detail})" if detail else "")
    write(
        f"{source}: note: recovered the dtype and shape of {len(report.recovered)} of {total} resource variable "
        f"placeholder(s): {where}\n"
    )
    if not report.partial:
        return
    names = sorted(report.partial)
    shown = ", ".join(f"'{n}' {_format(report.partial[n])}" for n in names[:_MAX_NAMES])
    more = "" if len(names) <= _MAX_NAMES else f", ... ({len(names) - _MAX_NAMES} more)"
    hint = "" if variables_source is not None else " (the training checkpoint can supply them: --tf-variables)"
    write(
        f"{source}: warning: {len(names)} resource variable placeholder(s) without handle data could not be "
        f"fully recovered and count 0 bytes{hint}: {shown}{more}\n"
    )


# ----------------------------------------------------------------------------------- helpers


def _candidates(flat: graph_pb2.GraphDef) -> list[str]:
    """Resource placeholders whose every use (through ``Identity``) is a variable op, in node order."""
    from tensorflow.core.framework import types_pb2

    placeholders = [
        node for node in flat.node if node.op == "Placeholder" and node.attr["dtype"].type == types_pb2.DT_RESOURCE
    ]
    if not placeholders:  # most graphs: no table of users needed
        return []
    users: dict[str, list[node_def_pb2.NodeDef]] = {}
    for node in flat.node:
        for ref in node.input:
            if not ref.startswith("^"):
                users.setdefault(_split_ref(ref)[0], []).append(node)
    out: list[str] = []
    for node in placeholders:
        stack, seen, ok = [node.name], set(), True
        while stack and ok:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            for user in users.get(name, ()):
                if user.op in _HANDLE_FORWARDERS:
                    stack.append(user.name)
                elif not is_variable_use(user.op):
                    ok = False
        if ok:
            out.append(node.name)
    return out


def _copy(node: node_def_pb2.NodeDef) -> node_def_pb2.NodeDef:
    copy = type(node)()
    copy.CopyFrom(node)
    return copy


def _import(flat: graph_pb2.GraphDef) -> Any:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(flat, name="")
    return graph


def _make_var_handle(node: node_def_pb2.NodeDef, dtype: int, shape: PartialShape) -> None:
    """Rewrite ``node`` (same name and device) as the ``VarHandleOp`` of a variable of ``shape``."""
    device = node.device
    name = node.name
    node.Clear()
    node.name, node.op, node.device = name, "VarHandleOp", device
    node.attr["dtype"].type = cast("types_pb2.DataType.ValueType", dtype)  # a DataType enum TensorFlow gave
    node.attr["shape"].shape.SetInParent()  # a scalar has no dims but needs the attr
    if shape is None:
        node.attr["shape"].shape.unknown_rank = True
    else:
        for d in shape:
            node.attr["shape"].shape.dim.add().size = -1 if d is None else d
    node.attr["shared_name"].s = name.encode()
    node.attr["container"].s = b""


def _format(shape: PartialShape) -> str:
    if shape is None:
        return "[*]"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _dims(tf_shape: Any) -> PartialShape:
    return None if tf_shape.rank is None else tuple(tf_shape.as_list())


def _merge(a: PartialShape, b: PartialShape) -> PartialShape | Literal[False]:
    """The more specific of two compatible partial shapes; ``False`` when they conflict."""
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b):
        return False
    out: list[int | None] = []
    for x, y in zip(a, b, strict=True):
        if x is not None and y is not None and x != y:
            return False
        out.append(x if x is not None else y)
    return tuple(out)


def _refine(shape: PartialShape, evidence: PartialShape) -> PartialShape:
    """``shape`` made more specific by ``evidence``; unchanged when they conflict."""
    merged = _merge(shape, evidence)
    return shape if merged is False else merged


def _broadcast(shapes: list[tuple[int | None, ...]]) -> PartialShape:
    rank = max(len(s) for s in shapes)
    out: list[int | None] = []
    for axis in range(rank):
        dims = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        known = {d for d in dims if d is not None and d != 1}
        if len(known) > 1:
            return None
        if known:
            out.append(known.pop())
        elif any(d is None for d in dims):
            out.append(None)
        else:
            out.append(1)
    return tuple(out)


def _known(shape: PartialShape) -> int:
    """How much a partial shape says (rank counts one, each known dim one more)."""
    return 0 if shape is None else 1 + sum(d is not None for d in shape)


class _Round:
    """One round: the evidence the current ``tf.Graph`` gives about each unresolved placeholder."""

    def __init__(self, graph: Any, candidates: list[str], shapes: dict[str, PartialShape]):
        self.graph = graph
        self.candidates = candidates
        self.shapes = shapes
        self._value_shapes: dict[str, PartialShape] = {}
        self._solver: DimSolver | None = None

    def dims(self, tensor: Any) -> PartialShape:
        """``tensor``'s inferred shape with the dims the graph's equalities fix (:mod:`~graphir.importers.tf_dims`)."""
        if self._solver is None:
            self._solver = DimSolver(self.graph)
        return self._solver.shape(tensor)

    def learn(self, dtypes: dict[str, int]) -> list[str]:
        """Merge this round's evidence into ``shapes``/``dtypes``; the names whose shape grew."""
        grew: list[str] = []
        for name in self.candidates:
            before = self.shapes[name]
            if before is not None and all(d is not None for d in before) and name in dtypes:
                continue
            shape = before
            for evidence, dtype in self.evidence(self.graph.get_operation_by_name(name).outputs[0]):
                if dtype is not None and name not in dtypes:
                    dtypes[name] = dtype
                shape = _refine(shape, evidence)  # conflicting evidence (an unusual use) is ignored
            if _known(shape) > _known(before):
                self.shapes[name] = shape
                grew.append(name)
        return grew

    def evidence(self, handle: Any) -> list[tuple[PartialShape, int | None]]:
        out: list[tuple[PartialShape, int | None]] = []
        for consumer in handle.consumers():
            op_type = consumer.type
            if op_type in _HANDLE_FORWARDERS:
                for output in consumer.outputs:
                    out.extend(self.evidence(output))
            elif op_type == "ReadVariableOp":
                dtype = consumer.get_attr("dtype").as_datatype_enum
                out.append((_dims(consumer.outputs[0].shape), dtype))
                out.extend((shape, dtype) for shape in self.read_uses(consumer.outputs[0]))
            elif op_type in _ASSIGN_OPS:
                out.append((self.value_shape(consumer.inputs[1]), consumer.get_attr("dtype").as_datatype_enum))
            elif op_type.startswith("ResourceApply"):
                out.append(self.apply_grad(consumer))
        return out

    def apply_grad(self, op: Any) -> tuple[PartialShape, int | None]:
        names = [arg.name for arg in op.op_def.input_arg]
        grad = next((op.inputs[names.index(n)] for n in ("grad", "delta") if n in names), None)
        dtype = op.get_attr("T").as_datatype_enum if "T" in op.node_def.attr else None
        return (None if grad is None else self.value_shape(grad)), dtype

    def value_shape(self, tensor: Any) -> PartialShape:
        """The shape of ``tensor``, broadcasting only the known operands of elementwise ops."""
        key = tensor.name
        if key in self._value_shapes:
            return self._value_shapes[key]
        self._value_shapes[key] = None  # a cycle (none in a GraphDef) or a deep chain ends here
        shape = self.dims(tensor)
        if shape is None or any(d is None for d in shape):
            op = tensor.op
            if op.type == "ReadVariableOp":  # a variable being solved: its partial shape would blur size-1 dims
                shape = None
            elif op.type in _UNARY_ELEMENTWISE:
                shape = _refine(shape, self.value_shape(op.inputs[0]))
            elif op.type in _BROADCAST_ELEMENTWISE:
                operands = [self.value_shape(t) for t in op.inputs]
                known = [s for s in operands if s is not None]
                # With an operand of unknown shape, scalars alone say nothing (alpha * m / sqrt(v)).
                if known and (len(known) == len(operands) or any(known)):
                    shape = _refine(shape, _broadcast(known))
        self._value_shapes[key] = shape
        return shape

    def kernel(self, op: Any, spatial: int, x: Any, y: Any, y_dims: PartialShape) -> PartialShape:
        """A conv kernel's ``[k..., in, out]`` (depthwise ``[k..., in, multiplier]``) from its data and output.

        ``y`` is the conv's output or, for a ``Conv*BackpropFilter``, its output gradient (same shape);
        ``y_dims`` what is known of its shape. A spatial size is fixed where the geometry allows it
        (:func:`_window_sizes`): ``VALID`` at stride 1, from the dims' difference even when neither
        is known (:meth:`DimSolver.difference`), or when only one size fits.
        """
        x_dims = self.dims(x)
        if (x_dims is not None and len(x_dims) != spatial + 2) or (y_dims is not None and len(y_dims) != spatial + 2):
            return None
        channels_first = _data_format(op).startswith("NC")
        ch = 1 if channels_first else spatial + 1
        first = 2 if channels_first else 1
        c_in = None if x_dims is None else x_dims[ch]
        c_out = None if y_dims is None else y_dims[ch]
        if op.type.startswith("Depthwise"):
            c_out = None if c_in is None or c_out is None or c_out % c_in else c_out // c_in
        strides = list(op.get_attr("strides"))
        try:
            dilations = list(op.get_attr("dilations"))
        except ValueError:
            dilations = [1] * (spatial + 2)
        padding = op.get_attr("padding")
        sizes: list[int | None] = [None] * spatial
        assert self._solver is not None  # built by self.dims
        for axis in range(spatial):
            i = first + axis
            diff = self._solver.difference(x, i, y, i)
            size_in = None if x_dims is None else x_dims[i]
            size_out = None if y_dims is None else y_dims[i]
            if padding == b"VALID" and strides[i] == 1 and diff is not None and diff % dilations[i] == 0:
                sizes[axis] = diff // dilations[i] + 1
            elif size_in is not None and size_out is not None:
                fits = _window_sizes(size_in, size_out, strides[i], dilations[i], padding)
                sizes[axis] = fits[0] if len(fits) == 1 else None
        return (*sizes, c_in, c_out)

    def read_uses(self, read: Any) -> list[PartialShape]:
        """Shapes the consumers of a variable's read value require of it."""
        out: list[PartialShape] = []
        for consumer in read.consumers():
            op_type = consumer.type
            if op_type in ("Identity", "Cast"):
                out.extend(self.read_uses(consumer.outputs[0]))
            elif op_type == "BiasAdd" and consumer.inputs[1].name == read.name:
                out.append((_channel(consumer, self.dims(consumer.inputs[0])),))
            elif op_type in _BATCH_NORMS and any(t.name == read.name for t in consumer.inputs[1:]):
                out.append((_channel(consumer, self.dims(consumer.inputs[0])),))
            elif op_type in _CONV_OPS and consumer.inputs[1].name == read.name:
                y = consumer.outputs[0]
                out.append(self.kernel(consumer, _CONV_OPS[op_type], consumer.inputs[0], y, self.dims(y)))
            elif op_type in ("Shape", "ShapeN"):
                index = next(k for k, t in enumerate(consumer.inputs) if t.name == read.name)
                for user in consumer.outputs[index].consumers():
                    if user.type in _CONV_FILTER_GRADS and user.inputs[1].name == consumer.outputs[index].name:
                        rank = _CONV_FILTER_GRADS[user.type]
                        dy = user.inputs[2]
                        out.append(self.kernel(user, rank, user.inputs[0], dy, self.value_shape(dy)))
        return out


def _data_format(op: Any) -> str:
    try:
        return op.get_attr("data_format").decode()
    except ValueError:
        return "NHWC"


def _channel(op: Any, dims: PartialShape) -> int | None:
    if dims is None:
        return None
    return dims[1] if _data_format(op).startswith("NC") else dims[-1]


def _window_sizes(size_in: int, size_out: int, stride: int, dilation: int, padding: bytes) -> list[int]:
    """The kernel sizes a window of ``stride``/``dilation`` could have to map ``size_in`` to ``size_out``.

    ``VALID``: ``out = (in - (k - 1) * dilation - 1) // stride + 1``; at stride 1 one size fits, at
    stride ``s`` up to ``s`` do (a 7x7/2 and an 8x8/2 kernel map 230 to 112 alike). ``SAME``:
    ``out = ceil(in / stride)`` whatever the kernel, so every size fits (returned as ``[]``).
    """
    if padding != b"VALID":
        return []
    return [k for k in range(1, size_in + 1) if (size_in - (k - 1) * dilation - 1) // stride + 1 == size_out]
