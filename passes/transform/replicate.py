"""Data-parallel replication of a training graph: FastT's input graph, as TF's in-graph replication builds it.

FastT (§5.2) starts OS-DPOS from "a data parallel graph based on the model DAG, where the model is
replicated as many times as the number of devices"; its baseline is TensorFlow's data parallelism
(TF-slim: one clone per GPU on a slice of the global batch, the clones' gradients summed into one
update). :func:`data_parallel` builds that graph from a training-step graph:

1. **Replica types.** ``n`` replicas each process ``G / n`` samples of the global batch ``G``. The
   per-replica types (and the values of constants that encode the batch: ``Reshape`` targets,
   ``Tile`` multiples, the loss's mean divisor) come from the same model **at batch** ``G / n``
   (:func:`module_at_batch`), which graphir re-batches in the IR
   (:func:`graphir.passes.transform.rebatch.rebatch`: a symbolic batch dimension propagated
   through the ops' batch rules), so a GraphDef whose batch Keras and TF's gradient code baked into
   constants re-batches without TensorFlow. The replica model must have the same node names and
   ops as the module.
2. **What is replicated.** The *batch sources* are the placeholders (and graph inputs) whose leading
   dimension is the module's batch, plus any node without data inputs whose type changes with the
   batch. ``F`` = everything reachable from them by data edges. A node of ``F`` that takes or makes
   a resource handle writes a variable (``ResourceApplyAdam``, ``AssignVariableOp``...): it is an
   *update*; updates and everything after them (data or control) are shared. The replicated set
   ``R`` is ``F`` minus those, plus every node outside ``F`` that touches no resource and all of
   whose users (data and control) are in ``R`` (constants, the loss divisor, the gradient seed:
   each replica builds its own, as TF-slim's clones do). Everything else is shared: variable
   handles and their reads (``ReadVariableOp`` runs where the variable lives; all replicas read the
   same pre-update value, so one read is broadcast), the optimizer's update ops and their scalar
   arithmetic, the step's sink nodes.
3. **Aggregation.** Every value produced in ``R`` and used outside it (a gradient feeding its
   ``ResourceApplyAdam``, a moving-statistics update, the loss output) becomes the mean over the
   replicas: ``tf.AddN`` of the ``n`` copies (the sum TF's in-graph replication computes), then
   ``tf.Mul`` by the constant ``1/n`` so the update equals the single-device step on the global
   batch (each replica's loss is the mean over its own ``G/n`` samples; TF-slim folds the same
   ``1/n`` into each clone's loss). A value whose type carries the batch is concatenated instead
   (``graphir.concat`` along the batch axis). One aggregation per value, shared by its users.
4. **Names and annotations.** Replica ``i``'s copy of node ``x`` is ``replica<i>/x`` (values
   likewise); shared nodes keep their names. Replicated copies keep their annotations except the
   placement (``device``, ``order``, ``start``, ``finish``, dropped everywhere) and ``colocate``,
   renamed per replica (``replica<i>/<class>``). A graph with fusion groups is refused (replicate
   first, then fuse).
5. **Costs and memory.** When the module is profiled, a replicated node's ``cost`` on each device
   kind is its original cost scaled by the ratio of the analytical roofline times
   (:mod:`graphir.passes.profile.roofline`) at the replica's shapes and at the original's, so measured costs stay
   consistent and analytical ones equal the replica's own roofline time; aggregation nodes get
   their roofline time. ``mem`` is recomputed analytically for the whole new graph (what
   ``profile`` writes: activation = result bytes, persistent = variables and constants).

The baseline placement of this graph ("data parallel", TF-slim's deployment) is
:func:`graphir.passes.transform.data_parallel.data_parallel_devices`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphir.annotations import Cost
from graphir.attributes import DenseTensor, numpy_dtype
from graphir.errors import PassError
from graphir.ir import Graph, Module, Node, Value
from graphir.passes.profile.roofline import kind_times
from graphir.passes.transform.rebatch import recompute_mem, scaled_costs
from graphir.types import DType, TensorType

__all__ = [
    "DataParallelGraph",
    "AGGREGATION_PREFIX",
    "REPLICAS_METADATA",
    "data_parallel",
    "module_at_batch",
    "replica_name",
    "touches_resource",
    "replica_of",
]

REPLICAS_METADATA = "data_parallel_replicas"
"""Module metadata key holding the number of replicas of a data-parallel graph."""

_PLACEMENT_KEYS = ("device", "order", "start", "finish")

AGGREGATION_PREFIX = "dp/"
"""Name prefix of the aggregation nodes :func:`data_parallel` adds (``dp/sum/...``, ``dp/mean/...``)."""


def replica_name(name: str, replica: int) -> str:
    """The name of replica ``replica``'s copy of node or value ``name``."""
    return f"replica{replica}/{name}"


def replica_of(name: str) -> int:
    """The replica a node name belongs to (``replica3/x`` -> 3), or -1 for a shared node."""
    if not name.startswith("replica"):
        return -1
    head, sep, _ = name.partition("/")
    digits = head[len("replica") :]
    return int(digits) if sep and digits.isdigit() else -1


@dataclasses.dataclass
class DataParallelGraph:
    """The result of :func:`data_parallel`.

    Attributes:
        module: the new module (a new graph; the input module is not changed).
        replicas: number of replicas.
        global_batch: samples per step over all replicas.
        replica_batch: samples per step of one replica.
        replicated: original names of the replicated nodes, topological.
        shared: names of the shared original nodes, topological.
        sources: original names of the batch sources (placeholders...).
        aggregated: original names of the values aggregated over the replicas.
        aggregation_nodes: names of the new aggregation nodes (sums, scalings, concats).
    """

    module: Module
    replicas: int
    global_batch: int
    replica_batch: int
    replicated: list[str]
    shared: list[str]
    sources: list[str]
    aggregated: list[str]
    aggregation_nodes: list[str]


# --------------------------------------------------------------------------- the model at another batch


def module_at_batch(module: Module, batch: int) -> Module:
    """The model of ``module`` at ``batch`` samples per step, with the same node names.

    ``module`` itself when its batch already is ``batch``; otherwise graphir re-batches it in the IR
    (:func:`graphir.passes.transform.rebatch.rebatch`: the batch dimension propagated symbolically,
    result types and every batch-carrying constant rewritten). TensorFlow is not involved: a frozen
    GraphDef with its batch baked into ``Reshape`` targets and the loss divisor re-batches too.

    Raises:
        PassError: the module has no batch input, or a node where the batch cannot be proven.
    """
    from graphir.passes.transform.batching import module_batch
    from graphir.passes.transform.rebatch import rebatch

    if module_batch(module) == batch:
        return module
    return rebatch(module, batch)


# --------------------------------------------------------------------------- classification


def touches_resource(node: Node) -> bool:
    """Whether ``node`` takes or makes a resource handle (a variable, an optimizer slot)."""
    return any(v.type.dtype is DType.RESOURCE for v in (*node.inputs, *node.outputs))


def _leading(value_type: TensorType) -> int | None:
    shape = value_type.shape
    if shape and isinstance(shape[0], int):
        return shape[0]
    return None


def _replica_node(replica: Module, node: Node) -> Node:
    other = replica.graph.get_node(node.name)
    if other is None or other.op != node.op or len(other.outputs) != len(node.outputs):
        what = "has no node" if other is None else f"has a different node ({other.op}, {len(other.outputs)} results)"
        raise PassError(f"the model at the replica batch {what} '{node.name}' ({node.op}): it is not the same model")
    return other


def _classify(
    module: Module, replica: Module, batch: int
) -> tuple[list[Node], set[Node], set[Node], set[Value], set[Value]]:
    """(topological nodes, replicated nodes, sources, replicated graph inputs, replicated constants)."""
    graph = module.graph
    nodes = graph.index().nodes
    rgraph = replica.graph
    inputs: set[Value] = set()
    for value in graph.inputs:
        other = rgraph.get_value(value.name)
        if other is None:
            raise PassError(f"the model at the replica batch has no input '%{value.name}'")
        if _leading(value.type) == batch or other.type != value.type:
            inputs.add(value)
    constants: set[Value] = set()
    for value in graph.constants:
        other = rgraph.get_value(value.name)
        if other is not None and other.type != value.type:
            constants.add(value)
    sources: set[Node] = set()
    for node in nodes:
        if node.inputs or touches_resource(node):
            continue
        other = _replica_node(replica, node)
        placeholder = node.op == "tf.Placeholder" and bool(node.outputs) and _leading(node.outputs[0].type) == batch
        if placeholder or any(a.type != b.type for a, b in zip(node.outputs, other.outputs, strict=True)):
            sources.add(node)
    if not sources and not inputs:
        raise PassError(f"no input of '{module.name}' has the batch dimension {batch}: nothing to replicate")
    forward: set[Node] = set()
    for node in nodes:  # topological: producers first
        if node in sources or any(
            v in inputs or v in constants or (v.producer is not None and v.producer in forward) for v in node.inputs
        ):
            forward.add(node)
    after_update: set[Node] = set()
    for node in nodes:
        if (node in forward and touches_resource(node)) or any(
            p in after_update for p in (*node.predecessors, *node.control_inputs)
        ):
            after_update.add(node)
    replicated = forward - after_update
    outputs = set(graph.outputs)
    for node in reversed(nodes):  # users first
        if node in replicated or node in after_update or touches_resource(node):
            continue
        users = [*node.successors, *node.control_users]
        if users and all(u in replicated for u in users) and not any(v in outputs for v in node.outputs):
            replicated.add(node)
    return nodes, replicated, sources, inputs, constants


# --------------------------------------------------------------------------- costs


# --------------------------------------------------------------------------- the rewrite


def data_parallel(module: Module, replicas: int, *, batch: int = 0, replica: Module | None = None) -> DataParallelGraph:
    """Build the data-parallel graph of a training-step module (see the module docstring).

    Args:
        module: a training-step graph (placeholders with a leading batch dimension, variables).
        replicas: number of replicas ``n`` (>= 1; 1 re-batches the model to ``batch``).
        batch: global batch ``G`` (0: the module's own batch); must be a multiple of ``replicas``.
        replica: the model at batch ``G / n`` with the same node names (default: :func:`module_at_batch`).

    Returns:
        The new module and what was replicated, shared and aggregated.

    Raises:
        PassError: bad arguments, fusion groups, a replica model that does not match, or a shared
            node whose type would change with the batch.
    """
    from graphir.passes.transform.batching import module_batch

    if replicas < 1:
        raise PassError(f"replicas must be >= 1, got {replicas}")
    if batch < 0:
        raise PassError(f"batch must be >= 0 (0: the module's own), got {batch}")
    graph = module.graph
    grouped = next((n for n in graph.nodes if n.group is not None), None)
    if grouped is not None:
        raise PassError(f"node '{grouped.name}' is in a fusion group: replicate before fusing")
    own_batch = module_batch(module)
    global_batch = batch or own_batch
    if global_batch % replicas:
        raise PassError(f"the global batch {global_batch} is not a multiple of {replicas} replicas")
    replica_batch = global_batch // replicas
    if replica is None:
        replica = module_at_batch(module, replica_batch)
    nodes, replicated, sources, rep_inputs, rep_constants = _classify(module, replica, own_batch)
    shared_nodes = [n for n in nodes if n not in replicated]
    replicated_nodes = [n for n in nodes if n in replicated]
    rgraph = replica.graph
    for node in shared_nodes:
        other = _replica_node(replica, node)
        for a, b in zip(node.outputs, other.outputs, strict=True):
            if a.type != b.type:
                raise PassError(
                    f"shared node '{node.name}' ({node.op}) changes type with the batch ({a.type} -> {b.type}): "
                    "it depends on the batch but is not replicated"
                )

    new = Graph(graph.name)
    shared_map: dict[Value, Value] = {}
    rep_maps: list[dict[Value, Value]] = [{} for _ in range(replicas)]
    for value in graph.inputs:
        if value in rep_inputs:
            rtype = rgraph.value(value.name).type
            for i in range(replicas):
                rep_maps[i][value] = new.add_input(replica_name(value.name, i), rtype)
        else:
            shared_map[value] = new.add_input(value.name, value.type)
    for value in graph.constants:
        if value in rep_constants:
            other = rgraph.value(value.name)
            data = other.const
            if data is None and other.producer is not None and other.producer.op == "tf.Const":
                data = other.producer.params.get("value")  # the importer keeps small constants as Const nodes
            for i in range(replicas):
                rep_maps[i][value] = new.add_constant(replica_name(value.name, i), other.type, data)
        else:
            shared_map[value] = new.add_constant(value.name, value.type, value.const)

    def copy_annotations(source: Node, target: Node, rep: int) -> None:
        for key, value in source.annotations.items():
            if key in _PLACEMENT_KEYS:
                continue
            if key == "colocate" and rep >= 0:
                value = replica_name(str(value), rep)
            target.set_annotation(key, value)

    shared_copy: dict[Node, Node] = {}
    for node in shared_nodes:
        copy = new.add_node(
            node.op, [], [v.type for v in node.outputs], name=node.name, output_names=[v.name for v in node.outputs]
        )
        copy.params = dict(node.params)
        copy.loc = node.loc
        copy_annotations(node, copy, -1)
        shared_copy[node] = copy
        for a, b in zip(node.outputs, copy.outputs, strict=True):
            shared_map[a] = b
    rep_nodes = [_replica_node(replica, n) for n in replicated_nodes]
    rep_copies: list[dict[Node, Node]] = [{} for _ in range(replicas)]
    for i in range(replicas):
        for node, other in zip(replicated_nodes, rep_nodes, strict=True):
            copy = new.add_node(
                node.op,
                [],
                [v.type for v in other.outputs],
                name=replica_name(node.name, i),
                output_names=[replica_name(v.name, i) for v in node.outputs],
            )
            copy.params = dict(other.params)  # the replica's params: batch-dependent constants rescaled
            copy.loc = node.loc
            copy_annotations(node, copy, i)
            rep_copies[i][node] = copy
            for a, b in zip(node.outputs, copy.outputs, strict=True):
                rep_maps[i][a] = b

    aggregated: dict[Value, Value] = {}
    aggregation_nodes: list[Node] = []
    inverse: dict[DType, Value] = {}

    def aggregate(value: Value) -> Value:
        done = aggregated.get(value)
        if done is not None:
            return done
        copies = [rep_maps[i][value] for i in range(replicas)]
        if replicas == 1:
            aggregated[value] = copies[0]
            return copies[0]
        out_type = copies[0].type
        if out_type != value.type and out_type.shape is not None and value.type.shape is not None:
            axis = next(k for k, (a, b) in enumerate(zip(out_type.shape, value.type.shape, strict=False)) if a != b)
            whole = TensorType(
                value.type.dtype, tuple(d * replicas if k == axis else d for k, d in enumerate(out_type.shape))
            )  # type: ignore[operator]
            concat = new.add_node(
                "graphir.concat",
                copies,
                [whole],
                name=f"{AGGREGATION_PREFIX}concat/{value.name}",
                params={"axis": axis},
            )
            aggregation_nodes.append(concat)
            aggregated[value] = concat.outputs[0]
            return concat.outputs[0]
        dtype = out_type.dtype
        summed = new.add_node(
            "tf.AddN",
            copies,
            [out_type],
            name=f"{AGGREGATION_PREFIX}sum/{value.name}",
            params={"N": replicas, "T": dtype.short},
        )
        scale = inverse.get(dtype)
        if scale is None:
            data = np.asarray(1.0 / replicas, dtype=numpy_dtype(dtype))
            scale = new.add_constant(
                f"{AGGREGATION_PREFIX}inv_replicas_{dtype.short}", TensorType(dtype, ()), DenseTensor.from_numpy(data)
            )
            inverse[dtype] = scale
        mean = new.add_node(
            "tf.Mul",
            [summed.outputs[0], scale],
            [out_type],
            name=f"{AGGREGATION_PREFIX}mean/{value.name}",
            params={"T": dtype.short},
        )
        aggregation_nodes.extend((summed, mean))
        aggregated[value] = mean.outputs[0]
        return mean.outputs[0]

    for node in shared_nodes:
        copy = shared_copy[node]
        for value in node.inputs:
            copy.add_input(shared_map[value] if value in shared_map else aggregate(value))
        for control in node.control_inputs:
            if control in shared_copy:
                copy.add_control_input(shared_copy[control])
            else:
                for i in range(replicas):
                    copy.add_control_input(rep_copies[i][control])
    for i in range(replicas):
        for node in replicated_nodes:
            copy = rep_copies[i][node]
            for value in node.inputs:
                copy.add_input(rep_maps[i].get(value) or shared_map[value])
            for control in node.control_inputs:
                copy.add_control_input(shared_copy[control] if control in shared_copy else rep_copies[i][control])
    new.set_outputs(shared_map[v] if v in shared_map else aggregate(v) for v in graph.outputs)

    metadata = dict(module.metadata)
    metadata[REPLICAS_METADATA] = replicas
    result = Module(module.name, new, module.cluster_spec, metadata)
    if module.cluster_spec is not None:
        result.set_cluster(module.cluster)
    _annotate_costs(module, result, replicated_nodes, rep_nodes, rep_copies, aggregation_nodes)
    return DataParallelGraph(
        module=result,
        replicas=replicas,
        global_batch=global_batch,
        replica_batch=replica_batch,
        replicated=[n.name for n in replicated_nodes],
        shared=[n.name for n in shared_nodes],
        sources=[n.name for n in nodes if n in sources] + [v.name for v in graph.inputs if v in rep_inputs],
        aggregated=[v.name for v in aggregated if replicas > 1],
        aggregation_nodes=[n.name for n in aggregation_nodes],
    )


def _annotate_costs(
    module: Module,
    result: Module,
    originals: list[Node],
    rep_nodes: list[Node],
    rep_copies: list[dict[Node, Node]],
    aggregation_nodes: list[Node],
) -> None:
    """Scale replicated costs, cost the aggregation, recompute ``mem`` (see the module docstring)."""
    profiled = any(n.cost is not None for n in module.graph.nodes)
    if profiled:
        costs = scaled_costs(result, originals, rep_nodes)
        for copies in rep_copies:
            for node, cost in zip(originals, costs, strict=True):
                if cost is not None:
                    copies[node].cost = cost
        if aggregation_nodes:
            times = kind_times(result.cluster, aggregation_nodes)[0]
            for i, node in enumerate(aggregation_nodes):
                node.cost = Cost({kind: float(f"{float(t[i]):.12g}") for kind, t in times.items()})
    if any(n.mem is not None for n in module.graph.nodes):
        recompute_mem(result)
