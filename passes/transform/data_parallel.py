"""``data-parallel{replicas=N batch=G}``: replicate a training graph N times (FastT's data-parallel input graph).

Rewrites the module into the graph TensorFlow's in-graph data parallelism runs
(:func:`graphir.passes.transform.replicate.data_parallel`): ``replicas`` copies of the forward and backward pass
(``replica<i>/...``), each on ``G / N`` samples of the global batch ``G``, sharing only the variables
(handles, reads, optimizer updates); each value a replica hands to the shared part (gradients,
moving statistics, the loss) is averaged over the replicas (``tf.AddN`` then ``tf.Mul`` by ``1/N``)
before the single update. Per-replica types come from the model at batch ``G / N`` (the zoo's
builder traces it again; other TF graphs get their placeholders re-batched), so ``Reshape``
targets and other batch-dependent constants are right. A profiled module keeps consistent costs
(scaled by the analytical time ratio) and gets ``mem`` recomputed; a placement is dropped.

``place{algo=data-parallel variables=balanced|first|cpu sums=update|first-replica}`` (registered
here) is the baseline placement of such a graph, :func:`data_parallel_devices` (below); the order
comes from list scheduling. Where the variables live is a placement, not a rewrite: the graph
TF-slim builds (clones, one ``add_n`` per gradient, one update) is the same whichever device holds
them, so ``variables=cpu`` is an option of the placer, not of ``data-parallel``.
That device map depends on the graph's meaning (replica name prefixes, resource handles), which the
placement problem's arrays do not hold, so the placer computes it in its *device hints* pre-step
(``Placer.device_hints``, run by ``place`` on the Module before the problem is built) and its pure
``place`` reads the answer as ``problem.preferred`` (a fusion group follows its first member).

Requires nothing; provides nothing. Options: ``replicas`` (>= 1), ``batch`` (the global batch, 0:
the module's own; a multiple of ``replicas``), ``microbatches`` (per replica, >= 1: each replica
accumulates that many micro-batches, names ``replica<r>/mb<m>/...``, see ``microbatch``).
**Feeds**: each replica gets its own batch placeholders (``replica<r>/x``, at ``G / N``), so the
data-parallel graph is fed ``N`` slices of the batch (with micro-batches, each replica's
placeholder is split in ``M`` by a ``graphir.split``); ``microbatch`` alone keeps the original
placeholders and feeds. Statistics: ``replicas``, ``global-batch``,
``replica-batch``, ``replicated-nodes`` (per replica), ``shared-nodes``, ``aggregated-values``,
``aggregation-nodes``, ``nodes``.

:func:`data_parallel_devices`, the baseline placement "data parallel": replica ``i`` on the
``i``-th accelerator (``i mod`` their number; a host CPU device runs no replica when the cluster has
GPUs); each variable with everything that touches its handle (reads, update, optimizer slots) on one
device, by the ``variables`` rule: ``balanced`` spreads them over the accelerators greedily by bytes
(largest first, to the device holding the fewest bytes: TF's greedy load-balancing of variables over
parameter devices); ``first`` puts them all on the first accelerator; ``cpu`` puts them all on the
host CPU, TF-slim's default deployment (``research/slim/deployment/model_deploy.py``:
``DeploymentConfig.variables_device()`` is ``/device:CPU:0`` when ``num_ps_tasks`` is 0, each clone
``i`` runs on ``/device:GPU:i``, ``deploy()`` builds ``optimize_clones`` (whose
``_sum_clones_gradients`` is one ``tf.add_n`` per variable) and ``apply_gradients`` under
``optimizer_device()`` = ``/device:CPU:0``): every replica reads each weight from host memory and
sends each gradient back to the host, where the sum and the update run: ``replicas x 2 x`` the
parameter bytes over PCIe per step, the traffic that makes FastT's 8-GPU VGG-19 slower than 4 (Table
1). ``sums`` says where the gradient sums run (``update``: with the update, as ``deploy()`` builds
them; ``first-replica``: on replica 0's accelerator, where TensorFlow's placer puts the unplaced
``add_n`` of TF-slim's ``train_image_classifier.py``). ``inputs`` says where each replica's batch
(its ``tf.Placeholder`` nodes: images, labels) comes from: ``replica`` (its own accelerator) or
``cpu`` (the host: TF-slim's ``DeploymentConfig.inputs_device()`` is ``/device:CPU:0``, where
``train_image_classifier.py`` builds the input queue each clone dequeues its batch from, so the
batch is a host-to-GPU copy). Other shared nodes go with their first user (else their first
producer, else the first accelerator).

**Issue order of the host's copies** (``data-parallel{... inputs=after-reads}``,
:func:`issue_inputs_after_reads`): TensorFlow copies host tensors to a GPU one after the other on
the GPU's one host-to-device stream, in the order they are issued (``GPUUtil::CopyCPUTensorToGPU``),
and TF-slim's variables are read at the step's start (a variable's value is sent to the clones as
soon as the step begins) while each clone's batch comes from an asynchronous dequeue. With the
variables and the batch on the host, each clone's batch is modelled as issued after the weights it
reads: a control dependency from every shared variable read a replica consumes to that replica's
graph inputs, so the batch queues behind the weights (FIFO on the host's wires and on the GPU's
stream, :mod:`graphir.links`) and a clone's first layer waits for all of its weights. This is a
model of the measured behaviour (FastT Table 1's DP steps are as long as the weights' copy plus a
clone's compute; ``benchmarks/results/replicate_fastt.md``), not read from TensorFlow's source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, ClassVar, Literal

from graphir.copies import mirror_of
from graphir.errors import PassError
from graphir.ir import Module, Node
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.place import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.transform.replicate import (
    AGGREGATION_PREFIX,
    BUCKET_BYTES,
    REPLICAS_METADATA,
    SYNCS,
    data_parallel,
    replica_of,
    touches_resource,
)
from graphir.types import DType
from graphir.unionfind import DisjointSets

if TYPE_CHECKING:
    from graphir.cluster_model import Cluster

VARIABLE_PLACEMENTS = ("balanced", "first", "cpu")
"""Where :func:`data_parallel_devices` keeps the variables (see its docstring)."""
SUM_PLACEMENTS = ("update", "first-replica")
"""Where :func:`data_parallel_devices` runs the gradient sums (see its docstring)."""
INPUT_PLACEMENTS = ("replica", "cpu")
"""Where :func:`data_parallel_devices` puts each replica's graph inputs (see its docstring)."""
INPUT_ORDERS = ("free", "after-reads")
"""The ``inputs`` option of ``data-parallel`` (see :func:`issue_inputs_after_reads`)."""


@register_pass
@dataclasses.dataclass(frozen=True)
class DataParallel(Pass):
    """Replicate the training graph ``replicas`` times on slices of the global batch, gradients averaged.

    Options:
        replicas: number of replicas (>= 1; 0: one per accelerator of the module's cluster).
        batch: global batch over all replicas (0: the module's own batch).
        inputs: ``free`` (the replicas' graph inputs depend on nothing) or ``after-reads`` (each
            replica's inputs wait for the variable reads it consumes: the issue order of TF-slim's
            host copies, :func:`issue_inputs_after_reads`).
        microbatches: micro-batches per replica (>= 1; gradient accumulation, as ``microbatch``).
        sync: ``ps`` (one shared copy of the variables, one update: TF-slim's graph) or
            ``allreduce`` (each replica holds its own copy of the variables, gradients meet by a ring
            all-reduce: :func:`graphir.passes.transform.replicate.data_parallel`'s step 6).
        bucket_mib: with ``allreduce``, the gradient bucket size in MiB (PyTorch DDP's
            ``bucket_cap_mb``, Horovod's fusion threshold; default 25, DDP's; 0: one ring per gradient).
    """

    name: ClassVar[str] = "data-parallel"
    replicas: int = 2
    batch: int = 0
    inputs: Literal["free", "after-reads"] = "free"
    microbatches: int = 1
    sync: Literal["ps", "allreduce"] = "ps"
    bucket_mib: float = BUCKET_BYTES / 2**20

    def __post_init__(self) -> None:
        """Reject impossible options when the pipeline is parsed."""
        if self.replicas < 0:
            raise ValueError(f"replicas must be >= 1 (0: one per accelerator), got {self.replicas}")
        if self.batch < 0:
            raise ValueError(f"batch must be >= 0 (0: the module's own), got {self.batch}")
        if self.microbatches < 1:
            raise ValueError(f"microbatches must be >= 1, got {self.microbatches}")
        if self.inputs not in INPUT_ORDERS:
            raise ValueError(f"inputs must be one of {'|'.join(INPUT_ORDERS)}, got '{self.inputs}'")
        if self.sync not in SYNCS:
            raise ValueError(f"sync must be one of {'|'.join(SYNCS)}, got '{self.sync}'")
        if self.bucket_mib < 0:
            raise ValueError(f"bucket-mib must be >= 0 (0: one ring per gradient), got {self.bucket_mib}")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Build the data-parallel graph and move it into ``module``."""
        replicas = self.replicas or len(replica_devices(module.cluster))
        result = data_parallel(
            module,
            replicas,
            batch=self.batch,
            microbatches=self.microbatches,
            sync=self.sync,
            bucket_bytes=round(self.bucket_mib * 2**20),
        )
        module.graph = result.module.graph
        module.metadata = result.module.metadata
        ordered = issue_inputs_after_reads(module) if self.inputs == "after-reads" else 0
        ctx.log(
            f"data-parallel: {result.replicas} replicas x {len(result.replicated)} nodes at batch "
            f"{result.replica_batch}, {len(result.shared)} shared, {len(result.aggregated)} values averaged"
        )
        return PassResult(
            True,
            {
                "replicas": result.replicas,
                "global-batch": result.global_batch,
                "replica-batch": result.replica_batch,
                "replicated-nodes": len(result.replicated),
                "shared-nodes": len(result.shared),
                "aggregated-values": len(result.aggregated),
                "aggregation-nodes": len(result.aggregation_nodes),
                "nodes": len(module.graph),
                "input-order-edges": ordered,
            },
        )


@register_placer
@dataclasses.dataclass(frozen=True)
class DataParallelPlacer(Placer):
    """The "data parallel" baseline: each replica on its own accelerator, variables where ``variables`` says.

    Options:
        variables: ``balanced`` (spread over the accelerators by bytes), ``first`` (all on the first
            accelerator) or ``cpu`` (all on the host CPU with the gradient sums and the update:
            TF-slim's default deployment).
        sums: where the gradient sums run: ``update`` (with the variable's update, as
            ``model_deploy.deploy()`` builds them) or ``first-replica`` (on replica 0's accelerator,
            where TensorFlow's placer puts the unplaced sums of TF-slim's ``train_image_classifier.py``).
        inputs: where each replica's graph inputs (its batch) live: ``replica`` (its accelerator)
            or ``cpu`` (the host, TF-slim's ``inputs_device()``).
    """

    name: ClassVar[str] = "data-parallel"
    variables: Literal["balanced", "first", "cpu"] = "balanced"
    sums: Literal["update", "first-replica"] = "update"
    inputs: Literal["replica", "cpu"] = "replica"

    def __post_init__(self) -> None:
        """Reject an unknown ``variables``, ``sums`` or ``inputs`` rule when the pipeline is parsed."""
        if self.variables not in VARIABLE_PLACEMENTS:
            raise ValueError(f"variables must be one of {'|'.join(VARIABLE_PLACEMENTS)}, got '{self.variables}'")
        if self.sums not in SUM_PLACEMENTS:
            raise ValueError(f"sums must be one of {'|'.join(SUM_PLACEMENTS)}, got '{self.sums}'")
        if self.inputs not in INPUT_PLACEMENTS:
            raise ValueError(f"inputs must be one of {'|'.join(INPUT_PLACEMENTS)}, got '{self.inputs}'")

    def device_hints(self, module: Module) -> Mapping[str, str]:
        """Replica ``i`` on the ``i``-th accelerator, variables by the ``variables`` rule (every node gets one)."""
        return data_parallel_devices(module, variables=self.variables, sums=self.sums, inputs=self.inputs)

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """The hinted device of every coarse node."""
        device = problem.preferred.copy()
        if (device < 0).any():
            raise PassError("place{algo=data-parallel}: a node has no data-parallel device (run data-parallel first)")
        return Placement(device)


# --------------------------------------------------------------------------- the baseline placement


def _variable_bytes(node: Node) -> int:
    from graphir.importers.tf import persistent_bytes

    return persistent_bytes(node)


def host_device(cluster: Cluster) -> int:
    """Position of the cluster's host CPU (TensorFlow's ``/device:CPU:0``-like device), or -1."""
    return next((k for k, d in enumerate(cluster.devices) if _is_host(d.tf_device)), -1)


def replica_devices(cluster: Cluster) -> list[int]:
    """Positions of the devices replicas run on: the accelerators (every device on a CPU-only cluster)."""
    accelerators = [k for k, d in enumerate(cluster.devices) if not _is_host(d.tf_device)]
    return accelerators or list(range(len(cluster.devices)))


def _is_host(tf_device: str) -> bool:
    return "/device:CPU:" in tf_device or "/cpu:" in tf_device.lower()


def data_parallel_devices(
    module: Module, *, variables: str = "balanced", sums: str = "update", inputs: str = "replica"
) -> dict[str, str]:
    """The "data parallel" baseline placement of a data-parallel graph: ``{node name: device name}``.

    See the module docstring: replica ``i`` on the ``i``-th accelerator (``i mod`` their number; the
    host CPU of a cluster that has GPUs runs no replica), variables (with everything that touches
    their handles) balanced by bytes over the accelerators, all on the first one, or all on the host
    CPU (``variables="cpu"``, TF-slim's default deployment). The gradient sums (the aggregation
    nodes) go with their update (``sums="update"``: ``model_deploy.deploy()`` builds them under the
    optimizer device) or on the first replica's accelerator (``sums="first-replica"``: TF-slim's
    ``train_image_classifier.py`` calls ``optimize_clones`` outside any device scope, so TensorFlow's
    placer puts each unplaced ``add_n`` on its highest-priority device, ``/device:GPU:0``). Each
    replica's ``tf.Placeholder`` nodes (its batch) go with the replica (``inputs="replica"``) or on
    the host CPU (``inputs="cpu"``, TF-slim's ``inputs_device()``). Other shared nodes go with their
    first user, else their first producer, else the first accelerator.

    Raises:
        PassError: the module is not a data-parallel graph, ``variables``, ``sums`` or ``inputs``
            is unknown, or ``variables="cpu"`` or ``inputs="cpu"`` on a cluster without a host CPU
            device.
    """
    if variables not in VARIABLE_PLACEMENTS:
        raise PassError(f"variables must be one of {', '.join(VARIABLE_PLACEMENTS)}, got '{variables}'")
    if sums not in SUM_PLACEMENTS:
        raise PassError(f"sums must be one of {', '.join(SUM_PLACEMENTS)}, got '{sums}'")
    replicas = module.metadata.get(REPLICAS_METADATA)
    if not isinstance(replicas, int) or replicas < 1:
        raise PassError(f"module '{module.name}' is not a data-parallel graph (run data-parallel first)")
    cluster = module.cluster
    names = [d.name for d in cluster.devices]
    targets = replica_devices(cluster)
    host = host_device(cluster)
    if inputs not in INPUT_PLACEMENTS:
        raise PassError(f"inputs must be one of {', '.join(INPUT_PLACEMENTS)}, got '{inputs}'")
    for option, value in (("variables", variables), ("inputs", inputs)):
        if value == "cpu" and host < 0:
            raise PassError(f"{option}=cpu: cluster '{cluster.spec}' has no host CPU device (/device:CPU:0)")
    nodes = module.graph.index().nodes
    position = {node: k for k, node in enumerate(nodes)}
    device: dict[Node, int] = {}
    shared: list[Node] = []
    for node in nodes:
        rep = replica_of(node.name)
        mirror = mirror_of(node.name)[0]
        if rep >= 0:
            device[node] = host if inputs == "cpu" and node.op == INPUT_OP else targets[rep % len(targets)]
        elif mirror >= 0:  # replica r's own copy of the variables, their updates, its share of the all-reduce
            device[node] = targets[mirror % len(targets)]  # (the ``variables`` rule places shared variables only)
        else:
            shared.append(node)
    # Variable classes: shared nodes joined by resource handles (and by colocate annotations).
    sets: DisjointSets[Node] = DisjointSets(order=position.__getitem__)
    in_shared = set(shared)

    by_class: dict[str, Node] = {}
    for node in shared:
        for value in node.inputs:
            if value.type.dtype is DType.RESOURCE and value.producer is not None and value.producer in in_shared:
                sets.union(node, value.producer)
        cls = node.colocate
        if cls is not None:
            if cls in by_class:
                sets.union(node, by_class[cls])
            else:
                by_class[cls] = node
    classes: dict[Node, list[Node]] = {}
    for node in shared:
        if touches_resource(node) or node.colocate is not None:
            classes.setdefault(sets.find(node), []).append(node)
    sized = sorted(classes.items(), key=lambda item: (-sum(_variable_bytes(n) for n in item[1]), position[item[0]]))
    load = dict.fromkeys(targets, 0)
    for _, members in sized:
        if variables == "cpu":
            d = host
        elif variables == "first":
            d = targets[0]
        else:
            d = min(targets, key=lambda k: (load[k], k))
        load[d] = load.get(d, 0) + sum(_variable_bytes(n) for n in members)
        for member in members:
            device[member] = d
    if sums == "first-replica":
        for node in shared:
            if node not in device and node.name.startswith(AGGREGATION_PREFIX):
                device[node] = targets[0]
    rest = [n for n in shared if n not in device]
    for node in reversed(rest):  # users first: aggregation goes to its update's device
        for user in _users(node):
            if user in device:
                device[node] = device[user]
                break
    for node in rest:
        if node in device:
            continue
        producers = [*node.predecessors, *node.control_inputs]
        device[node] = next((device[p] for p in producers if p in device), targets[0])
    return {node.name: names[device[node]] for node in nodes}


def _users(node: Node) -> Iterable[Node]:
    yield from node.successors
    yield from node.control_users


INPUT_OP = "tf.Placeholder"
"""The op of a replica's graph inputs (the batch: images, labels), re-batched by :func:`data_parallel`."""


def issue_inputs_after_reads(module: Module) -> int:
    """Make each replica's graph inputs wait for the shared variable reads it consumes; the edges added.

    The issue order of TF-slim's host copies (module docstring): for every replica ``i``, a control
    dependency from each shared node that touches a variable and feeds a node of replica ``i``
    directly (a ``ReadVariableOp``) to each of replica ``i``'s ``tf.Placeholder`` nodes. A read
    that depends on a replica node (through data or control edges) is left out, so no cycle forms.

    Raises:
        PassError: the module is not a data-parallel graph.
    """
    replicas = module.metadata.get(REPLICAS_METADATA)
    if not isinstance(replicas, int) or replicas < 1:
        raise PassError(f"module '{module.name}' is not a data-parallel graph (run data-parallel first)")
    nodes = module.graph.index().nodes
    after_replica: set[Node] = set()  # shared nodes downstream of a replica node
    for node in nodes:  # topological
        if replica_of(node.name) < 0 and any(
            replica_of(p.name) >= 0 or p in after_replica for p in (*node.predecessors, *node.control_inputs)
        ):
            after_replica.add(node)
    reads: dict[int, list[Node]] = {}
    inputs: dict[int, list[Node]] = {}
    for node in nodes:
        rep = replica_of(node.name)
        if rep >= 0:
            if node.op == INPUT_OP:
                inputs.setdefault(rep, []).append(node)
            continue
        if node in after_replica or not touches_resource(node):
            continue
        for rep in sorted({r for r in (replica_of(u.name) for u in node.successors) if r >= 0}):
            reads.setdefault(rep, []).append(node)
    added = 0
    for rep, placeholders in inputs.items():
        for placeholder in placeholders:
            before = len(placeholder.control_inputs)
            for read in reads.get(rep, []):
                placeholder.add_control_input(read)  # ignores duplicates
            added += len(placeholder.control_inputs) - before
    return added
