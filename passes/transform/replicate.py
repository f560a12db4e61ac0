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
from graphir.clone import add_copy
from graphir.copies import (
    MICROBATCHES_METADATA,
    REPLICAS_METADATA,
    copy_name,
    copy_of,
    replica_name,
    replica_of,
)
from graphir.errors import PassError
from graphir.ir import Graph, Module, Node, Value
from graphir.passes.profile.roofline import kind_times
from graphir.passes.transform.rebatch import recompute_mem, scaled_costs
from graphir.types import DType, TensorType

__all__ = [
    "DataParallelGraph",
    "AGGREGATION_PREFIX",
    "MICROBATCHES_METADATA",
    "REPLICAS_METADATA",
    "copy_name",
    "copy_of",
    "data_parallel",
    "module_at_batch",
    "replica_name",
    "touches_resource",
    "replica_of",
]

_PLACEMENT_KEYS = ("device", "order", "start", "finish")

AGGREGATION_PREFIX = "dp/"
"""Name prefix of the aggregation nodes :func:`data_parallel` adds (``dp/sum/...``, ``dp/mean/...``)."""


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
        aggregation_nodes: names of the new aggregation nodes (splits, sums, scalings, concats).
        microbatches: micro-batches per replica.
        microbatch: samples per step of one copy (``global_batch / (replicas * microbatches)``).
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
    microbatches: int = 1
    microbatch: int = 0


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


def data_parallel(
    module: Module,
    replicas: int,
    *,
    batch: int = 0,
    replica: Module | None = None,
    microbatches: int = 1,
) -> DataParallelGraph:
    """Build the data-parallel (and micro-batched) graph of a training-step module (see the module docstring).

    Args:
        module: a training-step graph (placeholders with a leading batch dimension, variables).
        replicas: number of replicas ``D`` (>= 1; 1 re-batches the model to ``batch``).
        batch: global batch ``G`` (0: the module's own batch); must be a multiple of ``D * M``.
        replica: the model at batch ``G / (D * M)`` with the same node names (default: :func:`module_at_batch`).
        microbatches: micro-batches ``M`` per replica (>= 1): gradient accumulation.

    Returns:
        The new module and what was replicated, shared and aggregated.

    Raises:
        PassError: bad arguments, fusion groups, a replica model that does not match, or a shared
            node whose type would change with the batch.
    """
    from graphir.passes.transform.batching import module_batch

    if replicas < 1:
        raise PassError(f"replicas must be >= 1, got {replicas}")
    if microbatches < 1:
        raise PassError(f"microbatches must be >= 1, got {microbatches}")
    if batch < 0:
        raise PassError(f"batch must be >= 0 (0: the module's own), got {batch}")
    graph = module.graph
    grouped = next((n for n in graph.nodes if n.group is not None), None)
    if grouped is not None:
        raise PassError(f"node '{grouped.name}' is in a fusion group: replicate before fusing")
    own_batch = module_batch(module)
    global_batch = batch or own_batch
    if microbatches > 1 and global_batch % (replicas * microbatches):
        per = f" per replica ({global_batch} / {replicas})" if replicas > 1 else ""
        raise PassError(
            f"microbatch{{n={microbatches}}}: {microbatches} does not divide the batch{per} "
            f"{global_batch // replicas if global_batch % replicas == 0 else global_batch}"
        )
    if global_batch % replicas:
        raise PassError(f"the global batch {global_batch} is not a multiple of {replicas} replicas")
    copies = replicas * microbatches
    replica_batch = global_batch // replicas
    copy_batch = global_batch // copies
    if replica is None:
        replica = module_at_batch(module, copy_batch)
    nodes, replicated, sources, rep_inputs, rep_constants = _classify(module, replica, own_batch)
    # With micro-batches, a batch input is fed once per replica at the replica batch and split.
    feeds = (
        [n for n in nodes if n in sources and n.op == "tf.Placeholder" and _leading(n.outputs[0].type) == own_batch]
        if microbatches > 1
        else []
    )
    feed_inputs = (
        [v for v in graph.inputs if v in rep_inputs and _leading(v.type) == own_batch] if microbatches > 1 else []
    )
    shared_nodes = [n for n in nodes if n not in replicated]
    replicated_nodes = [n for n in nodes if n in replicated and n not in feeds]
    rgraph = replica.graph
    for node in shared_nodes:
        other = _replica_node(replica, node)
        for a, b in zip(node.outputs, other.outputs, strict=True):
            if a.type != b.type:
                raise PassError(
                    f"shared node '{node.name}' ({node.op}) changes type with the batch ({a.type} -> {b.type}): "
                    "it depends on the batch but is not replicated"
                )

    def cname(name: str, k: int) -> str:
        return copy_name(name, k // microbatches, k % microbatches, replicas, microbatches)

    def feed_name(name: str, r: int) -> str:
        return replica_name(name, r) if replicas > 1 else name

    new = Graph(graph.name)
    shared_map: dict[Value, Value] = {}
    rep_maps: list[dict[Value, Value]] = [{} for _ in range(copies)]
    splits: list[Node] = []

    def split_feed(whole: Value, original: Value, r: int) -> None:
        prefix = f"{AGGREGATION_PREFIX}replica{r}/" if replicas > 1 else AGGREGATION_PREFIX
        part = rgraph.value(original.name).type
        split = new.add_node(
            "graphir.split",
            [whole],
            [part] * microbatches,
            name=f"{prefix}split/{original.name}",
            output_names=[cname(original.name, r * microbatches + m) for m in range(microbatches)],
            params={"axis": 0},
        )
        splits.append(split)
        for m in range(microbatches):
            rep_maps[r * microbatches + m][original] = split.outputs[m]

    for value in graph.inputs:
        if value in feed_inputs:
            whole = _with_leading(value.type, replica_batch)
            for r in range(replicas):
                split_feed(new.add_input(feed_name(value.name, r), whole), value, r)
        elif value in rep_inputs:
            rtype = rgraph.value(value.name).type
            for k in range(copies):
                rep_maps[k][value] = new.add_input(cname(value.name, k), rtype)
        else:
            shared_map[value] = new.add_input(value.name, value.type)
    for value in graph.constants:
        if value in rep_constants:
            other = rgraph.value(value.name)
            data = other.const
            if data is None and other.producer is not None and other.producer.op == "tf.Const":
                data = other.producer.params.get("value")  # the importer keeps small constants as Const nodes
            for k in range(copies):
                rep_maps[k][value] = new.add_constant(cname(value.name, k), other.type, data)
        else:
            shared_map[value] = new.add_constant(value.name, value.type, value.const)

    def kept_annotations(source: Node, k: int) -> dict[str, object]:
        """``source``'s annotations without the placement; ``colocate`` renamed for copy ``k`` (k >= 0)."""
        kept = {key: value for key, value in source.annotations.items() if key not in _PLACEMENT_KEYS}
        if k >= 0 and "colocate" in kept:
            kept["colocate"] = cname(str(kept["colocate"]), k)
        return kept

    def copy_annotations(source: Node, target: Node, k: int) -> None:
        for key, value in kept_annotations(source, k).items():
            target.set_annotation(key, value)

    feed_copies: list[dict[Node, Node]] = [{} for _ in range(replicas)]
    for node in feeds:
        value = node.outputs[0]
        whole = _with_leading(value.type, replica_batch)
        for r in range(replicas):
            copy = new.add_node(
                node.op, [], [whole], name=feed_name(node.name, r), output_names=[feed_name(value.name, r)]
            )
            copy.params = {**node.params, "shape": tuple(d if isinstance(d, int) else -1 for d in whole.shape or ())}
            copy.loc = node.loc
            copy_annotations(node, copy, r * microbatches if replicas > 1 else -1)
            feed_copies[r][node] = copy
            split_feed(copy.outputs[0], value, r)
    shared_copy: dict[Node, Node] = {}
    # The copies are made without add_node's checks where they cannot fail (clone.add_copy).
    for node in shared_nodes:
        copy = add_copy(
            new,
            node,
            node.name,
            [v.name for v in node.outputs],
            [v.type for v in node.outputs],
            dict(node.params),
            kept_annotations(node, -1),
        )
        shared_copy[node] = copy
        for a, b in zip(node.outputs, copy.outputs, strict=True):
            shared_map[a] = b
    rep_nodes = [_replica_node(replica, n) for n in replicated_nodes]
    rep_copies: list[dict[Node, Node]] = [{} for _ in range(copies)]
    for k in range(copies):
        for node, other in zip(replicated_nodes, rep_nodes, strict=True):
            copy = add_copy(
                new,
                node,
                cname(node.name, k),
                [cname(v.name, k) for v in node.outputs],
                [v.type for v in other.outputs],
                dict(other.params),  # the replica's params: batch-dependent constants rescaled
                kept_annotations(node, k),
            )
            rep_copies[k][node] = copy
            for a, b in zip(node.outputs, copy.outputs, strict=True):
                rep_maps[k][a] = b

    def copy_node(k: int, node: Node) -> Node:
        found = rep_copies[k].get(node)
        return found if found is not None else feed_copies[k // microbatches][node]

    aggregated: dict[Value, Value] = {}
    aggregation_nodes: list[Node] = [*splits]
    inverse: dict[DType, Value] = {}

    def add_n(values: list[Value], out_type: TensorType, name: str) -> Value:
        summed = new.add_node(
            "tf.AddN", values, [out_type], name=name, params={"N": len(values), "T": out_type.dtype.short}
        )
        aggregation_nodes.append(summed)
        return summed.outputs[0]

    def aggregate(value: Value) -> Value:
        done = aggregated.get(value)
        if done is not None:
            return done
        parts = [rep_maps[k][value] for k in range(copies)]
        if copies == 1:
            aggregated[value] = parts[0]
            return parts[0]
        out_type = parts[0].type
        if out_type != value.type and out_type.shape is not None and value.type.shape is not None:
            axis = next(i for i, (a, b) in enumerate(zip(out_type.shape, value.type.shape, strict=False)) if a != b)
            whole = TensorType(
                value.type.dtype, tuple(d * copies if i == axis else d for i, d in enumerate(out_type.shape))
            )  # type: ignore[operator]
            concat = new.add_node(
                "graphir.concat", parts, [whole], name=f"{AGGREGATION_PREFIX}concat/{value.name}", params={"axis": axis}
            )
            aggregation_nodes.append(concat)
            aggregated[value] = concat.outputs[0]
            return concat.outputs[0]
        if microbatches > 1 and replicas > 1:  # each replica accumulates its micro-batches first
            locals_ = [
                add_n(
                    parts[r * microbatches : (r + 1) * microbatches],
                    out_type,
                    f"{AGGREGATION_PREFIX}replica{r}/sum/{value.name}",
                )
                for r in range(replicas)
            ]
            total = add_n(locals_, out_type, f"{AGGREGATION_PREFIX}sum/{value.name}")
        else:
            total = add_n(parts, out_type, f"{AGGREGATION_PREFIX}sum/{value.name}")
        dtype = out_type.dtype
        scale = inverse.get(dtype)
        if scale is None:
            data = np.asarray(1.0 / copies, dtype=numpy_dtype(dtype))
            scale = new.add_constant(
                f"{AGGREGATION_PREFIX}inv_replicas_{dtype.short}", TensorType(dtype, ()), DenseTensor.from_numpy(data)
            )
            inverse[dtype] = scale
        mean = new.add_node(
            "tf.Mul",
            [total, scale],
            [out_type],
            name=f"{AGGREGATION_PREFIX}mean/{value.name}",
            params={"T": dtype.short},
        )
        aggregation_nodes.append(mean)
        aggregated[value] = mean.outputs[0]
        return mean.outputs[0]

    for node in shared_nodes:
        copy = shared_copy[node]
        for value in node.inputs:
            copy.add_input(shared_map[value] if value in shared_map else aggregate(value))
        copy.add_control_inputs(
            target
            for control in node.control_inputs
            for target in (
                [shared_copy[control]] if control in shared_copy else [copy_node(k, control) for k in range(copies)]
            )
        )
    for k in range(copies):
        for node in replicated_nodes:
            copy = rep_copies[k][node]
            for value in node.inputs:
                copy.add_input(rep_maps[k].get(value) or shared_map[value])
            copy.add_control_inputs(
                shared_copy[control] if control in shared_copy else copy_node(k, control)
                for control in node.control_inputs
            )
    for r in range(replicas):
        for node, copy in feed_copies[r].items():
            for control in node.control_inputs:
                if control in shared_copy:
                    copy.add_control_input(shared_copy[control])
    new.set_outputs(shared_map[v] if v in shared_map else aggregate(v) for v in graph.outputs)
    keys = graph._annotation_keys  # what the copies may hold: the module's keys less the placement
    new.touch_all(None if keys is None else keys.difference(_PLACEMENT_KEYS))
    new._uses_exact_version = new._version  # every use was appended with its operand (add_input, add_node)

    metadata = dict(module.metadata)
    metadata[REPLICAS_METADATA] = replicas
    metadata[MICROBATCHES_METADATA] = microbatches
    result = Module(module.name, new, module.cluster_spec, metadata)
    if module.cluster_spec is not None:
        result.set_cluster(module.cluster)
    _annotate_costs(module, result, replicated_nodes, rep_nodes, rep_copies, aggregation_nodes, feeds, feed_copies)
    return DataParallelGraph(
        module=result,
        replicas=replicas,
        global_batch=global_batch,
        replica_batch=replica_batch,
        replicated=[n.name for n in replicated_nodes],
        shared=[n.name for n in shared_nodes],
        sources=[n.name for n in nodes if n in sources] + [v.name for v in graph.inputs if v in rep_inputs],
        aggregated=[v.name for v in aggregated if copies > 1],
        aggregation_nodes=[n.name for n in aggregation_nodes],
        microbatches=microbatches,
        microbatch=copy_batch,
    )


def _with_leading(value_type: TensorType, leading: int) -> TensorType:
    shape = value_type.shape
    assert shape is not None
    return TensorType(value_type.dtype, (leading, *shape[1:]))


def _annotate_costs(
    module: Module,
    result: Module,
    originals: list[Node],
    rep_nodes: list[Node],
    rep_copies: list[dict[Node, Node]],
    aggregation_nodes: list[Node],
    feeds: list[Node],
    feed_copies: list[dict[Node, Node]],
) -> None:
    """Scale replicated costs, cost the aggregation, recompute ``mem`` (see the module docstring)."""
    profiled = any(n.cost is not None for n in module.graph.nodes)
    if profiled:
        # A re-batched replica model (rebatch) already holds each node's cost at the replica's shapes.
        rescaled = all(r.cost is not None or o.cost is None for o, r in zip(originals, rep_nodes, strict=True))
        costs = [r.cost for r in rep_nodes] if rescaled else scaled_costs(result, originals, rep_nodes)
        costed = [(node, cost) for node, cost in zip(originals, costs, strict=True) if cost is not None]
        for copies in rep_copies:
            result.graph.annotate("cost", [copies[node] for node, _ in costed], [cost for _, cost in costed])
        for copies in feed_copies:
            fed = [copies[n] for n in feeds]
            for node, cost in zip(fed, scaled_costs(result, feeds, fed), strict=True):
                if cost is not None:
                    node.cost = cost
        if aggregation_nodes:
            times = kind_times(result.cluster, aggregation_nodes)[0]
            for i, node in enumerate(aggregation_nodes):
                node.cost = Cost({kind: float(f"{float(t[i]):.12g}") for kind, t in times.items()})
    if any(n.mem is not None for n in module.graph.nodes):
        # The copies' temporaries are their re-batched replica's (the same op at the same shapes);
        # only the new nodes need an estimate. Persistent and activation bytes are recounted over
        # the whole graph (a constant shared by the copies is held once).
        known = {copies[node]: rep.mem for copies in rep_copies for node, rep in zip(originals, rep_nodes, strict=True)}
        recompute_mem(result, {node: mem.temporary for node, mem in known.items() if mem is not None})
