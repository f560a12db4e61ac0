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
6. **Mirrored variables** (``sync="allreduce"``, with ``D > 1``): what data-parallel training does
   today (Horovod, PyTorch DDP, ``tf.distribute.MirroredStrategy``; the data dimension of
   Megatron-LM and Alpa). Every replica ``r`` holds its own copy of the shared part, named
   ``mirror<r>/x`` (:func:`graphir.copies.mirror_name`; a variable handle's ``shared_name`` too, so
   each is a variable of its own), read by its own copies, and applies the same update to it. A
   gradient reaches every mirror as the mean over all copies by a **ring all-reduce** (Patarasuk
   and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations", JPDC 2009;
   the algorithm of Baidu's ring all-reduce, Horovod and NCCL's rings): replica ``r``'s sum over its
   micro-batches (``mirror<r>/dp/local/g``) is cut along its largest axis into ``D`` chunks
   (``graphir.split``); in ``D - 1`` reduce-scatter steps replica ``r`` passes its partial sum of
   chunk ``(r - s) mod D`` to replica ``r + 1``, which adds its own part (``tf.AddV2``, on the
   receiver), so replica ``q`` ends with chunk ``q + 1`` summed over all replicas; in ``D - 1``
   all-gather steps each whole chunk travels on around the ring (``tf.Identity`` on the receiver:
   the hop is a transfer between ring neighbours, which the simulator charges on the link model
   like any other); between the two phases the replica holding a summed chunk scales it by
   ``1 / (D M)`` (``dp/mean/<label>/<chunk>``: once per element, as NCCL's ``ncclAvg``), and each
   replica joins its chunks (``graphir.concat``).
   Each replica sends and receives ``2 (D - 1) / D`` of the gradient's bytes, the bandwidth-optimal
   volume, only to and from its ring neighbours, and a layer's exchange starts as soon as its
   gradient is made, so it overlaps the backward passes of the layers before it. A gradient too
   small to cut (no axis of ``D`` or more elements) is summed by every replica from every
   replica's part. **Buckets** (PyTorch DDP's ``bucket_cap_mb``, Horovod's tensor fusion): the
   gradients are taken in the order the backward pass makes them and joined per dtype until a
   bucket holds ``bucket_bytes`` (default 25 MiB, DDP's); a bucket's gradients are flattened
   (``tf.Reshape``, unless already one-dimensional), joined (``graphir.concat``), reduced by one
   ring, cut back (``graphir.split``) and reshaped: one ring's steps per bucket instead of per
   gradient, and a bucket's exchange starts when its last gradient is made. A graph output made
   by the shared part is mirror 0's, after every mirror's producer ran (``dp/join/...``), so
   running the step runs every replica's update.

The baseline placement of this graph ("data parallel", TF-slim's deployment) is
:func:`graphir.passes.transform.data_parallel.data_parallel_devices`.
"""

from __future__ import annotations

import dataclasses
from typing import cast

import numpy as np

from graphir.annotations import Cost
from graphir.attributes import DenseTensor, ParamValue, numpy_dtype
from graphir.clone import add_copy
from graphir.copies import (
    MICROBATCHES_METADATA,
    REPLICAS_METADATA,
    copy_name,
    copy_of,
    mirror_name,
    replica_name,
    replica_of,
)
from graphir.errors import PassError
from graphir.ir import ConstData, Graph, Module, Node, Value
from graphir.passes.profile.roofline import kind_times
from graphir.passes.transform.rebatch import recompute_mem, scaled_costs
from graphir.types import DType, TensorType, is_static_shape

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

SYNCS = ("ps", "allreduce")
"""How the replicas' gradients meet (:func:`data_parallel`'s ``sync``): one shared update, or mirrored variables."""

BUCKET_BYTES = 25 << 20
"""Gradient bucket size of the ring all-reduce: PyTorch DDP's default ``bucket_cap_mb=25``."""

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
    sync: str = "ps",
    bucket_bytes: int = BUCKET_BYTES,
) -> DataParallelGraph:
    """Build the data-parallel (and micro-batched) graph of a training-step module (see the module docstring).

    Args:
        module: a training-step graph (placeholders with a leading batch dimension, variables).
        replicas: number of replicas ``D`` (>= 1; 1 re-batches the model to ``batch``).
        batch: global batch ``G`` (0: the module's own batch); must be a multiple of ``D * M``.
        replica: the model at batch ``G / (D * M)`` with the same node names (default: :func:`module_at_batch`).
        microbatches: micro-batches ``M`` per replica (>= 1): gradient accumulation.
        sync: ``ps`` (one shared copy of the variables and one update, the module docstring's step
            3) or ``allreduce`` (mirrored variables and a ring all-reduce: step 6).
        bucket_bytes: with ``allreduce``, gradients are joined into buckets of this many bytes
            for one ring each (0: one ring per gradient).

    Returns:
        The new module and what was replicated, shared and aggregated.

    Raises:
        PassError: bad arguments, fusion groups, a replica model that does not match, or a shared
            node whose type would change with the batch.
    """
    from graphir.passes.transform.batching import module_batch

    if replicas < 1:
        raise PassError(f"replicas must be >= 1, got {replicas}")
    if sync not in SYNCS:
        raise PassError(f"sync must be one of {'|'.join(SYNCS)}, got '{sync}'")
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
                # The importer keeps small constants as Const nodes (their value a DenseTensor).
                data = cast("ConstData | None", other.producer.params.get("value"))
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
    mirrored = sync == "allreduce" and replicas > 1
    mirrors = replicas if mirrored else 1
    # shared_copies[r][node]: replica r's mirror of a shared node (one copy, r = 0, without mirrors).
    # The copies are made without add_node's checks where they cannot fail (clone.add_copy).
    shared_copies: list[dict[Node, Node]] = [{} for _ in range(mirrors)]
    mirror_maps: list[dict[Value, Value]] = [{} for _ in range(mirrors)]
    for r in range(mirrors):
        rename = (lambda name, r=r: mirror_name(name, r)) if mirrored else (lambda name: name)
        for node in shared_nodes:
            params = dict(node.params)
            annotations = kept_annotations(node, -1)
            if mirrored:
                if "shared_name" in params:  # each mirror is a variable of its own
                    params["shared_name"] = rename(str(params["shared_name"] or node.name))
                if node.colocate is not None:
                    annotations["colocate"] = rename(node.colocate)
            copy = add_copy(
                new,
                node,
                rename(node.name),
                [rename(v.name) for v in node.outputs],
                [v.type for v in node.outputs],
                params,
                annotations,
            )
            shared_copies[r][node] = copy
            for a, b in zip(node.outputs, copy.outputs, strict=True):
                mirror_maps[r][a] = b
    shared_copy = shared_copies[0]
    if not mirrored:
        shared_map.update(mirror_maps[0])

    def shared_value(value: Value, r: int) -> Value:
        """Replica ``r``'s view of a shared value: its mirror's, else the one shared graph input or constant."""
        found = mirror_maps[r if mirrored else 0].get(value)
        return found if found is not None else shared_map[value]

    def shared_node(node: Node, r: int) -> Node:
        return shared_copies[r if mirrored else 0][node]

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
                value.type.dtype,
                # The parts' dims differ at axis: numbers there.
                tuple(cast(int, d) * copies if i == axis else d for i, d in enumerate(out_type.shape)),
            )
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
        scale = inverse_of(dtype)
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

    def inverse_of(dtype: DType) -> Value:
        scale = inverse.get(dtype)
        if scale is None:
            data = np.asarray(1.0 / copies, dtype=numpy_dtype(dtype))
            scale = new.add_constant(
                f"{AGGREGATION_PREFIX}inv_replicas_{dtype.short}", TensorType(dtype, ()), DenseTensor.from_numpy(data)
            )
            inverse[dtype] = scale
        return scale

    def op(name: str, kind: str, inputs: list[Value], out_types: list[TensorType], **params: ParamValue) -> Node:
        made = new.add_node(kind, inputs, out_types, name=name, params=params)
        aggregation_nodes.append(made)
        return made

    reduced: dict[Value, list[Value]] = {}

    def local_parts(value: Value) -> list[Value]:
        """Each replica's sum of ``value`` over its micro-batches."""
        out_type = rep_maps[0][value].type
        return [
            add_n(
                [rep_maps[k][value] for k in range(r * microbatches, (r + 1) * microbatches)],
                out_type,
                mirror_name(f"{AGGREGATION_PREFIX}local/{value.name}", r),
            )
            if microbatches > 1
            else rep_maps[r * microbatches][value]
            for r in range(replicas)
        ]

    def ring(held: list[list[Value]], label: str, scale: Value) -> list[list[Value]]:
        """The ring on chunks: ``held[r][j]`` is replica r's part of chunk j; returns each replica's chunk means.

        Reduce-scatter: at step s replica r passes its partial sum of chunk (r - s) mod D to replica
        r + 1, which adds its own part; after D - 1 steps replica q holds chunk q + 1 whole and
        scales it by ``scale`` (``dp/mean/<label>/<chunk>``: each element is scaled once, by the
        replica that owns its chunk, as NCCL's ``ncclAvg`` does, rather than by every replica).
        All-gather: at step s replica q passes whole chunk (q + 1 - s) mod D on to replica q + 1.
        """
        held = [list(row) for row in held]
        base = f"{AGGREGATION_PREFIX}ring/{label}"
        for step in range(replicas - 1):
            sent = [(r, (r - step) % replicas, held[r][(r - step) % replicas]) for r in range(replicas)]
            for r, j, partial in sent:
                q = (r + 1) % replicas
                held[q][j] = op(
                    mirror_name(f"{base}/rs{step}_{j}", q),
                    "tf.AddV2",
                    [partial, held[q][j]],
                    [partial.type],
                    T=partial.type.dtype.short,
                ).outputs[0]
        for q in range(replicas):
            j = (q + 1) % replicas
            held[q][j] = op(
                mirror_name(f"{AGGREGATION_PREFIX}mean/{label}/{j}", q),
                "tf.Mul",
                [held[q][j], scale],
                [held[q][j].type],
                T=held[q][j].type.dtype.short,
            ).outputs[0]
        for step in range(replicas - 1):
            sent = [(q, (q + 1 - step) % replicas, held[q][(q + 1 - step) % replicas]) for q in range(replicas)]
            for q, j, whole in sent:
                t = (q + 1) % replicas
                held[t][j] = op(
                    mirror_name(f"{base}/ag{step}_{j}", t),
                    "tf.Identity",
                    [whole],
                    [whole.type],
                    T=whole.type.dtype.short,
                ).outputs[0]
        return held

    def cut(value: Value, sizes: list[int], axis: int, name: str) -> list[Value]:
        """``value`` cut along ``axis`` into parts of ``sizes`` (one ``graphir.split``)."""
        shape = value.type.shape or ()
        parts = [TensorType(value.type.dtype, tuple(p if i == axis else d for i, d in enumerate(shape))) for p in sizes]
        split = new.add_node(
            "graphir.split",
            [value],
            parts,
            name=name,
            output_names=[f"{name}_{j}" for j in range(len(sizes))],
            params={"axis": axis},
        )
        aggregation_nodes.append(split)
        return list(split.outputs)

    def balanced(total: int) -> list[int]:
        return [total // replicas + (1 if j < total % replicas else 0) for j in range(replicas)]

    def ring_mean(local: list[Value], out_type: TensorType, label: str) -> list[Value]:
        """Every replica's mean of the replicas' ``local`` values: a ring all-reduce (module docstring, step 6)."""
        dtype = out_type.dtype
        shape = out_type.shape or ()
        sizes = [d if isinstance(d, int) else 0 for d in shape]
        axis = max(range(len(sizes)), key=lambda i: (sizes[i], -i)) if sizes else -1
        if axis < 0 or sizes[axis] < replicas:  # too small to cut: every replica sums every replica's part
            sums = [
                op(
                    mirror_name(f"{AGGREGATION_PREFIX}sum/{label}", r),
                    "tf.AddN",
                    local,
                    [out_type],
                    N=replicas,
                    T=dtype.short,
                ).outputs[0]
                for r in range(replicas)
            ]
            return mean(sums, out_type, label)
        base = f"{AGGREGATION_PREFIX}ring/{label}"
        parts = balanced(sizes[axis])
        held = ring(
            [cut(local[r], parts, axis, mirror_name(f"{base}/split", r)) for r in range(replicas)],
            label,
            inverse_of(dtype),
        )
        return [
            op(mirror_name(f"{base}/concat", r), "graphir.concat", held[r], [out_type], axis=axis).outputs[0]
            for r in range(replicas)
        ]

    def mean(sums: list[Value], out_type: TensorType, label: str) -> list[Value]:
        scale = inverse_of(out_type.dtype)
        return [
            op(
                mirror_name(f"{AGGREGATION_PREFIX}mean/{label}", r),
                "tf.Mul",
                [sums[r], scale],
                [out_type],
                T=out_type.dtype.short,
            ).outputs[0]
            for r in range(replicas)
        ]

    shape_constants: dict[tuple[int, ...], Value] = {}

    def shape_constant(shape: tuple[int, ...]) -> Value:
        found = shape_constants.get(shape)
        if found is None:
            data = DenseTensor.from_numpy(np.asarray(shape, dtype=np.int32))
            label = "x".join(str(d) for d in shape)
            found = new.add_constant(f"{AGGREGATION_PREFIX}shape_{label}", TensorType(DType.I32, (len(shape),)), data)
            shape_constants[shape] = found
        return found

    def reduce_bucket(index: int, values: list[Value]) -> None:
        """One ring for a bucket of gradients (module docstring, step 6).

        The bucket is the gradients flattened and laid end to end, cut into the ring's ``D``
        balanced chunks; each chunk is joined straight from the pieces of the gradients it covers
        (a gradient across a chunk boundary is cut there), so the bucket is copied once on the way
        in; after the ring (which scales each chunk once, on its owner) each replica cuts the
        chunks back at the gradients' boundaries (a gradient across a boundary is joined from its
        pieces), then reshapes.
        """
        label = f"bucket{index}"
        dtype = values[0].type.dtype
        shapes: list[tuple[int, ...]] = []
        for v in values:
            shape = v.type.shape
            assert is_static_shape(shape), "bucketed gradients have static shapes"
            shapes.append(shape)
        counts = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
        starts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        if starts[-1] < replicas:  # fewer elements than replicas: each gradient on its own
            for v in values:
                reduced[v] = ring_mean(local_parts(v), v.type, v.name)
            return
        bounds = np.concatenate([[0], np.cumsum(balanced(int(starts[-1])))]).tolist()
        # pieces[i]: (chunk j, length) of gradient i in order; chunk_pieces[j]: (gradient i, piece k)
        pieces: list[list[tuple[int, int]]] = []
        chunk_pieces: list[list[tuple[int, int]]] = [[] for _ in range(replicas)]
        for i in range(len(values)):
            row = []
            for j in range(replicas):
                low, high = max(starts[i], bounds[j]), min(starts[i + 1], bounds[j + 1])
                if high > low:
                    chunk_pieces[j].append((i, len(row)))
                    row.append((j, high - low))
            pieces.append(row)
        flat_shape = shape_constant((-1,))
        chunks: list[list[Value]] = []
        for r, local in enumerate(zip(*(local_parts(v) for v in values), strict=True)):
            parts: list[list[Value]] = []
            for v, part, count, shape, row in zip(values, local, counts, shapes, pieces, strict=True):
                flat = (
                    part
                    if len(shape) == 1  # already flat
                    else op(
                        mirror_name(f"{AGGREGATION_PREFIX}{label}/flat/{v.name}", r),
                        "tf.Reshape",
                        [part, flat_shape],
                        [TensorType(dtype, (count,))],
                        T=dtype.short,
                        Tshape="i32",
                    ).outputs[0]
                )
                across = len(row) > 1
                name = mirror_name(f"{AGGREGATION_PREFIX}{label}/piece/{v.name}", r)
                parts.append(cut(flat, [n for _, n in row], 0, name) if across else [flat])
            row_chunks = []
            for j in range(replicas):
                members = [parts[i][k] for i, k in chunk_pieces[j]]
                chunk_type = TensorType(dtype, (int(bounds[j + 1] - bounds[j]),))
                row_chunks.append(
                    members[0]
                    if len(members) == 1
                    else op(
                        mirror_name(f"{AGGREGATION_PREFIX}{label}/chunk{j}", r),
                        "graphir.concat",
                        members,
                        [chunk_type],
                        axis=0,
                    ).outputs[0]
                )
            chunks.append(row_chunks)
        means = ring(chunks, label, inverse_of(dtype))
        for r in range(replicas):
            back: list[list[Value]] = [[] for _ in values]
            for j in range(replicas):
                scaled = means[r][j]
                members = chunk_pieces[j]
                if len(members) == 1:
                    outs = [scaled]
                else:
                    sizes = [pieces[i][k][1] for i, k in members]
                    outs = cut(scaled, sizes, 0, mirror_name(f"{AGGREGATION_PREFIX}{label}/cut{j}", r))
                for (i, _), piece in zip(members, outs, strict=True):
                    back[i].append(piece)
            for v, shape, count, got in zip(values, shapes, counts, back, strict=True):
                whole = (
                    got[0]
                    if len(got) == 1
                    else op(
                        mirror_name(f"{AGGREGATION_PREFIX}{label}/whole/{v.name}", r),
                        "graphir.concat",
                        got,
                        [TensorType(dtype, (count,))],
                        axis=0,
                    ).outputs[0]
                )
                if len(shape) != 1:
                    whole = op(
                        mirror_name(f"{AGGREGATION_PREFIX}{label}/shape/{v.name}", r),
                        "tf.Reshape",
                        [whole, shape_constant(shape)],
                        [v.type],
                        T=dtype.short,
                        Tshape="i32",
                    ).outputs[0]
                reduced.setdefault(v, []).append(whole)

    # Gradient buckets (PyTorch DDP's, Horovod's tensor fusion): the values the mirrors read, in the
    # order the backward pass makes them (their producers in topological order), joined per
    # dtype until a bucket holds ``bucket_bytes``; a bucket of one value keeps its own ring.
    bucket_of: dict[Value, tuple[int, list[Value]]] = {}
    if mirrored and bucket_bytes > 0:
        position = {node: k for k, node in enumerate(nodes)}
        wanted: dict[Value, None] = {}
        for node in shared_nodes:
            for value in node.inputs:
                if value in mirror_maps[0] or value in shared_map or value.producer is None:
                    continue
                out_type = rep_maps[0][value].type
                if (
                    out_type == value.type
                    and out_type.shape is not None
                    and all(isinstance(d, int) for d in out_type.shape)
                ):
                    wanted[value] = None

        def made_at(value: Value) -> tuple[int, str]:
            assert value.producer is not None, "a gradient is made by a node"
            return position[value.producer], value.name

        ordered = sorted(wanted, key=made_at)
        open_buckets: dict[DType, list[Value]] = {}
        closed: list[list[Value]] = []
        for value in ordered:
            bucket = open_buckets.setdefault(value.type.dtype, [])
            bucket.append(value)
            if sum(v.type.nbytes_or(0) for v in bucket) >= bucket_bytes:
                closed.append(open_buckets.pop(value.type.dtype))
        closed += [b for b in open_buckets.values() if b]
        for k, bucket in enumerate(sorted(closed, key=lambda b: ordered.index(b[0]))):
            if len(bucket) > 1:
                for value in bucket:
                    bucket_of[value] = (k, bucket)

    def allreduce(value: Value) -> list[Value]:
        """Each replica's mean of ``value`` over all copies (module docstring, step 6)."""
        done = reduced.get(value)
        if done is not None:
            return done
        out_type = rep_maps[0][value].type
        if out_type != value.type:  # a batch-shaped value: the one concatenation, read by every mirror
            whole = aggregate(value)
            reduced[value] = [whole] * replicas
            return reduced[value]
        if value in bucket_of:
            reduce_bucket(*bucket_of[value])
            return reduced[value]
        reduced[value] = ring_mean(local_parts(value), out_type, value.name)
        return reduced[value]

    for r in range(mirrors):
        for node in shared_nodes:
            copy = shared_copies[r][node]
            for value in node.inputs:
                if value in mirror_maps[r] or value in shared_map:
                    copy.add_input(shared_value(value, r))
                else:
                    copy.add_input(allreduce(value)[r] if mirrored else aggregate(value))
            mine = range(r * microbatches, (r + 1) * microbatches) if mirrored else range(copies)
            copy.add_control_inputs(
                target
                for control in node.control_inputs
                for target in (
                    [shared_copies[r][control]] if control in shared_copy else [copy_node(k, control) for k in mine]
                )
            )
    for k in range(copies):
        r = k // microbatches
        for node in replicated_nodes:
            copy = rep_copies[k][node]
            for value in node.inputs:
                copy.add_input(rep_maps[k].get(value) or shared_value(value, r))
            copy.add_control_inputs(
                shared_node(control, r) if control in shared_copy else copy_node(k, control)
                for control in node.control_inputs
            )
    for r in range(replicas):
        for node, copy in feed_copies[r].items():
            for control in node.control_inputs:
                if control in shared_copy:
                    copy.add_control_input(shared_node(control, r))

    def output(value: Value) -> Value:
        if value not in mirror_maps[0]:
            return shared_map[value] if value in shared_map else aggregate(value)
        if not mirrored:
            return mirror_maps[0][value]
        # Mirror 0's value, after every mirror's producer ran: a run that fetches the outputs runs
        # every replica's update, as it ran the one update.
        producer = value.producer
        assert producer is not None
        join = op(
            f"{AGGREGATION_PREFIX}join/{value.name}",
            "tf.Identity",
            [mirror_maps[0][value]],
            [value.type],
            T=value.type.dtype.short,
        )
        join.add_control_inputs(shared_copies[r][producer] for r in range(1, replicas))
        return join.outputs[0]

    new.set_outputs(output(v) for v in graph.outputs)
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
