"""FastT operation splitting (FastT §5.2, ``SplitOperation`` of Algorithm 2): one op into n parts.

Which ops can be split, on which dimensions and how each operand is cut is each op kind's split
rule in :mod:`graphir.ops` (the ``split`` facet of its :class:`~graphir.ops.OpDef`; the rules sit
with their op families). This module checks the conditions every split needs (:func:`split_reason`)
and performs the rewrite.

:func:`split_node` rewrites the graph in place. The op ``op`` becomes ``n`` copies of itself (the
*parts*, nodes ``<op>.part<i>``), each computing a slice of the result along one parallelisable
dimension:

* ``batch``: dim 0 of the activations (data parallelism inside the op). The activation operand is
  cut along its batch axis by a ``graphir.split`` node; weights are *shared* by every part.
* ``channel``: the output channels / output features (model parallelism inside the op). The
  weight is cut: ``onnx.Conv`` ``W[Cout, Cin/g, k...]`` and its bias along axis 0, ``onnx.MatMul``
  ``B[..., K, N]`` along its last axis, ``onnx.Gemm`` ``B`` along N (axis 1, or 0 with
  ``transB``), ``tf.Conv2D`` ``filter[kh, kw, Cin, Cout]`` along axis 3, ``tf.MatMul`` ``b`` along N.
  Activations are shared.
* an integer axis (elementwise ops and pooling): that axis of the result; every operand that has
  the axis (numpy broadcasting, aligned from the right) is cut, size-1 and missing axes are shared.

A ``graphir.concat`` node (``axis`` param) joins the parts' results; it takes over the original
node's name and result name, so every consumer, graph output and printed reference is unchanged.
Parts have balanced sizes (the first ``d mod n`` parts one larger).

Weights that are graph constants are cut into new constants ``<const>.part<i>`` whose data is
sliced lazily: a :class:`~graphir.attributes.DenseTensor` is sliced at once (it is small or already
in memory), an :class:`~graphir.ir.ExternalTensor` gets a loader that loads the parent and slices
it on demand; a constant without data stays without data. A constant left unused is removed.
Weights computed by nodes (ONNX light models build them with ``ConstantOfShape``) are cut by a
``graphir.split`` node like activations.

Params are copied to every part; grouped convolutions (``group = g``) split on channels only
when ``g`` is a multiple of ``n`` (each part then convolves ``g / n`` whole groups over its slice
of the input channels, ``group = g / n``). Ops that cannot be split correctly are refused with a
:class:`SplitError` that says why (multi-result ops, dynamic shapes, training-mode batch
normalisation, fused groups, ops without a rule...).

**Costs and memory** (:func:`annotate_split`): when the original op has a ``cost``, every new node
gets one: a part's time on each device kind is the original's scaled by the part's share of the
analytical roofline time (:mod:`graphir.passes.profile.roofline`), so measured costs stay consistent and analytical
ones equal the part's own roofline time; split/concat nodes get their analytical copy time. ``mem``
is analytical: ``persistent`` counts the constants a node reads (a weight shared by the parts of a
batch split is counted in every part, a replica per part: conservative when two parts share a
device), ``activation`` the result bytes, ``temporary`` the convolution scratch.

:meth:`SplitResult.undo` restores the original op (same name, operands, params, annotations,
control edges), which OS-DPOS uses to try a split and take it back.

:func:`export_onnx_with_splits` exports a module containing split/concat nodes to ONNX (ONNX
``Split``/``Concat``) through :func:`graphir.passes.profile.export_onnx`, for numerical checks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import numpy as np

from graphir.annotations import Cost, Mem
from graphir.attributes import DenseTensor, ParamValue
from graphir.ir import ExternalTensor, Graph, Module, Node, Value, ValueKind
from graphir.ops import Dim, SplitError, SplitPlan, split_of
from graphir.ops.graphir_dialect import CONCAT_OP, SPLIT_OP
from graphir.passes.profile.roofline import kind_times
from graphir.types import TensorType

__all__ = [
    "SPLIT_OP",
    "CONCAT_OP",
    "Dim",
    "SplitError",
    "SplitResult",
    "annotate_split",
    "export_onnx_with_splits",
    "parallel_dims",
    "split_node",
    "split_reason",
]


def _plan(node: Node, dim: Dim, parts: int) -> SplitPlan:
    """The split plan of ``node``, or :class:`SplitError` naming why it cannot be split."""
    if node.graph is None:
        raise SplitError("is not in a graph")
    rule = split_of(node.op)
    if rule is None:
        raise SplitError("has no splitting rule (supported: Conv, MatMul, Gemm, pooling, elementwise ops)")
    if parts < 2:
        raise SplitError(f"needs parts >= 2, got {parts}")
    if len(node.outputs) != 1:
        raise SplitError(f"has {len(node.outputs)} results: only single-result ops can be split")
    if node.group is not None:
        raise SplitError(f"is in fusion group {node.group}: split before 'fuse'")
    for value in [*node.inputs, *node.outputs]:
        if not value.type.is_static:
            raise SplitError(f"has a non-static type {value.type} ('%{value.name}')")
    positional = sorted(k for k in ("_absent_inputs", "_absent_outputs", "_captured_inputs") if k in node.params)
    if positional:
        raise SplitError(f"has importer operand bookkeeping ({', '.join(positional)}) that a part cannot keep")
    plan = rule.plan(node, dim, parts)
    total = int(cast(tuple[int, ...], node.outputs[0].type.shape)[plan.out_axis])  # planned: a static shape
    if total < parts or min(plan.sizes) < 1:
        raise SplitError(f"has size {total} along axis {plan.out_axis}: too small for {parts} parts")
    if all(entry is None for entry in plan.operands):
        raise SplitError("has no operand carrying the split dimension")
    return plan


def split_reason(node: Node, dim: Dim, parts: int) -> str | None:
    """Why ``node`` cannot be split on ``dim`` into ``parts`` (``None``: it can)."""
    try:
        _plan(node, dim, parts)
    except SplitError as exc:
        return exc.message
    return None


def parallel_dims(node: Node) -> tuple[str, ...]:
    """The named parallelisable dimensions of ``node``'s op (``()`` when it has no rule)."""
    rule = split_of(node.op)
    return rule.dims if rule is not None else ()


# --------------------------------------------------------------------------- the rewrite


@dataclasses.dataclass
class SplitResult:
    """What :func:`split_node` created, and what it needs to undo the split.

    Attributes:
        name: the split op's name (now the concat node's name).
        dim: the dimension split (``batch``, ``channel`` or an axis).
        parts: the part nodes, in order.
        splits: the ``graphir.split`` nodes inserted on operands.
        concat: the ``graphir.concat`` node producing the original result.
        constants: the new sliced constants.
    """

    name: str
    dim: Dim
    parts: list[Node]
    splits: list[Node]
    concat: Node
    constants: list[Value]
    _op: str = ""
    _inputs: list[Value] = dataclasses.field(default_factory=list)
    _params: dict[str, ParamValue] = dataclasses.field(default_factory=dict)
    _annotations: dict[str, Any] = dataclasses.field(default_factory=dict)
    _control_inputs: list[Node] = dataclasses.field(default_factory=list)
    _removed_constants: list[tuple[int, Value]] = dataclasses.field(default_factory=list)
    _out_type: TensorType | None = None
    _out_name: str = ""

    @property
    def new_nodes(self) -> list[Node]:
        """Every node the split created: split nodes, parts, then the concat."""
        return [*self.splits, *self.parts, self.concat]

    def undo(self) -> Node:
        """Put the original op back (same name, operands, params, annotations); returns it."""
        graph = self.concat.graph
        assert graph is not None and self._out_type is not None
        for index, value in self._removed_constants:
            data = value.const
            restored = graph.add_constant(value.name, value.type, data)
            graph.constants.insert(index, graph.constants.pop())
            self._inputs = [restored if v is value else v for v in self._inputs]
        tmp = graph.add_input(graph.unique_name(f"{self.name}.undo"), self._out_type)
        self.concat.outputs[0].replace_all_uses_with(tmp)
        control_users = list(self.concat.control_users)
        for user in control_users:
            user.remove_control_input(self.concat)
        for node in reversed(self.new_nodes):
            graph.remove_node(node)
        for value in self.constants:
            graph.remove_value(value)
        node = graph.add_node(
            self._op, self._inputs, [self._out_type], name=self.name, output_names=[self._out_name], params=self._params
        )
        for key, value in self._annotations.items():
            node.set_annotation(key, value)
        for control in self._control_inputs:
            node.add_control_input(control)
        for user in control_users:
            user.add_control_input(node)
        tmp.replace_all_uses_with(node.outputs[0])
        graph.remove_value(tmp)
        return node


def _slice_data(data: Any, axis: int, begin: int, end: int, part_type: TensorType) -> Any:
    """The slice ``[begin:end]`` along ``axis`` of constant data, lazily for external data."""
    index = (slice(None),) * axis + (slice(begin, end),)
    if isinstance(data, DenseTensor):
        return DenseTensor.from_numpy(np.ascontiguousarray(data.numpy()[index]))
    if isinstance(data, ExternalTensor):
        if data.loader is None:
            return ExternalTensor(part_type, None)
        parent = data

        def load() -> Any:
            return np.ascontiguousarray(np.asarray(parent.numpy())[index])

        return ExternalTensor(part_type, load)
    return None


def _with_dim(value_type: TensorType, axis: int, size: int) -> TensorType:
    assert value_type.shape is not None
    shape = list(value_type.shape)
    shape[axis] = size
    return TensorType(value_type.dtype, tuple(shape))


def split_node(node: Node, dim: Dim, parts: int) -> SplitResult:
    """Split ``node`` into ``parts`` parts along ``dim``, in place (see the module docstring).

    Args:
        node: a single-result op with a splitting rule, in a graph.
        dim: ``"batch"``, ``"channel"`` or an integer axis of the result.
        parts: number of parts (at least 2, at most the size of the split dimension).

    Returns:
        The created nodes and constants, with :meth:`SplitResult.undo`.

    Raises:
        SplitError: the op cannot be split that way (the message names the op and the reason).
    """
    try:
        plan = _plan(node, dim, parts)
    except SplitError as exc:
        raise SplitError(
            f"cannot split '{node.name}' ({node.op}) on {dim} into {parts} parts: it {exc.message}"
        ) from None
    graph = node.graph
    assert graph is not None
    name = node.name
    original = node.outputs[0]
    result = SplitResult(
        name=name,
        dim=dim,
        parts=[],
        splits=[],
        concat=node,
        constants=[],
        _op=node.op,
        _inputs=list(node.inputs),
        _params=dict(node.params),
        _annotations=dict(node.annotations),
        _control_inputs=list(node.control_inputs),
        _out_type=original.type,
        _out_name=original.name,
    )
    # Per operand, the value each part reads.
    per_part: list[list[Value]] = [[] for _ in range(parts)]
    for k, (value, entry) in enumerate(zip(node.inputs, plan.operands, strict=True)):
        if entry is None:
            for row in per_part:
                row.append(value)
            continue
        axis, sizes = entry
        types = [_with_dim(value.type, axis, size) for size in sizes]
        if value.kind is ValueKind.CONSTANT:
            begin = 0
            for i, (size, part_type) in enumerate(zip(sizes, types, strict=True)):
                piece = graph.add_constant(
                    graph.unique_name(f"{value.name}.part{i}"),
                    part_type,
                    _slice_data(value.const, axis, begin, begin + size, part_type),
                )
                result.constants.append(piece)
                per_part[i].append(piece)
                begin += size
            continue
        split = graph.add_node(
            SPLIT_OP,
            [value],
            types,
            name=f"{name}.split{k}",
            output_names=[graph.unique_name(f"{name}.split{k}.{i}") for i in range(parts)],
            params={"axis": axis},
        )
        result.splits.append(split)
        for i in range(parts):
            per_part[i].append(split.outputs[i])
    part_types = [_with_dim(original.type, plan.out_axis, size) for size in plan.sizes]
    for i in range(parts):
        part_name = graph.unique_name(f"{name}.part{i}", for_node=True)
        part = graph.add_node(
            node.op,
            per_part[i],
            [part_types[i]],
            name=part_name,
            output_names=[graph.unique_name(part_name)],
            params=plan.params,
        )
        for key in ("affinity", "colocate"):
            if node.annotations.get(key) is not None:
                part.set_annotation(key, node.annotations[key])
        for control in node.control_inputs:
            part.add_control_input(control)
        result.parts.append(part)
    # Hand the original name over to the concat: park the uses on a temporary input meanwhile.
    tmp = graph.add_input(graph.unique_name(f"{name}.tmp"), original.type)
    original.replace_all_uses_with(tmp)
    control_users = list(node.control_users)
    for user in control_users:
        user.remove_control_input(node)
    graph.remove_node(node)
    concat = graph.add_node(
        CONCAT_OP,
        [p.outputs[0] for p in result.parts],
        [original.type],
        name=name,
        output_names=[original.name],
        params={"axis": plan.out_axis},
    )
    for key in ("affinity", "colocate"):
        if result._annotations.get(key) is not None:
            concat.set_annotation(key, result._annotations[key])
    for user in control_users:
        user.add_control_input(concat)
    tmp.replace_all_uses_with(concat.outputs[0])
    graph.remove_value(tmp)
    result.concat = concat
    for position, value in reversed(list(enumerate(graph.constants))):
        if value in result._inputs and not value.uses and not any(v is value for v in graph.outputs):
            result._removed_constants.insert(0, (position, value))
            graph.remove_value(value)
    return result


# --------------------------------------------------------------------------- costs


def _round(seconds: float) -> float:
    return float(f"{seconds:.12g}")


def annotate_split(module: Module, result: SplitResult) -> None:
    """Annotate the new nodes of ``result`` with ``cost`` and ``mem`` (see the module docstring).

    Nothing is written when the original op had no ``cost`` and no ``mem`` (an unprofiled graph).
    """
    original_cost: Cost | None = result._annotations.get("cost")
    if original_cost is None and result._annotations.get("mem") is None:
        return
    nodes = result.new_nodes
    times, temporaries = kind_times(module.cluster, nodes)
    # The original op's analytical time, to scale the parts' shares of its (possibly measured) cost.
    whole_graph = Graph("split-probe")
    probe_inputs = [whole_graph.add_input(f"in{k}", v.type) for k, v in enumerate(result._inputs)]
    out_type = result._out_type
    assert out_type is not None, "a split records the original result's type"
    probe = whole_graph.add_node(result._op, probe_inputs, [out_type], params=result._params)
    whole, _ = kind_times(module.cluster, [probe])
    for i, node in enumerate(nodes):
        kinds: dict[str, float] = {}
        for kind, seconds in times.items():
            t = float(seconds[i])
            if node in result.parts and original_cost is not None:
                measured = original_cost.time(kind)
                base = float(whole[kind][0])
                if measured is not None and base > 0:
                    t = measured * t / base
            kinds[kind] = _round(t)
        if original_cost is not None:
            node.cost = Cost(kinds)
        persistent = sum(v.nbytes for v in node.inputs if v.kind is ValueKind.CONSTANT)
        node.mem = Mem(persistent, sum(v.nbytes for v in node.outputs), temporaries[i])


# --------------------------------------------------------------------------- ONNX export


def export_onnx_with_splits(module: Module, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """:func:`graphir.passes.profile.export_onnx` with ``graphir.split``/``concat`` as ONNX Split/Concat.

    The split nodes' op names are swapped for the export only and restored afterwards; each ONNX
    ``Split`` gets its part sizes (the ``split`` input from opset 13, the attribute before).
    """
    from onnx import helper, numpy_helper

    from graphir.passes.profile import export_onnx

    graph = module.graph
    swapped = [(n, n.op) for n in graph.nodes if n.op in (SPLIT_OP, CONCAT_OP)]
    sizes: dict[str, list[int]] = {}
    for node, op in swapped:
        if op == SPLIT_OP:
            axis = int(cast(int, node.params["axis"]))  # an int: the split op's type rule checked it
            sizes[node.name] = [int(cast(tuple[int, ...], v.type.shape)[axis]) for v in node.outputs]  # static parts
        node.op = "onnx.Split" if op == SPLIT_OP else "onnx.Concat"
    try:
        model, feeds = export_onnx(module, rng)
    finally:
        for node, op in swapped:
            node.op = op
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    for proto in model.graph.node:
        if proto.op_type != "Split" or proto.name not in sizes:
            continue
        if opset >= 13:
            name = f"{proto.name}.sizes"
            model.graph.initializer.append(numpy_helper.from_array(np.asarray(sizes[proto.name], np.int64), name))
            proto.input.append(name)
        else:
            proto.attribute.append(helper.make_attribute("split", sizes[proto.name]))
    return model, feeds
