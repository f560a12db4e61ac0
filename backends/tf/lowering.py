"""Lower a placed module to TensorFlow: a callable ``tf.function`` and its ``GraphDef``.

:func:`lower` pins every IR node's TensorFlow ops to the device string (``Device.tf_device``) of
the node's ``device`` annotation, so the cluster's names (``/device:CPU:3``,
``/job:worker/task:1/device:GPU:0``) reach TensorFlow unchanged. Two paths:

* **ONNX-imported** modules (``onnx.*`` and ``graphir.split``/``graphir.concat`` nodes) are traced
  into a ``tf.function`` through each op's lowering in :mod:`graphir.ops` (its ``lower`` facet). Each node's
  ops live in a name scope named after the node, which is how :attr:`LoweredGraph.node_ops` maps
  IR nodes to TF ops.
* **TF-imported** modules (``tf.*`` nodes) re-emit their own ops: the GraphDef is rebuilt from the
  IR (:mod:`graphir.backends.tf.tf_graphdef`) with each NodeDef's ``device`` set, imported with
  ``tf.graph_util.import_graph_def`` inside ``tf.compat.v1.wrap_function`` and pruned to the
  ``Placeholder`` feeds and the graph outputs.

Every op is checked against the table *before* TensorFlow is loaded: an op outside it is a one-line
:class:`~graphir.errors.BackendError` naming the op type and the node, never a silent drop.

Constants (weights) are created once, on the device of their first user in topological order (the
node the profiler charges their persistent bytes to); other devices receive them through
TensorFlow's own transfers, as with any other cross-device tensor. A constant that converters only
read as static data (``Pad``'s pads, ``Slice``'s starts) stays unconsumed, is pruned by the
runtime, and is left out of :attr:`LoweredGraph.const_devices`.

**Large weights live outside the graph.** A constant of more than :data:`LARGE_WEIGHT_BYTES` (1 MiB)
on a device of this process becomes a non-trainable resource variable, created once on the
constant's device from the constant's (lazy) loader; the ``tf.function`` captures it and reads it
with one ``ReadVariableOp`` named like the constant (the op :attr:`LoweredGraph.const_devices`
records). A large weight that only ops with a ``weight_layout`` facet read (a convolution's filters)
is stored in the layout their lowerings read it in (TensorFlow's ``[k..., C, M]``), so no step
transposes it (:func:`_stored_layout`). Smaller constants, and any on a remote task, stay graph
``Const`` ops. Variables rather than captured eager tensors because a SavedModel stores variables in
its checkpoint shards (with their devices, ``save_variable_devices``), while captured eager tensors
are folded into the saved graph as constants again, which brings back the copies and TensorFlow's 2
GB GraphDef limit. The weight data is read once: the loader's array initialises the variable and is
dropped; neither the trace nor the GraphDef holds a copy. :meth:`LoweredGraph.graph_def` embeds the
weights as ``Const`` ops by default (a self-contained GraphDef, what ``--emit=tf-graphdef`` writes;
it must stay under 2 GB); ``graph_def(embed_weights=False)`` references them instead: each captured
handle becomes a ``VarHandleOp`` (``shared_name`` = its node name, on the weight's device), which
:meth:`LoweredGraph.initialize_weights` fills in a session one weight at a time.

**Enforcing the order** (``enforce_order=True``; by default when the placement recorded the
``enforced`` execution order and every placed node has an ``order``, :func:`enforces_order`; a
placement recorded ``dynamic`` gets none, as TensorFlow's executor runs it): for every device, each node gets a control
dependency on the node before it in that device's ``order`` annotation (Pesto's mechanism), so a
node's first ops cannot start before the previous node's results on that device exist. FastT
instead gives ops priorities that a modified TensorFlow executor uses to choose among *ready* ops;
stock TensorFlow has no priority API, so priorities would need a patched runtime. Control
dependencies work with any TensorFlow build and in any exported GraphDef/SavedModel; their cost is
that they forbid the runtime from running a later-ordered node early when an earlier one is
waiting for a transfer, which priorities would allow. Orders written by ``place``/``schedule``
follow a schedule that respects the data dependencies, so they never form a cycle; an order that
does is reported as a BackendError naming a node on the cycle.

**Fused kernels** (``kernel`` annotations, set by ``fuse-kernels``): the TF ops of the nodes of one
kernel name on one device are marked as one XLA cluster in :meth:`LoweredGraph.graph_def`, after a
check that every set is placed and that the graph with each set contracted stays acyclic (the
order's control dependencies included); see :mod:`graphir.backends.tf.xla`. Without annotations
nothing of this runs and the lowering is unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from graphir.backends.tf.xla import (
    KernelSet,
    absorb_constants,
    check_convex,
    kernel_sets,
    mark_kernels,
)
from graphir.errors import BackendError, Location
from graphir.ir import Module, Node, Value, ValueKind
from graphir.ops import OpContext, lowering_of, onnx_inputs, tf_dtype, weight_layout_of
from graphir.simulator import recorded_order

__all__ = ["LoweredGraph", "check_supported", "lower", "lowering_sequence", "module_opset", "node_devices"]

DEFAULT_OPSET = 13
"""ONNX opset assumed when the module metadata has none (a hand-written `.gir`)."""

LARGE_WEIGHT_BYTES = 1 << 20
"""Constants larger than this become resource variables outside the graph (see the module docstring)."""

_SCOPE_BAD = re.compile(r"[^A-Za-z0-9_.\-]")


@dataclasses.dataclass
class LoweredGraph:
    """A module lowered to TensorFlow.

    Attributes:
        function: call it with one tensor (or array) per graph input, in order; returns the
            outputs. A ``tf.function`` for ONNX modules, a pruned ``wrap_function`` for TF ones.
        input_names: IR value names of the inputs (``Placeholder`` results for TF modules).
        output_names: IR value names of the outputs.
        feeds: TF tensor names, in :meth:`graph_def`, to feed with the inputs.
        fetches: TF tensor names, in :meth:`graph_def`, of the outputs.
        node_ops: IR node name -> names of the TF ops lowered from it.
        node_devices: IR node name -> its TF device string (``""`` for an unplaced node).
        const_devices: TF op name of each constant -> its TF device string.
        value_tensors: IR value name of every node result -> its TF tensor name in :meth:`graph_def`
            (to fetch intermediate values, e.g. to compare them one by one with a reference).
        enforce_order: whether control dependencies follow each device's order.
        weights: TF op name of each large weight's captured handle (in ``graph_def(embed_weights=False)``)
            -> the :class:`Weight` holding it (variable, device, ``ReadVariableOp`` name).
        kernels: ``_XlaScope`` -> the :class:`~graphir.backends.tf.xla.KernelSet` of each fused kernel
            (nodes of one ``kernel`` name on one device), whose ops :meth:`graph_def` marks as one XLA
            cluster; empty when no node has ``kernel`` (the GraphDef is then unchanged). The marks
            are on the GraphDef only (what sessions, ``--run-tf``, the rig and the checks run):
            :attr:`function`, and a SavedModel made from it, run the sets unfused.
    """

    function: Callable[..., Any]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    feeds: tuple[str, ...]
    fetches: tuple[str, ...]
    node_ops: dict[str, tuple[str, ...]]
    node_devices: dict[str, str]
    const_devices: dict[str, str]
    value_tensors: dict[str, str]
    enforce_order: bool
    _graph_def: Callable[[], Any] = dataclasses.field(repr=False)
    weights: dict[str, Weight] = dataclasses.field(default_factory=dict)
    kernels: dict[str, KernelSet] = dataclasses.field(default_factory=dict)

    def graph_def(self, embed_weights: bool = True) -> Any:
        """A fresh ``tf.compat.v1.GraphDef`` of the lowered graph (devices set on every node).

        With ``embed_weights`` the large weights are ``Const`` ops (named like their reads, on their
        devices); without, their handles are ``VarHandleOp`` ops to fill with :meth:`initialize_weights`.
        """
        graph_def = self._graph_def()
        if not self.weights:
            return graph_def
        from tensorflow.python.framework import tensor_util

        reads = {weight.read_op: weight for weight in self.weights.values()}
        nodes = list(graph_def.node)
        del graph_def.node[:]
        for node in nodes:
            weight = self.weights.get(node.name)
            if weight is not None:
                if embed_weights:
                    continue  # the handle placeholder: its read becomes the constant
                handle = graph_def.node.add(name=node.name, op="VarHandleOp", device=weight.device)
                handle.attr["dtype"].type = weight.variable.dtype.as_datatype_enum
                handle.attr["shape"].shape.CopyFrom(weight.variable.shape.as_proto())
                handle.attr["shared_name"].s = node.name.encode()
                handle.attr["container"].s = b""
                continue
            weight = reads.get(node.name) if embed_weights else None
            if weight is None:
                graph_def.node.add().CopyFrom(node)
                continue
            const = graph_def.node.add(name=node.name, op="Const", device=node.device)
            const.input.extend(i for i in node.input if i.startswith("^"))
            const.attr["dtype"].type = weight.variable.dtype.as_datatype_enum
            const.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(_weight_array(weight)))
        return graph_def

    def initialize_weights(self, session: Any) -> None:
        """Fill the weights' ``VarHandleOp`` variables of ``graph_def(embed_weights=False)``, imported with ``name=""``.

        Adds one placeholder and ``AssignVariableOp`` per weight (on its device) to the session's
        graph and runs them one weight at a time, so at most one extra weight copy is alive.
        """
        if not self.weights:
            return
        import tensorflow as tf

        graph = session.graph
        assigns = []
        with graph.as_default():
            for name, weight in self.weights.items():
                with _device_scope(tf, weight.device), tf.name_scope("graphir_init_weights"):
                    value = tf.compat.v1.placeholder(weight.variable.dtype, weight.variable.shape)
                    assign = tf.raw_ops.AssignVariableOp(resource=graph.get_tensor_by_name(name + ":0"), value=value)
                assigns.append((assign, value, weight))
        for assign, value, weight in assigns:
            session.run(assign, {value: _weight_array(weight)})

    def __call__(self, *inputs: Any) -> list[np.ndarray]:
        """Run the function on ``inputs`` (numpy arrays or tensors); the outputs as numpy arrays."""
        if len(inputs) != len(self.input_names):
            raise BackendError(f"the lowered graph takes {len(self.input_names)} inputs, got {len(inputs)}")
        import tensorflow as tf

        results = self.function(*(tf.convert_to_tensor(x) for x in inputs))
        if not isinstance(results, (list, tuple)):
            results = [results]
        return [np.asarray(r) for r in results]


@dataclasses.dataclass(frozen=True)
class Weight:
    """A large constant held as a resource variable outside the graph.

    Attributes:
        value: IR value name of the constant.
        variable: the non-trainable ``tf.Variable`` (created on ``device``).
        device: its TF device string (``""``: TensorFlow's choice).
        read_op: the ``ReadVariableOp`` in the function graph that every user of the weight reads.
    """

    value: str
    variable: Any = dataclasses.field(repr=False)
    device: str
    read_op: str


def _weight_array(weight: Weight) -> np.ndarray:
    """The weight's value (read eagerly, even inside a ``Graph``/``Session`` context)."""
    from tensorflow.python.eager import context

    with context.eager_mode():
        return weight.variable.numpy()


# --------------------------------------------------------------------------------- analysis (no TF)


def module_opset(module: Module) -> int:
    """The default-domain opset from the metadata ``opset = "ai.onnx:9,..."`` (13 when absent)."""
    text = module.metadata.get("opset")
    if isinstance(text, str):
        for entry in text.split(","):
            domain, _, version = entry.partition(":")
            if domain in ("ai.onnx", "") and version.isdigit():
                return int(version)
    return DEFAULT_OPSET


def _is_tf_module(module: Module) -> bool:
    return any(node.op.startswith("tf.") for node in module.graph.nodes)


def check_supported(module: Module) -> None:
    """Raise a :class:`BackendError` for the first node (in topological order) that cannot be lowered.

    TF-imported modules accept ``tf.*`` nodes and split/concat; ONNX-imported ones the ops of
    that have a lowering in :mod:`graphir.ops`. Does not load TensorFlow.
    """
    tf_module = _is_tf_module(module)
    for node in module.graph.index().nodes:
        if tf_module:
            if node.op.startswith("tf.") or node.op in ("graphir.split", "graphir.concat"):
                continue
            message = f"'{node.op}' op cannot be lowered: the module is TensorFlow-imported and has no lowering for it"
            raise BackendError(message, Location(node=node.name))
        if lowering_of(node.op) is None:
            raise BackendError(
                f"'{node.op}' op has no TensorFlow lowering (not in the ONNX->TF op table)", Location(node=node.name)
            )


def node_devices(module: Module) -> dict[Node, str]:
    """Each placed node -> the TF device string of its ``device`` annotation."""
    cluster = None
    result: dict[Node, str] = {}
    for node in module.graph.nodes:
        if node.device is None:
            continue
        if cluster is None:
            cluster = module.cluster
        try:
            result[node] = cluster.device(node.device).tf_device
        except KeyError:
            raise BackendError(
                f"is placed on '{node.device}', which cluster '{cluster.spec}' does not have", Location(node=node.name)
            ) from None
    return result


def lowering_sequence(module: Module, enforce_order: bool) -> tuple[list[Node], dict[Node, Node]]:
    """A topological order of the nodes, and with ``enforce_order`` each node's device-order predecessor.

    The order respects data and control edges and, with ``enforce_order``, the per-device
    ``order`` chains; ties follow the graph's stable topological numbering, so it is deterministic.

    Raises:
        BackendError: ``enforce_order`` on a module without placement, a placed node without
            ``order``, or orders that contradict the data dependencies (a cycle).
    """
    index = module.graph.index()
    position = {node: k for k, node in enumerate(index.nodes)}
    order_prev: dict[Node, Node] = {}
    if enforce_order:
        by_device: dict[str, list[Node]] = defaultdict(list)
        for node in index.nodes:
            if node.device is None:
                continue
            if node.order is None:
                raise BackendError(
                    "enforce-order needs an 'order' annotation on every placed node (run place or schedule)",
                    Location(node=node.name),
                )
            by_device[node.device].append(node)
        if not by_device:
            raise BackendError("enforce-order needs a placed module (run place first)")
        for nodes in by_device.values():
            nodes.sort(key=lambda n: (n.order, position[n]))
            for before, after in zip(nodes, nodes[1:], strict=False):
                order_prev[after] = before
    indegree: dict[Node, int] = {}
    successors: dict[Node, list[Node]] = defaultdict(list)
    for node in index.nodes:
        preds = set(node.predecessors) | set(node.control_inputs)
        if node in order_prev:
            preds.add(order_prev[node])
        indegree[node] = len(preds)
        for pred in preds:
            successors[pred].append(node)
    ready = [(position[n], n.name) for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    by_position = index.nodes
    sequence: list[Node] = []
    while ready:
        _, name = heapq.heappop(ready)
        node = module.graph.node(name)
        sequence.append(node)
        for succ in successors[node]:
            indegree[succ] -= 1
            if indegree[succ] == 0:
                heapq.heappush(ready, (position[succ], succ.name))
    if len(sequence) != len(by_position):
        stuck = next(n for n in by_position if indegree[n] > 0)
        raise BackendError(
            "the device orders contradict the data dependencies (a cycle); cannot enforce them",
            Location(node=stuck.name),
        )
    return sequence, order_prev


def _constant_devices(module: Module, devices: Mapping[Node, str]) -> dict[Value, str]:
    """Each used or returned constant -> the device of its first user in topological order (``""``: unplaced)."""
    position = {node: k for k, node in enumerate(module.graph.index().nodes)}
    outputs = set(module.graph.outputs)
    result: dict[Value, str] = {}
    for value in module.graph.constants:
        users = [node for node, _ in value.uses]
        if users:
            result[value] = devices.get(min(users, key=position.__getitem__), "")
        elif value in outputs:  # a constant returned as it is: made where TensorFlow chooses
            result[value] = ""
    return result


# --------------------------------------------------------------------------------- entry point


def enforces_order(module: Module) -> bool:
    """Whether ``module`` runs with its per-device orders enforced by control dependencies.

    True when it is placed, every placed node has an ``order`` and the placement recorded the
    ``enforced`` execution order (:func:`graphir.simulator.recorded_order`): the lowering then adds
    exactly the dependencies the simulator's default (the recorded order) assumes.
    """
    placed = [node for node in module.graph.nodes if node.device is not None]
    ordered = bool(placed) and all(node.order is not None for node in placed)
    return ordered and recorded_order(module) == "enforced"


def lower(
    module: Module, enforce_order: bool | None = None, large_weight_bytes: int | None = LARGE_WEIGHT_BYTES
) -> LoweredGraph:
    """Lower ``module`` to TensorFlow with every node on its assigned device.

    Args:
        module: an ONNX- or TF-imported module, usually placed (``device`` annotations); unplaced
            nodes get no device (TensorFlow chooses).
        enforce_order: add control dependencies along each device's ``order`` annotation (None:
            when the placement runs under the ``enforced`` order, :func:`enforces_order`).
        large_weight_bytes: ONNX constants larger than this become resource variables outside the
            graph (``None``: every constant is a graph ``Const``). TF-imported modules keep theirs.

    Nodes with a ``kernel`` annotation are marked: every TF op lowered from the nodes of one kernel
    name on one device carries ``_XlaCompile``/``_XlaScope``/``_XlaSeparateCompiledGradients`` in
    :meth:`LoweredGraph.graph_def`, so TensorFlow compiles each such set as one XLA cluster
    (:mod:`graphir.backends.tf.xla`; :attr:`LoweredGraph.kernels` lists them). Automatic: no flag.
    A module without ``kernel`` annotations lowers exactly as before.

    Returns:
        The :class:`LoweredGraph` (callable, GraphDef builder, node -> op and device maps).

    Raises:
        BackendError: an op outside the op table (naming the op type and node), a device the
            cluster lacks, missing orders, a node TensorFlow cannot build, or a fused kernel that is
            unplaced or not convex in the lowered graph (naming the kernel and a node on the path).
    """
    check_supported(module)
    if enforce_order is None:
        enforce_order = enforces_order(module)
    devices = node_devices(module)
    sequence, order_prev = lowering_sequence(module, enforce_order)
    from graphir.importers.tf import load_tensorflow

    tf = load_tensorflow("lowering to TensorFlow")
    if _is_tf_module(module):
        lowered = _lower_tf(module, tf, sequence, order_prev, devices, enforce_order)
    else:
        lowered = _lower_onnx(module, tf, sequence, order_prev, devices, enforce_order, large_weight_bytes)
    return _mark_kernels(module, lowered, sequence, devices)


def _mark_kernels(
    module: Module, lowered: LoweredGraph, sequence: Sequence[Node], devices: Mapping[Node, str]
) -> LoweredGraph:
    """``lowered`` with its fused kernels marked as XLA clusters (:mod:`graphir.backends.tf.xla`); as is without.

    Each set's convexity is checked on the unmarked GraphDef (the order's control edges included)
    before anything is marked.
    """
    sets = kernel_sets(module, sequence, lowered.node_ops, devices)
    if not sets:
        return lowered
    build = lowered._graph_def
    unmarked = build()
    sets = absorb_constants(unmarked, sets, lowered.node_ops)
    check_convex(unmarked, sets, lowered.node_ops, lowered.enforce_order)
    lowered.kernels = {kernel.scope: kernel for kernel in sets}
    lowered._graph_def = lambda: mark_kernels(build(), sets)
    return lowered


def _scope_name(name: str) -> str:
    """A valid TensorFlow name scope for an IR name (``/`` and other characters become ``_``)."""
    text = _SCOPE_BAD.sub("_", name)
    if not text or not (text[0].isalnum() or text[0] == "."):
        text = "n" + text
    return text


def _device_scope(tf: Any, device: str) -> contextlib.AbstractContextManager[Any]:
    return tf.device(device) if device else contextlib.nullcontext()


def _lower_onnx(
    module: Module,
    tf: Any,
    sequence: Sequence[Node],
    order_prev: Mapping[Node, Node],
    devices: Mapping[Node, str],
    enforce_order: bool,
    large_weight_bytes: int | None = LARGE_WEIGHT_BYTES,
) -> LoweredGraph:
    graph = module.graph
    opset = module_opset(module)
    const_device = _constant_devices(module, devices)
    specs = []
    taken: set[str] = set()
    for value in graph.inputs:
        try:
            dtype = tf_dtype(tf, value.type)
        except KeyError:
            raise BackendError(
                f"graph input '%{value.name}' has type {value.type}, which TensorFlow cannot feed"
            ) from None
        shape = None if value.type.shape is None else [d if isinstance(d, int) else None for d in value.type.shape]
        name = _scope_name(value.name)
        while name in taken:
            name += "_"
        taken.add(name)
        specs.append(tf.TensorSpec(shape, dtype, name=name))
    scopes: dict[str, str] = {}  # TF name scope -> IR node name
    const_ops: dict[str, str] = {}
    value_tensors: dict[str, str] = {}

    # Large weights: one variable each, created (eagerly, once) on the constant's device.
    local = _local_devices(tf)
    variables: dict[Value, Any] = {}
    laid_out: dict[Value, tuple[int, ...]] = {}
    outputs_set = set(graph.outputs)
    for value, device in const_device.items():
        if large_weight_bytes is None or value.nbytes <= large_weight_bytes or not local(device):
            continue
        array = _constant_array(value)
        perm = None if value in outputs_set else _stored_layout(value)
        if perm is not None:
            array = np.ascontiguousarray(np.transpose(array, perm))
            laid_out[value] = perm
        with _device_scope(tf, device), tf.init_scope():
            variables[value] = tf.Variable(array, trainable=False, name=_scope_name(value.name))
        del array
    read_ops: dict[Value, str] = {}

    def build(*args: Any) -> list[Any]:
        env: dict[Value, Any] = dict(zip(graph.inputs, args, strict=True))
        for value, device in const_device.items():
            variable = variables.get(value)
            with _device_scope(tf, device):
                if variable is not None:
                    tensor = tf.raw_ops.ReadVariableOp(
                        resource=variable.handle, dtype=variable.dtype, name=_scope_name(value.name)
                    )
                    read_ops[value] = tensor.op.name
                else:
                    tensor = tf.constant(_constant_array(value), name=_scope_name(value.name))
            env[value] = tensor
        for node in sequence:
            operands = [None if v is None else env[v] for v in onnx_inputs(node)]
            deps = [env[v] for c in node.control_inputs for v in c.outputs[:1]]
            prev = order_prev.get(node)
            if prev is not None:
                deps.extend(env[v] for v in prev.outputs)
            with (
                _device_scope(tf, devices.get(node, "")),
                tf.name_scope(_scope_name(node.name)) as scope,
                tf.control_dependencies(deps),
            ):
                scopes[scope] = node.name
                try:
                    convert = lowering_of(node.op)
                    assert convert is not None  # check_supported ran first
                    arrived = {k: laid_out[v] for k, v in enumerate(onnx_inputs(node)) if v in laid_out}
                    results = convert(OpContext(tf, node, opset, operands, arrived), operands)
                except BackendError:
                    raise
                except Exception as exc:  # TensorFlow rejects a shape or dtype: name the node
                    text = " ".join(str(exc).split())[:300]
                    raise BackendError(
                        f"'{node.op}' could not be lowered ({type(exc).__name__}: {text})", Location(node=node.name)
                    ) from None
                if len(results) != len(node.outputs):
                    raise BackendError(
                        f"'{node.op}' lowering gave {len(results)} results for {len(node.outputs)}",
                        Location(node=node.name),
                    )
                results = [tf.identity(r) if r.op.name.split("/")[0] + "/" != scope else r for r in results]
            env.update(zip(node.outputs, results, strict=True))
            value_tensors.update((v.name, r.name) for v, r in zip(node.outputs, results, strict=True))
        outputs = [env[v] if v.kind is ValueKind.RESULT else tf.identity(env[v]) for v in graph.outputs]
        # A constant read only as static data (Pad's pads, Slice's starts) has no consumer: the
        # runtime prunes it, so it is not recorded as a placed op.
        for value, device in const_device.items():
            if env[value].consumers():
                const_ops[env[value].op.name] = device
        return outputs

    function = tf.function(build, input_signature=specs, autograph=False)
    concrete = function.get_concrete_function()
    node_ops: dict[str, list[str]] = defaultdict(list)
    for op in concrete.graph.get_operations():
        owner = scopes.get(op.name.split("/")[0] + "/")
        if owner is not None:
            node_ops[owner].append(op.name)
    handles = {
        id(external): internal
        for external, internal in zip(concrete.captured_inputs, concrete.graph.internal_captures, strict=True)
    }
    weights = {
        handles[id(variable.handle)].op.name: Weight(value.name, variable, const_device[value], read_ops[value])
        for value, variable in variables.items()
    }
    captured = {t.name for t in concrete.graph.internal_captures}
    feeds = tuple(t.name for t in concrete.inputs if t.name not in captured)
    fetches = tuple(t.name for t in concrete.outputs)
    return LoweredGraph(
        function=concrete,
        input_names=tuple(v.name for v in graph.inputs),
        output_names=tuple(v.name for v in graph.outputs),
        feeds=feeds,
        fetches=fetches,
        node_ops={name: tuple(ops) for name, ops in node_ops.items()},
        node_devices={node.name: devices.get(node, "") for node in sequence},
        const_devices=dict(const_ops),
        value_tensors=dict(value_tensors),
        enforce_order=enforce_order,
        _graph_def=lambda: concrete.graph.as_graph_def(),
        weights=weights,
    )


def _stored_layout(value: Value) -> tuple[int, ...] | None:
    """The permutation to store large weight ``value`` in: the one every reader's lowering applies.

    Every use must be at an input whose op declares a ``weight_layout`` (``Conv``'s filters), all with
    the same permutation; otherwise (another op reads ONNX's layout) ``None``, and the weight is
    stored as ONNX lays it out.
    """
    perms = set()
    for user in value.users:
        layout_of = weight_layout_of(user.op)
        layout = layout_of(user) if layout_of is not None else {}
        for position, operand in enumerate(onnx_inputs(user)):
            if operand is value:
                perms.add(layout.get(position))
    if len(perms) != 1:
        return None
    (perm,) = perms
    return perm


def _constant_array(value: Value) -> np.ndarray:
    """The data of constant ``value`` from its (lazy) loader; a BackendError when it has none."""
    data = value.const
    try:
        array = None if data is None else np.asarray(data.numpy())
    except ValueError:
        array = None
    except (KeyError, TypeError):  # a type numpy cannot hold (u4, i4...)
        raise BackendError(f"constant '%{value.name}' ({value.type}) has a type TensorFlow cannot be fed") from None
    if array is None:
        raise BackendError(f"constant '%{value.name}' has no data (it was printed as 'external')")
    return array


def _local_devices(tf: Any) -> Callable[[str], bool]:
    """A predicate: whether this process's eager runtime has the device (remote tasks: no)."""
    names = [d.name for d in tf.config.list_logical_devices()]
    cache: dict[str, bool] = {}

    def local(device: str) -> bool:
        if not device:
            return True
        if device not in cache:
            from tensorflow.python.framework import device_spec

            want = device_spec.DeviceSpecV2.from_string(device)
            found = False
            for name in names:
                got = device_spec.DeviceSpecV2.from_string(name)
                fields = ("job", "replica", "task", "device_type", "device_index")
                if all(getattr(want, f) is None or getattr(want, f) == getattr(got, f) for f in fields):
                    found = True
                    break
            cache[device] = found
        return cache[device]

    return local


def _lower_tf(
    module: Module,
    tf: Any,
    sequence: Sequence[Node],
    order_prev: Mapping[Node, Node],
    devices: Mapping[Node, str],
    enforce_order: bool,
) -> LoweredGraph:
    from graphir.backends.tf.tf_graphdef import build_graphdef

    const_device = _constant_devices(module, devices)
    rebuilt = build_graphdef(module, sequence, order_prev, devices, const_device, tf)

    def import_all() -> None:
        tf.graph_util.import_graph_def(rebuilt.graph_def, name="")

    try:
        wrapped = tf.compat.v1.wrap_function(import_all, [])
        graph = wrapped.graph
        function = wrapped.prune(
            feeds=[graph.get_tensor_by_name(name) for name in rebuilt.feeds],
            fetches=[graph.get_tensor_by_name(name) for name in rebuilt.fetches],
        )
    except Exception as exc:  # import_graph_def names the offending node in its message
        text = " ".join(str(exc).split())[:300]
        raise BackendError(f"TensorFlow rejects the rebuilt graph ({type(exc).__name__}: {text})") from None
    graph_def = rebuilt.graph_def
    return LoweredGraph(
        function=function,
        input_names=tuple(rebuilt.feed_values),
        output_names=tuple(v.name for v in module.graph.outputs),
        feeds=tuple(rebuilt.feeds),
        fetches=tuple(rebuilt.fetches),
        node_ops=rebuilt.node_ops,
        node_devices={node.name: devices.get(node, "") for node in sequence},
        const_devices=rebuilt.const_devices,
        value_tensors=rebuilt.value_tensors,
        enforce_order=enforce_order,
        _graph_def=lambda: _copy_graph_def(graph_def),
    )


def _copy_graph_def(graph_def: Any) -> Any:
    copy = type(graph_def)()
    copy.CopyFrom(graph_def)
    return copy
