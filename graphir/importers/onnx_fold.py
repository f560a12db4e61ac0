"""Resolve ONNX ``If`` nodes whose condition is a compile-time constant, before the model is typed.

An ``If`` whose condition is known when the model is loaded always runs the same branch, so it can
be replaced by that branch's nodes (the standard simplification of constant control flow, as in
MLIR's ``scf.if`` canonicalization or onnxscript's constant folding). This matters for typing:
ONNX shape inference merges the two branches' result types, and when they differ in rank (ONNX's
own expanded ``AffineGrid`` function returns a scalar from one branch and a vector from the other)
every value downstream loses its rank, which the TensorFlow lowering needs. Inlining the taken
branch first lets shape inference type those values from the code that actually runs.

What counts as a constant condition (evaluated on demand, only along the condition's inputs):

* an initializer that is not also a graph input (a graph input with an initializer is a default
  that the caller may override), of at most :data:`FOLD_MAX_ELEMENTS` elements with its data inline;
* ``Shape`` / ``Size`` of a value whose shape is fully static: a declared graph input, a declared
  ``value_info`` or an initializer (ONNX shape inference is run once, lazily, for other values);
* any other deterministic default-domain node without subgraphs whose inputs are all constants
  (``Constant``, ``Equal``, ``Cast``, ``Not``...), evaluated by ONNX's reference evaluator
  (:class:`onnx.reference.ReferenceEvaluator`) when its inputs and result have at most
  :data:`FOLD_MAX_ELEMENTS` elements.

Only ``If`` nodes of the main graph are resolved, including the ones the taken branches bring along
(an ``If`` nested in a taken branch whose condition becomes known is resolved too); ``If`` nodes
inside ``Loop``/``Scan`` bodies or untaken branches stay regions. The taken branch's nodes and
initializers move to the main graph keeping their names, except names that are defined elsewhere
in the model (renamed ``<name>__<k>``); each branch result takes the ``If`` result's name (through
an ``Identity`` when the result is a value the branch does not compute itself, such as an outer
value or a result listed twice).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import cast

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

__all__ = ["FOLD_MAX_ELEMENTS", "resolve_constant_ifs"]

FOLD_MAX_ELEMENTS = 1024
"""The largest tensor (in elements) that condition evaluation reads or computes."""

_DEFAULT_DOMAINS = ("", "ai.onnx")
_NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
)

TypeSource = Callable[[], dict[str, onnx.TypeProto]]
"""Returns the inferred type of every named value (called at most once, only when a static shape is needed)."""


def resolve_constant_ifs(model: onnx.ModelProto, inferred_types: TypeSource) -> list[str]:
    """Replace every main-graph ``If`` with a constant condition by its taken branch, in place.

    Args:
        model: the loaded model; its main graph's node list is rewritten when an ``If`` resolves.
        inferred_types: called (once, lazily) when a ``Shape``/``Size`` needs the static shape of a
            value the model does not declare.

    Returns:
        The names (or, when unnamed, first outputs) of the resolved ``If`` nodes, in graph order.
    """
    graph = model.graph
    if not any(node.op_type == "If" and node.domain in _DEFAULT_DOMAINS for node in graph.node):
        return []
    folder = _ConstantFolder(model, inferred_types)
    return folder.run()


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def _graph_definitions(graph: onnx.GraphProto) -> Iterator[str]:
    """Every name ``graph`` defines, nested subgraphs included (inputs, initializers, node outputs)."""
    yield from (value.name for value in graph.input)
    yield from (tensor.name for tensor in graph.initializer)
    yield from (sparse.values.name for sparse in graph.sparse_initializer)
    for node in graph.node:
        yield from (name for name in node.output if name)
        for sub in _subgraphs(node):
            yield from _graph_definitions(sub)


def _local_definitions(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph`` itself defines (not its nested subgraphs): these shadow outer ones inside it."""
    names = {value.name for value in graph.input}
    names.update(tensor.name for tensor in graph.initializer)
    names.update(sparse.values.name for sparse in graph.sparse_initializer)
    names.update(name for node in graph.node for name in node.output if name)
    return names


def _rename_in_nodes(nodes: Iterable[onnx.NodeProto], mapping: dict[str, str], *, outputs: bool = True) -> None:
    """Apply ``mapping`` to the nodes' inputs (and outputs), and to the outer references of their subgraphs."""
    for node in nodes:
        for k, name in enumerate(node.input):
            if name in mapping:
                node.input[k] = mapping[name]
        for k, name in enumerate(node.output if outputs else ()):
            if name in mapping:
                node.output[k] = mapping[name]
        for sub in _subgraphs(node):
            shadowed = _local_definitions(sub)  # a name a subgraph defines again is its own inside it
            inner = {old: new for old, new in mapping.items() if old not in shadowed}
            if inner:
                _rename_in_nodes(sub.node, inner, outputs=False)
                for value in sub.output:  # a subgraph may return an outer value as it is
                    value.name = inner.get(value.name, value.name)


def _static_dims(type_proto: onnx.TypeProto | None) -> tuple[int, ...] | None:
    """The dims of a tensor type when every one is a known non-negative number, else ``None``."""
    if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
        return None
    tensor = type_proto.tensor_type
    if not tensor.HasField("shape"):
        return None
    dims: list[int] = []
    for dim in tensor.shape.dim:
        if dim.WhichOneof("value") != "dim_value" or dim.dim_value < 0:
            return None
        dims.append(dim.dim_value)
    return tuple(dims)


class _ConstantFolder:
    """One pass over the main graph: evaluates ``If`` conditions on demand and inlines taken branches."""

    def __init__(self, model: onnx.ModelProto, inferred_types: TypeSource):
        self.model = model
        self.graph = model.graph
        self._inferred_types = inferred_types
        self._inferred: dict[str, onnx.TypeProto] | None = None
        self.opsets = list(model.opset_import)
        graph = model.graph
        inputs = {value.name for value in graph.input}
        self.known: dict[str, np.ndarray] = {}
        for tensor in graph.initializer:
            if tensor.name not in inputs:
                self.learn_initializer(tensor)
        self.failed: set[str] = set()
        self.producer: dict[str, onnx.NodeProto] = {}
        self.declared: dict[str, onnx.TypeProto] = {}
        for infos in (graph.input, graph.value_info, graph.output):
            for info in infos:
                if info.name and info.HasField("type") and info.name not in self.declared:
                    self.declared[info.name] = info.type
        for tensor in graph.initializer:
            if tensor.name not in self.declared:
                self.declared[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
        self.definitions = Counter(_graph_definitions(graph))
        self.outputs = {value.name for value in graph.output}
        self.kept: list[onnx.NodeProto] = []
        self.pending: list[onnx.NodeProto] = list(reversed(graph.node))  # a stack: the next node is at the end

    def learn_initializer(self, tensor: TensorProto) -> None:
        """Record a small initializer with inline data as a known constant."""
        if tensor.data_location == TensorProto.EXTERNAL or tensor.data_type == TensorProto.UNDEFINED:
            return
        if int(np.prod(tensor.dims, dtype=np.int64)) > FOLD_MAX_ELEMENTS:
            return
        try:
            self.known[tensor.name] = numpy_helper.to_array(tensor)
        except (ValueError, TypeError):  # data that does not fill its dims: the importer reports it
            return

    # ----------------------------------------------------------------- driver
    def run(self) -> list[str]:
        resolved: list[str] = []
        while self.pending:
            node = self.pending.pop()
            branch = self.taken_branch(node)
            if branch is None:
                for name in node.output:
                    if name:
                        self.producer[name] = node
                self.kept.append(node)
                continue
            resolved.append(node.name or node.output[0])
            self.pending.extend(reversed(self.inline(node, branch)))
        if not resolved:
            return resolved
        holder = onnx.GraphProto()
        holder.node.extend(self.kept)  # copies: the kept nodes are still parts of graph.node
        del self.graph.node[:]
        self.graph.node.extend(holder.node)
        return resolved

    def taken_branch(self, node: onnx.NodeProto) -> onnx.GraphProto | None:
        """The branch an ``If`` always takes, or ``None`` (not an ``If``, or its condition is not constant)."""
        if node.op_type != "If" or node.domain not in _DEFAULT_DOMAINS or not node.input:
            return None
        condition = self.value(node.input[0])
        if condition is None or condition.size != 1:
            return None
        wanted = "then_branch" if bool(condition.reshape(-1)[0]) else "else_branch"
        for attr in node.attribute:
            if attr.name == wanted and attr.type == AttributeProto.GRAPH:
                branch = attr.g
                if branch.input or len(branch.output) != len(node.output):
                    return None  # malformed: the importer reports it on the If itself
                return branch
        return None

    # ----------------------------------------------------------------- inlining
    def fresh(self, name: str) -> str:
        k = 1
        while f"{name}__{k}" in self.definitions:
            k += 1
        return f"{name}__{k}"

    def inline(self, node: onnx.NodeProto, branch: onnx.GraphProto) -> list[onnx.NodeProto]:
        """The taken branch's nodes, renamed into the main graph, then ``Identity`` nodes for pass-through results."""
        inner = Counter(_graph_definitions(branch))
        local = _local_definitions(branch)
        returned = Counter(value.name for value in branch.output)
        read = Counter(name for inner_node in branch.node for name in inner_node.input)
        forwarded: dict[str, str] = {}  # a result an Identity node only forwards from the outer graph
        for inner_node in branch.node:
            if (
                inner_node.op_type == "Identity"
                and inner_node.domain in _DEFAULT_DOMAINS
                and len(inner_node.input) == 1
            ):
                (source,), (result,) = inner_node.input, inner_node.output
                if source not in local and returned[result] == 1 and not read[result]:
                    forwarded[result] = source
        computed = {name for inner_node in branch.node for name in inner_node.output if name}
        mapping: dict[str, str] = {}
        passthrough: list[tuple[str, str]] = []
        for value, result in zip(branch.output, node.output, strict=True):
            if not result:
                continue
            if value.name in forwarded:
                passthrough.append((forwarded[value.name], result))
            elif value.name in computed and returned[value.name] == 1 and value.name not in mapping:
                mapping[value.name] = result
            else:
                passthrough.append((value.name, result))
        for name in sorted(local - mapping.keys() - forwarded.keys()):
            if self.definitions[name] > inner[name]:  # defined elsewhere in the model too
                mapping[name] = self.fresh(name)
                self.definitions[mapping[name]] += 1
        nodes: list[onnx.NodeProto] = []
        for original in branch.node:
            if original.output and original.output[0] in forwarded:
                continue  # its result is the outer value itself (below)
            nodes.append(onnx.NodeProto())
            nodes[-1].CopyFrom(original)
        _rename_in_nodes(nodes, mapping)
        for tensor in branch.initializer:
            moved = self.graph.initializer.add()
            moved.CopyFrom(tensor)
            moved.name = mapping.get(tensor.name, tensor.name)
            self.learn_initializer(moved)
        for sparse in branch.sparse_initializer:
            moved_sparse = self.graph.sparse_initializer.add()
            moved_sparse.CopyFrom(sparse)
            moved_sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)
        declared = {info.name for info in self.graph.value_info} | {info.name for info in self.graph.output}
        for info in [*branch.value_info, *branch.output]:
            name = mapping.get(info.name, info.name)
            if info.name in local and info.name not in forwarded and info.HasField("type") and name not in declared:
                self.graph.value_info.add().CopyFrom(info)
                self.graph.value_info[-1].name = name
                declared.add(name)
        label = node.name or node.output[0]
        renamed: dict[str, str] = {}
        for k, (original, result) in enumerate(passthrough):
            source = renamed.get(original) or mapping.get(original, original)
            if original not in renamed and source in self.producer and source not in self.outputs:
                # An outer value returned as it is takes the result's name: no Identity, whose operand
                # would be typed less precisely than the result when that is a declared graph output.
                self.rename_everywhere(source, result, nodes)
                renamed[original] = result
                continue
            nodes.append(helper.make_node("Identity", [source], [result], name=f"{label}_result{k}"))
        return nodes

    def rename_everywhere(self, old: str, new: str, inlined: list[onnx.NodeProto]) -> None:
        """Rename the main-graph value ``old`` to ``new`` in every node that defines or reads it."""
        mapping = {old: new}
        _rename_in_nodes([*self.kept, *self.pending, *inlined], mapping)
        for info in self.graph.value_info:
            if info.name == old:
                info.name = new
        self.producer[new] = self.producer.pop(old)
        if old in self.known:
            self.known[new] = self.known.pop(old)
        self.definitions[new] += 1

    # ----------------------------------------------------------------- evaluation
    def static_dims(self, name: str) -> tuple[int, ...] | None:
        dims = _static_dims(self.declared.get(name))
        if dims is not None:
            return dims
        if self._inferred is None:
            self._inferred = self._inferred_types()
        return _static_dims(self._inferred.get(name))

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of ``name`` (``None`` when it is not a small compile-time constant)."""
        stack = [name]
        while stack:
            top = stack[-1]
            if top in self.known or top in self.failed:
                stack.pop()
                continue
            node = self.producer.get(top)
            if node is None:
                self.failed.add(top)
                stack.pop()
                continue
            missing = self.missing_inputs(node)
            if missing:
                stack.extend(missing)
                continue
            self.evaluate(node)
            stack.pop()
        return self.known.get(name)

    def missing_inputs(self, node: onnx.NodeProto) -> list[str]:
        """Inputs still to be evaluated before ``node`` can be (none for a ``Shape``/``Size`` of a static value)."""
        if node.op_type in ("Shape", "Size") and node.domain in _DEFAULT_DOMAINS and node.input:
            if self.static_dims(node.input[0]) is not None:
                return []
        return [name for name in node.input if name and name not in self.known and name not in self.failed]

    def evaluate(self, node: onnx.NodeProto) -> None:
        """Record the values of ``node``'s outputs in ``known``, or its outputs as ``failed``."""
        results = self.compute(node)
        outputs = [name for name in node.output if name]
        if results is None or len(results) < len(node.output):
            self.failed.update(outputs)
            return
        for name, result in zip(node.output, results, strict=False):
            if not name:
                continue
            if isinstance(result, np.ndarray) and result.size <= FOLD_MAX_ELEMENTS:
                self.known[name] = result
            else:
                self.failed.add(name)

    def compute(self, node: onnx.NodeProto) -> list[object] | None:
        if node.domain not in _DEFAULT_DOMAINS or node.op_type in _NONDETERMINISTIC:
            return None
        if any(True for _ in _subgraphs(node)):
            return None
        if node.op_type in ("Shape", "Size") and node.input:
            shape = self.shape_of(node.input[0])
            if shape is None:
                return None
            if node.op_type == "Size":
                return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
            return [self.shape_slice(node, shape)]
        inputs = [self.known.get(name) if name else None for name in node.input]
        if any(name and value is None for name, value in zip(node.input, inputs, strict=True)):
            return None
        return self.run_reference(node, inputs)

    def shape_of(self, name: str) -> tuple[int, ...] | None:
        dims = self.static_dims(name)
        if dims is not None:
            return dims
        array = self.known.get(name)
        return None if array is None else tuple(int(d) for d in array.shape)

    @staticmethod
    def shape_slice(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
        """``Shape``'s output with its optional ``start``/``end`` attributes (opset 15), clamped as ONNX says."""
        rank = len(shape)
        start, end = 0, rank
        for attr in node.attribute:
            if attr.name == "start":
                start = attr.i
            elif attr.name == "end":
                end = attr.i
        start = min(max(start + rank if start < 0 else start, 0), rank)
        end = min(max(end + rank if end < 0 else end, 0), rank)
        return np.array(shape[start:end], dtype=np.int64)

    def run_reference(self, node: onnx.NodeProto, inputs: list[np.ndarray | None]) -> list[object] | None:
        """``node`` run alone by ONNX's reference evaluator on constant inputs (``None`` on any failure)."""
        from onnx.reference import ReferenceEvaluator  # noqa: PLC0415 - loaded only when a condition needs it

        if any(value is not None and value.size > FOLD_MAX_ELEMENTS for value in inputs):
            return None
        feeds: dict[str, np.ndarray] = {}
        graph_inputs: list[onnx.ValueInfoProto] = []
        for name, value in zip(node.input, inputs, strict=True):
            if not name or value is None or name in feeds:
                continue
            feeds[name] = value
            try:
                elem_type = helper.np_dtype_to_tensor_dtype(value.dtype)
            except (KeyError, ValueError, TypeError):
                return None
            graph_inputs.append(helper.make_tensor_value_info(name, elem_type, list(value.shape)))
        outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
        single = helper.make_graph([node], "fold", graph_inputs, outputs)
        model = helper.make_model(single, opset_imports=self.opsets, ir_version=self.model.ir_version or 8)
        try:
            results = ReferenceEvaluator(model).run(None, feeds)
        except Exception:  # noqa: BLE001 - anything the evaluator cannot run is simply not a constant
            return None
        named = iter(cast("list[object]", results))
        return [next(named, None) if name else None for name in node.output]
