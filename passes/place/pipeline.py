"""``place{algo=pipeline stages=S schedule=gpipe|1f1b}``: pipeline placement of a training graph.

The graph is a training step, usually rewritten by ``microbatch{n=M}`` (``M`` copies of forward and
backward on ``G / M`` samples each, gradients summed once, one update) and possibly by
``data-parallel`` as well (``D`` replicas; :func:`graphir.copies.copy_of` names
copy ``(r, m)`` of a node). The placement:

1. **Layers** (:func:`training_layout`): the forward/backward pairing
   (:func:`graphir.passes.training.training_structure`) gives every node a role and a layer. A
   node of copy ``(r, m)`` takes the layer of copy ``(0, 0)``'s node of the same original name, so
   every copy is cut the same way; a shared node (variables, their reads, the gradient sums and the
   optimizer update) takes the layer of the forward op it is anchored to; a node the pairing leaves
   without a layer takes its nearest users' (else its producers').
2. **Stages** (:func:`partition_layers`): contiguous ranges of layers, forward and backward
   together, chosen by PipeDream's partitioning dynamic programme (Narayanan et al., SOSP 2019,
   §3.1) without its stage replication (data parallelism is the outer ``D``): ``A(j, s)``, the
   slowest stage of the best split of layers ``0..j-1`` into ``s`` stages, is
   ``min over i < j of max(A(i, s-1), C(i), T(i, j))`` with ``T(i, j)`` the compute of layers
   ``i..j-1`` per micro-batch (forward + backward) and ``C(i)`` the transfer of the activations and
   gradients crossing boundary ``i``; a stage whose memory (persistent bytes, plus the schedule's
   live micro-batches times the activations one micro-batch saves for backward, plus its largest
   layer's working set) exceeds its device is not allowed.
3. **Devices**: replica ``r``'s stage ``s`` runs on accelerator ``r * S + s`` (cluster order, host
   CPUs excluded when the cluster has accelerators). The variables of stage ``s`` (each variable
   with its reads, slots and update: one resource class) are spread over the ``D`` devices of
   stage ``s`` greedily by bytes (largest first, to the device holding fewest); with mirrored
   variables (``data-parallel{sync=allreduce}``) replica ``r``'s mirror of a variable, and its
   share of the ring all-reduce, run on replica ``r``'s device of that stage. A gradient sum
   whose inputs all come from one device runs there (a replica's accumulation over its
   micro-batches); other shared nodes go with their first user, else their first producer.
4. **Order** (:mod:`graphir.passes.place.pipeline_schedule`): each stage runs its passes in the
   schedule's order; a node of copy ``(r, m)`` is keyed by the start of its pass ``(phase, m)`` in
   the schedule's event model with the layer profile's times, plus (with micro-batches) the time of
   the stage's layers its pass runs before its own (forward: the lower ones; backward: the higher
   ones). Shared nodes
   that feed the copies (variable reads, the split of a feed) come before them, and the others (a
   gradient's sums, the update) where their inputs arrive: the end of the passes that made them
   plus the transfer (the link model; transfers between one pair of devices queue in the order of
   their unqueued arrivals), so a layer's gradient exchange and update overlap the later passes.
   The coarse graph is then ordered by those keys (Kahn's algorithm taking the smallest key among
   ready nodes: :func:`graphir.passes.place.problem.keyed_topological_order`), so the order is
   always a linear extension of the graph and never deadlocks, and each device's sequence is the
   schedule's. The order is recorded as ``enforced``: the simulator and the TF lowering follow it.
   Plain data parallelism (one stage, one micro-batch: no schedule to keep) is recorded ``dynamic``
   instead: under TensorFlow's executor a replica's share of the ring all-reduce runs as its
   chunks arrive, where an enforced position guessed from the event model stalls the backward
   pass whenever a chunk is late; its replicas take the devices in :func:`ring_order`.

Without micro-batches (``M = 1``) this is a stage placement: contiguous layer ranges with each
layer's backward on its forward's device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal

import numpy as np

from graphir.copies import MICROBATCHES_METADATA, REPLICAS_METADATA, copy_of, mirror_of
from graphir.errors import PassError
from graphir.ir import Module, Node
from graphir.passes.place.base import Placement, PlacementContext, PlacementHints, Placer, register_placer
from graphir.passes.place.pipeline_schedule import (
    BACKWARD,
    FORWARD,
    SCHEDULES,
    PipelineTimeline,
    activation_copies,
    pipeline_timeline,
)
from graphir.passes.place.problem import PlacementProblem, keyed_topological_order
from graphir.passes.place.stages import layer_crossings, split_layers
from graphir.types import DType
from graphir.unionfind import DisjointSets

if TYPE_CHECKING:
    from graphir.cluster_model import Cluster
    from graphir.links import LinkModel

__all__ = [
    "LayerProfile",
    "PipelinePlan",
    "TrainingLayout",
    "accelerators",
    "boundary_times",
    "layer_profile",
    "partition_layers",
    "pipeline_plan",
    "ring_order",
    "stage_timeline",
    "training_layout",
]


# --------------------------------------------------------------------------- layers


@dataclasses.dataclass(frozen=True)
class TrainingLayout:
    """Where each node of a (possibly micro-batched) training graph stands.

    Attributes:
        nodes: the graph index's nodes (topological).
        replicas: ``D`` (module metadata; 1 when absent).
        microbatches: ``M`` (module metadata; 1 when absent).
        copy: per node, ``r * M + m`` for a node of copy ``(r, m)``, -1 for a shared node.
        layer: per node, its layer ``0..num_layers-1``.
        phase: per node, :data:`FORWARD` or :data:`BACKWARD` for copy nodes, -1 for shared ones.
        num_layers: number of layers.
    """

    nodes: list[Node]
    replicas: int
    microbatches: int
    copy: np.ndarray
    layer: np.ndarray
    phase: np.ndarray
    num_layers: int


def _copies(module: Module) -> tuple[int, int]:
    replicas = module.metadata.get(REPLICAS_METADATA, 1)
    microbatches = module.metadata.get(MICROBATCHES_METADATA, 1)
    if not isinstance(replicas, int) or replicas < 1 or not isinstance(microbatches, int) or microbatches < 1:
        raise PassError(f"module '{module.name}' has malformed replica or micro-batch metadata")
    return replicas, microbatches


def training_layout(module: Module) -> TrainingLayout:
    """Copies, layers and phases of every node (module docstring, step 1).

    Raises:
        PassError: the module is not a training graph.
    """
    from graphir.passes.training import BACKWARD as ROLE_BACKWARD
    from graphir.passes.training import FORWARD as ROLE_FORWARD
    from graphir.passes.training import training_structure

    structure = training_structure(module)
    if structure is None:
        raise PassError(f"module '{module.name}' is not a training graph: no backward pass found")
    replicas, microbatches = _copies(module)
    nodes = structure.nodes
    n = len(nodes)
    rewritten = replicas * microbatches > 1
    copy = np.full(n, -1, dtype=np.int64)
    originals: list[str] = []
    for u, node in enumerate(nodes):
        if rewritten:
            r, m, original = copy_of(node.name)
            if r >= 0:
                copy[u] = r * microbatches + m
        else:
            original = node.name
            copy[u] = 0 if structure.role[u] in (ROLE_FORWARD, ROLE_BACKWARD) or structure.anchor[u] < 0 else -1
        originals.append(original)
    if not rewritten:  # shared: the state and the optimizer (what data-parallel would share)
        copy[(structure.role != ROLE_FORWARD) & (structure.role != ROLE_BACKWARD) & (structure.anchor >= 0)] = -1

    # Layers of copy 0, renumbered 0..L-1 in the pairing's order (it never decreases along a forward edge).
    raw = structure.layer
    ranked = sorted(set(raw[(copy == 0) & (raw >= 0)].tolist()))
    rank = {layer: k for k, layer in enumerate(ranked)}
    layer_of_original: dict[str, int] = {}
    for u in np.flatnonzero(copy == 0).tolist():
        if raw[u] >= 0:
            layer_of_original[originals[u]] = rank[int(raw[u])]
    layer = np.full(n, -1, dtype=np.int64)
    for u in range(n):
        if copy[u] >= 0:
            layer[u] = layer_of_original.get(originals[u], -1)
    anchor = structure.anchor
    for u in np.flatnonzero(copy < 0).tolist():
        a = int(anchor[u])
        if a >= 0 and layer[a] >= 0:
            layer[u] = layer[a]
        elif a >= 0 and copy[a] >= 0:
            layer[u] = layer_of_original.get(originals[a], -1)
    _fill_layers(module, layer)
    if not ranked:
        layer[:] = 0
    phase = np.where(copy >= 0, np.where(structure.role == ROLE_BACKWARD, BACKWARD, FORWARD), -1)
    return TrainingLayout(nodes, replicas, microbatches, copy, layer, phase.astype(np.int64), max(len(ranked), 1))


def _fill_layers(module: Module, layer: np.ndarray) -> None:
    """Give unlayered nodes their users' smallest layer, else their producers' largest, else 0."""
    index = module.graph.index()
    succ_offsets, succ = index.succ_offsets.tolist(), index.succ.tolist()
    pred_offsets, pred = index.pred_offsets.tolist(), index.pred.tolist()
    values = layer.tolist()
    for u in range(len(values) - 1, -1, -1):
        if values[u] < 0:
            users = [values[succ[k]] for k in range(succ_offsets[u], succ_offsets[u + 1]) if values[succ[k]] >= 0]
            if users:
                values[u] = min(users)
    for u in range(len(values)):
        if values[u] < 0:
            producers = [values[pred[k]] for k in range(pred_offsets[u], pred_offsets[u + 1]) if values[pred[k]] >= 0]
            values[u] = max(producers) if producers else 0
    layer[:] = values


@dataclasses.dataclass(frozen=True)
class LayerProfile:
    """Per-layer times and bytes of one copy (one micro-batch of one replica) and of the shared part.

    Attributes:
        forward, backward: compute seconds of the layer's forward / backward nodes of copy 0.
        update: compute seconds of the layer's shared nodes (reads, gradient sums, update).
        persistent: persistent bytes of the layer (variables, optimizer slots).
        saved: bytes copy 0's forward nodes of the layer produce that a backward node reads.
        working: bytes of all results of the layer's copy-0 nodes (a bound on its transient set).
        send: bytes one copy sends forward across boundary ``l | l+1`` (``L - 1`` entries).
        send_back: bytes one copy sends back across boundary ``l | l+1``.
        forward_fixed, backward_fixed: the part of ``forward`` / ``backward`` that does not shrink with
            the batch: each op's launch (or dispatch) time, at most its cost (the roofline's constant,
            :func:`graphir.passes.profile.roofline.roofline`).
        ops: copy 0's nodes per layer.
    """

    forward: np.ndarray
    backward: np.ndarray
    update: np.ndarray
    persistent: np.ndarray
    saved: np.ndarray
    working: np.ndarray
    send: np.ndarray
    send_back: np.ndarray
    forward_fixed: np.ndarray
    backward_fixed: np.ndarray
    ops: np.ndarray

    @property
    def num_layers(self) -> int:
        """``L``."""
        return len(self.forward)

    def at(self, scale: float, op_overhead: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward seconds per layer of one copy on ``scale`` times the profiled batch.

        Each op keeps its fixed part and its kernel scales with the batch (compute and activation
        traffic in proportion; an estimate for screening, the rewrite's own costs are the
        roofline's at the new shapes); ``op_overhead`` is the executor's per-op cost the simulator
        adds (:attr:`graphir.cluster_model.Device.op_overhead`), split evenly between the phases.
        """
        if scale == 1.0 and op_overhead == 0.0:  # the profile itself, bit for bit
            return self.forward, self.backward
        extra = self.ops * op_overhead / 2
        forward = self.forward_fixed + (self.forward - self.forward_fixed) * scale + extra
        backward = self.backward_fixed + (self.backward - self.backward_fixed) * scale + extra
        return forward, backward


def layer_profile(module: Module, layout: TrainingLayout, kind: str) -> LayerProfile:
    """The :class:`LayerProfile` of ``module`` with compute times of device kind ``kind``.

    Raises:
        PassError: a node has no cost for ``kind`` (run ``profile``).
    """
    index = module.graph.index()
    times = index.times(kind)
    if np.isnan(times).any():
        node = index.nodes[int(np.flatnonzero(np.isnan(times))[0])]
        raise PassError(f"node '{node.name}' has no cost for device kind '{kind}': run 'profile' first")
    count = layout.num_layers
    layer = layout.layer
    first = layout.copy == 0
    shared = layout.copy < 0

    def per_layer(mask: np.ndarray, weights: np.ndarray) -> np.ndarray:
        return np.bincount(layer[mask], weights=weights[mask], minlength=count)

    device = module.cluster.kind_device(kind)
    fixed = np.minimum(times, max(device.launch_overhead, device.kernel_dispatch))
    forward = per_layer(first & (layout.phase == FORWARD), times)
    backward = per_layer(first & (layout.phase == BACKWARD), times)
    forward_fixed = per_layer(first & (layout.phase == FORWARD), fixed)
    backward_fixed = per_layer(first & (layout.phase == BACKWARD), fixed)
    update = per_layer(shared, times)
    persistent = per_layer(np.ones(len(layer), dtype=bool), index.persistent_bytes().astype(np.float64))
    out_bytes = index.out_bytes().astype(np.float64)
    working = per_layer(first, out_bytes)
    ops = np.bincount(layer[first], minlength=count).astype(np.float64)

    # Values of copy 0: saved activations (a forward result a backward node reads) and boundary crossings.
    src, dst, value = index.edge_src, index.edge_dst, index.edge_value
    data = (value >= 0) & first[src] & first[dst]
    src, dst, value = src[data], dst[data], value[data]
    value_bytes = index.value_bytes.astype(np.float64)
    read_back = np.zeros(len(value_bytes), dtype=bool)
    read_back[value[layout.phase[dst] == BACKWARD]] = True
    saved_values = np.unique(value[(layout.phase[src] == FORWARD) & read_back[value]])
    saved = np.bincount(layer[index.value_producer[saved_values]], weights=value_bytes[saved_values], minlength=count)
    send, send_back = layer_crossings(src, dst, value, layer, count).sent(value_bytes)
    return LayerProfile(
        forward=forward,
        backward=backward,
        update=update,
        persistent=persistent,
        saved=saved,
        working=working,
        send=send,
        send_back=send_back,
        forward_fixed=forward_fixed,
        backward_fixed=backward_fixed,
        ops=ops,
    )


# --------------------------------------------------------------------------- stages


def accelerators(cluster: Cluster) -> list[int]:
    """Positions of the devices stages and replicas run on: the accelerators (all devices on a CPU-only cluster)."""
    from graphir.passes.transform.data_parallel import replica_devices

    return replica_devices(cluster)


RING_SEARCH_LIMIT = 9
"""Up to this many devices :func:`ring_order` tries every ring; above it, nearest neighbour first."""


def ring_order(devices: Sequence[int], links: LinkModel) -> list[int]:
    """``devices`` in the order of the ring whose slowest hop is fastest (then whose hops sum least).

    A ring all-reduce moves the same bytes over every hop, so its time is its slowest hop's: on a
    DGX-1 the ring 0-1-2-3-7-6-5-4 keeps every hop on NVLink where cluster order (3 -> 4, 7 -> 0)
    would stage two hops through the host. Up to :data:`RING_SEARCH_LIMIT` devices every ring
    starting at the first device is tried (ties: the lexicographically first); above, each next
    device is the fastest to reach from the last. Times are ``links``' for 64 MiB (pass the
    ``topology`` model: its pairs are the physical paths).
    """
    import itertools

    devices = list(devices)
    if len(devices) <= 2:
        return devices
    nbytes = float(64 << 20)
    hop = {(a, b): links.transfer_time(nbytes, a, b) for a in devices for b in devices if a != b}

    def cost(ring: Sequence[int]) -> tuple[float, float]:
        times = [hop[(ring[k], ring[(k + 1) % len(ring)])] for k in range(len(ring))]
        return max(times), sum(times)

    first, rest = devices[0], devices[1:]
    if len(devices) <= RING_SEARCH_LIMIT:
        return min(([first, *perm] for perm in itertools.permutations(rest)), key=lambda ring: (cost(ring), ring))
    ring = [first]
    left = rest
    while left:
        nxt = min(left, key=lambda d: (hop[(ring[-1], d)], d))
        ring.append(nxt)
        left = [d for d in left if d != nxt]
    return ring


def partition_layers(
    profile: LayerProfile,
    stages: int,
    *,
    copies: Sequence[float],
    capacity: Sequence[float],
    boundary_time: Sequence[float] | np.ndarray = (),
    scale: float = 1.0,
    op_overhead: float = 0.0,
    memory_first: bool = False,
) -> list[int] | None:
    """Contiguous layer ranges for ``stages`` stages (module docstring, step 2): the stage of each layer.

    PipeDream's DP (:func:`graphir.passes.place.stages.split_layers`, the one implementation) on one
    micro-batch's figures: forward + backward time per layer, the boundary's transfers.

    Args:
        profile: the layers, at the profiled batch.
        stages: ``S`` (at most the number of layers; fewer layers give fewer stages).
        copies: per stage, the micro-batches whose saved activations it holds at once.
        capacity: per stage, its device's memory bytes.
        boundary_time: per boundary ``l | l+1``, seconds to send one micro-batch's activations and
            gradients across it (empty: free).
        scale: the micro-batch's share of the profiled batch (:meth:`LayerProfile.at`; activation
            bytes scale by it).
        op_overhead: the executor's per-op seconds (:meth:`LayerProfile.at`).
        memory_first: balance memory shares instead, with no limit (the fallback when nothing fits).

    Returns:
        The stage of each layer (non-decreasing, every stage non-empty), or ``None`` when no split fits.
    """
    count = profile.num_layers
    stages = min(stages, count)
    forward, backward = profile.at(scale, op_overhead)
    comm = np.zeros((stages, count + 1))
    if len(boundary_time):
        comm[1:, 1:count] = np.asarray(boundary_time, dtype=np.float64)[: count - 1]
    starts = split_layers(
        np.repeat((forward + backward)[:, None], stages, axis=1),
        profile.persistent,
        profile.saved * scale,
        profile.working * scale,
        comm=comm,
        copies=copies[:stages],
        capacity=capacity[:stages],
        memory_first=memory_first,
    )
    if starts is None:
        return None
    bounds = [*starts, count]
    return [s for s in range(stages) for _ in range(bounds[s], bounds[s + 1])]


# --------------------------------------------------------------------------- the plan


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    """A pipeline placement: a device and an order key per node, and what it assumed.

    Attributes:
        device: cluster position per node (graph index numbering).
        key: schedule key per node (seconds in the schedule's event model; shared nodes -1 before,
            after the step's end after).
        stage_of_layer: the stage of each layer.
        stages, replicas, microbatches: ``S``, ``D``, ``M``.
        schedule: the schedule's name.
        estimate: the event model's step time (seconds).
        stage_time: per stage, compute seconds of one micro-batch (forward + backward).
    """

    device: np.ndarray
    key: np.ndarray
    stage_of_layer: list[int]
    stages: int
    replicas: int
    microbatches: int
    schedule: str
    estimate: float
    stage_time: list[float]


def boundary_times(profile: LayerProfile, links: LinkModel, devices: Sequence[int], scale: float) -> np.ndarray:
    """Per boundary, forward plus backward transfer time of one micro-batch between two stage devices."""
    if len(devices) < 2 or profile.num_layers < 2:
        return np.zeros(max(profile.num_layers - 1, 0))
    a, b = devices[0], devices[1]
    return np.asarray(
        [
            links.transfer_time(f * scale, a, b) + links.transfer_time(g * scale, b, a)
            for f, g in zip(profile.send.tolist(), profile.send_back.tolist(), strict=True)
        ]
    )


def stage_timeline(
    profile: LayerProfile,
    stage_of_layer: Sequence[int],
    schedule: str,
    microbatches: int,
    links: LinkModel,
    hop: Callable[[int], tuple[int, int]],
    *,
    stages: int = 0,
    scale: float = 1.0,
    op_overhead: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, PipelineTimeline]:
    """Per-stage forward, backward and update seconds of a split, and the schedule's event model of it.

    The one account of a stage split that ``place{algo=pipeline}`` (:func:`pipeline_plan`) and
    ``parallelize``'s screening share. ``hop(s)`` gives the devices ``(from, to)`` of the ``s``-th
    cut, whose boundary activations (forward) and gradients (backward) cross it; ``scale`` and
    ``op_overhead`` as :meth:`LayerProfile.at`. ``stages`` (0: the stages the split uses) sizes the
    per-stage arrays.
    """
    stage = np.asarray(stage_of_layer, dtype=np.int64)
    count = stages or int(stage.max()) + 1
    layer_forward, layer_backward = profile.at(scale, op_overhead)
    forward = np.bincount(stage, weights=layer_forward, minlength=count)
    backward = np.bincount(stage, weights=layer_backward, minlength=count)
    update = np.bincount(stage, weights=profile.update, minlength=count)
    cuts = [layer for layer in range(len(stage) - 1) if stage[layer] != stage[layer + 1]]
    send = [links.transfer_time(profile.send[c] * scale, *hop(s)) for s, c in enumerate(cuts)]
    back = [links.transfer_time(profile.send_back[c] * scale, *hop(s)[::-1]) for s, c in enumerate(cuts)]
    timeline = pipeline_timeline(
        schedule, microbatches, forward.tolist(), backward.tolist(), send=send, send_back=back, update=update
    )
    return forward, backward, update, timeline


def pipeline_plan(module: Module, stages: int = 0, schedule: str = "1f1b") -> PipelinePlan:
    """Devices and order keys of the pipeline placement of ``module`` (module docstring).

    Args:
        module: a profiled training graph, micro-batched or not.
        stages: ``S`` (0: the accelerators divided by the replicas).
        schedule: one of :data:`graphir.passes.place.pipeline_schedule.SCHEDULES`.

    Raises:
        PassError: not a training graph, too few devices, or no split fits memory.
    """
    from graphir.links import LinkModel

    if schedule not in SCHEDULES:
        raise PassError(f"unknown pipeline schedule '{schedule}': expected one of {', '.join(SCHEDULES)}")
    cluster = module.cluster
    layout = training_layout(module)
    replicas, microbatches = layout.replicas, layout.microbatches
    targets = accelerators(cluster)
    if stages <= 0:
        stages = max(len(targets) // replicas, 1)
    if replicas * stages > len(targets):
        raise PassError(
            f"{replicas} replica(s) x {stages} stages need {replicas * stages} devices; "
            f"cluster '{cluster.spec}' has {len(targets)}"
        )
    kind = cluster.devices[targets[0]].kind
    profile = layer_profile(module, layout, kind)
    stages = min(stages, profile.num_layers)
    links = LinkModel.from_cluster(cluster)
    if stages == 1 and replicas > 1:  # the replicas' ring follows the fastest physical hops
        targets = ring_order(targets[:replicas], LinkModel.from_cluster(cluster, "topology")) + targets[replicas:]
    copies = [activation_copies(schedule, s, stages, microbatches) for s in range(stages)]
    capacity = [float(cluster.devices[targets[s]].memory) for s in range(stages)]
    boundary = boundary_times(profile, links, targets[:stages], 1.0)
    stage_of_layer = partition_layers(profile, stages, copies=copies, capacity=capacity, boundary_time=boundary)
    if stage_of_layer is None:  # nothing fits: balance memory shares, the simulator reports the overflow
        stage_of_layer = partition_layers(
            profile, stages, copies=copies, capacity=capacity, boundary_time=boundary, memory_first=True
        )
        assert stage_of_layer is not None
    stage_arr = np.asarray(stage_of_layer, dtype=np.int64)
    f, b, u, timeline = stage_timeline(
        profile, stage_of_layer, schedule, microbatches, links, lambda s: (targets[s], targets[s + 1]), stages=stages
    )

    n = len(layout.nodes)
    node_stage = stage_arr[layout.layer]
    device = np.full(n, -1, dtype=np.int64)
    key = np.zeros(n)
    ready = np.zeros(n)
    # Within a pass, a layer is keyed after the stage's layers before it (forward: lower layers
    # first; backward: higher first). What a pass makes counts as ready when the pass ends: a shared
    # node keyed earlier would stall its device in the enforced order whenever the event model's
    # guess of a layer's end is early.
    # With one micro-batch there are no passes to interleave, and the layer keys only reorder a
    # pass's independent branches: measured worse there (the 160-layer GPT's D2xS2xM1: 495.2 ms
    # against 444.8 ms; zoo gpt_train D2xS2xM1 on celeritas 375.6 against 370.8 ms) and better with
    # micro-batches (D1xS4xM8: 312.2 against 333.0 ms), so they key micro-batched passes only.
    offset = {FORWARD: np.zeros(profile.num_layers), BACKWARD: np.zeros(profile.num_layers)}
    for s in range(stages if microbatches > 1 else 0):
        layers = np.flatnonzero(stage_arr == s)
        offset[FORWARD][layers] = np.cumsum(profile.forward[layers]) - profile.forward[layers]
        reverse = layers[::-1]
        offset[BACKWARD][reverse] = np.cumsum(profile.backward[reverse]) - profile.backward[reverse]
    copy_nodes = np.flatnonzero(layout.copy >= 0)
    for u_ in copy_nodes.tolist():
        c = int(layout.copy[u_])
        r, m = divmod(c, microbatches)
        s = int(node_stage[u_])
        device[u_] = targets[r * stages + s]
        phase, lay = int(layout.phase[u_]), int(layout.layer[u_])
        key[u_] = timeline.start[s][(phase, m)] + offset[phase][lay]
        ready[u_] = timeline.finish[s][(phase, m)]
    _place_shared(module, layout, node_stage, stages, device, key, ready, targets, links)
    return PipelinePlan(
        device=device,
        key=key,
        stage_of_layer=stage_of_layer,
        stages=stages,
        replicas=replicas,
        microbatches=microbatches,
        schedule=schedule,
        estimate=timeline.makespan,
        stage_time=(f + b).tolist(),
    )


def _place_shared(
    module: Module,
    layout: TrainingLayout,
    node_stage: np.ndarray,
    stages: int,
    device: np.ndarray,
    key: np.ndarray,
    ready: np.ndarray,
    targets: Sequence[int],
    links: LinkModel,
) -> None:
    """Devices and keys of the shared nodes (module docstring, steps 3 and 4), in place."""
    nodes = layout.nodes
    position = {node: u for u, node in enumerate(nodes)}
    shared = np.flatnonzero(layout.copy < 0).tolist()
    in_shared = set(shared)
    # Resource classes: shared nodes joined by resource handles and colocate annotations.
    sets: DisjointSets[int] = DisjointSets()
    by_colocate: dict[str, int] = {}
    for u in shared:
        node = nodes[u]
        for value in node.inputs:
            p = value.producer
            if value.type.dtype is DType.RESOURCE and p is not None and position[p] in in_shared:
                sets.union(u, position[p])
        cls = node.colocate
        if cls is not None:
            sets.union(u, by_colocate.setdefault(cls, u))
    classes: dict[int, list[int]] = {}
    for u in shared:
        node = nodes[u]
        if node.colocate is not None or any(v.type.dtype is DType.RESOURCE for v in (*node.inputs, *node.outputs)):
            classes.setdefault(sets.find(u), []).append(u)
    persistent = module.graph.index().persistent_bytes()
    load = np.zeros(len(targets))
    ordered = sorted(classes.values(), key=lambda members: (-int(persistent[members].sum()), members[0]))
    replicas = layout.replicas
    mirror = np.asarray([mirror_of(node.name)[0] for node in nodes], dtype=np.int64)
    for members in ordered:
        stage = int(node_stage[members].min())
        r = int(mirror[members[0]])
        options = [r * stages + stage] if r >= 0 else [q * stages + stage for q in range(replicas)]
        slot = min(options, key=lambda k: (load[k], k))
        load[slot] += float(persistent[members].sum())
        device[members] = targets[slot]
    # A mirror's other nodes (its share of the all-reduce): replica r's device of the node's stage.
    rest = [u for u in shared if device[u] < 0]
    for u in rest:
        if mirror[u] >= 0:
            device[u] = targets[int(mirror[u]) * stages + int(node_stage[u])]
    # Other shared nodes: one device feeding all inputs, else the first user's, else a producer's.
    rest = [u for u in rest if device[u] < 0]
    for u in rest:
        sources = {int(device[position[p]]) for p in nodes[u].predecessors}
        if len(sources) == 1 and -1 not in sources:
            device[u] = sources.pop()
    for u in reversed(rest):
        if device[u] < 0:
            users = [int(device[position[s]]) for s in (*nodes[u].successors, *nodes[u].control_users)]
            placed = [d for d in users if d >= 0]
            if placed:
                device[u] = placed[0]
    for u in rest:
        if device[u] < 0:
            producers = [int(device[position[p]]) for p in (*nodes[u].predecessors, *nodes[u].control_inputs)]
            placed = [d for d in producers if d >= 0]
            device[u] = placed[0] if placed else targets[int(node_stage[u]) % len(targets)]
    # Keys: a shared node that feeds the copies (a variable's read, the split of a feed) runs before
    # them; one downstream of a copy (a gradient's sum, the update, a step of the all-reduce) when its
    # inputs are there: the end of the pass that made them (the schedule's event model), plus their
    # transfer. Transfers between one pair of devices queue behind each other (the all-reduce sends
    # every gradient over the same ring links), so a second pass takes them in the order the first
    # pass's arrivals give and charges each the link's queue.
    copy = layout.copy
    after = np.zeros(len(nodes), dtype=bool)

    def arrival(u: int, free: dict[tuple[int, int], float] | None) -> float:
        """When node u's inputs from the copies (or from shared nodes after them) are there; -1: none.

        ``free``: when each device pair's link is free (transfers queue on it); None: no queues.
        """
        latest = -1.0
        for value in nodes[u].inputs:
            p = value.producer
            q = -1 if p is None else position[p]
            if q < 0 or not (copy[q] >= 0 or after[q]):
                continue
            src, dst = int(device[q]), int(device[u])
            done = ready[q]
            if src != dst:
                seconds = links.transfer_time(float(value.type.nbytes_or(0)), src, dst)
                if free is None:
                    done += seconds
                else:
                    done = free[(src, dst)] = max(done, free.get((src, dst), 0.0)) + seconds
            latest = max(latest, done)
        for p in nodes[u].control_inputs:
            q = position[p]
            if copy[q] >= 0 or after[q]:
                latest = max(latest, ready[q])
        return latest

    naive = np.full(len(nodes), -1.0)
    for u in shared:  # topological
        naive[u] = ready[u] = arrival(u, None)
        after[u] = naive[u] >= 0
        key[u] = naive[u]
    queues: dict[tuple[int, int], float] = {}
    for u in sorted(np.flatnonzero(after).tolist(), key=lambda v: (naive[v], v)):  # producers first
        key[u] = ready[u] = max(arrival(u, queues), 0.0)


# --------------------------------------------------------------------------- the placer


@register_placer
@dataclasses.dataclass(frozen=True)
class Pipeline(Placer):
    """Pipeline placement of a (micro-batched) training graph: contiguous layer stages, a GPipe or 1F1B order.

    Run ``microbatch{n=M}`` first for a pipelined step (``M`` micro-batches); on a graph without
    copies it is a stage placement (each layer's backward with its forward). With ``D`` replicas
    (``data-parallel``), replica ``r``'s stage ``s`` runs on accelerator ``r * S + s``.

    Options:
        stages: number of stages ``S`` (0: the accelerators divided by the replicas).
        schedule: ``1f1b`` (PipeDream-Flush: activations of at most ``S - s`` micro-batches live on
            stage ``s``) or ``gpipe`` (all forwards, then all backwards).
    """

    name: ClassVar[str] = "pipeline"
    stages: int = 0
    schedule: Literal["gpipe", "1f1b"] = "1f1b"

    def __post_init__(self) -> None:
        """Reject a negative stage count or an unknown schedule when the pipeline is parsed."""
        if self.stages < 0:
            raise ValueError(f"stages must be >= 0 (0: all accelerators), got {self.stages}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {'|'.join(SCHEDULES)}, got '{self.schedule}'")

    def hints(self, module: Module) -> PlacementHints:
        """The plan's device and order key of every node."""
        plan = pipeline_plan(module, self.stages, self.schedule)
        names = module.cluster.device_names
        nodes = module.graph.index().nodes
        device = {node.name: names[d] for node, d in zip(nodes, plan.device.tolist(), strict=True)}
        order = {node.name: k for node, k in zip(nodes, plan.key.tolist(), strict=True)}
        stats: dict[str, int | float | str] = {
            "pipeline.stages": plan.stages,
            "pipeline.replicas": plan.replicas,
            "pipeline.microbatches": plan.microbatches,
            "pipeline.schedule": plan.schedule,
            "pipeline.estimate-ms": round(plan.estimate * 1e3, 3),
            "pipeline.layers": len(plan.stage_of_layer),
            "pipeline.stage-layers": ",".join(str(plan.stage_of_layer.count(s)) for s in range(plan.stages)),
            "pipeline.stage-ms": ",".join(f"{t * 1e3:.3f}" for t in plan.stage_time),
        }
        # Plain data parallelism (one stage, one micro-batch) has no schedule to keep: it runs under
        # TensorFlow's executor, which starts a replica's share of the all-reduce as its chunks
        # arrive instead of stalling the backward pass at a guessed position.
        dynamic = plan.stages == 1 and plan.microbatches == 1 and plan.replicas > 1
        stats["pipeline.order"] = "dynamic" if dynamic else "enforced"
        return PlacementHints(device=device, order=order, stats=stats, execution_order="dynamic" if dynamic else None)

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """The hinted devices (affinity and colocation respected), ordered by the hinted keys."""
        device = problem.preferred.copy()
        if (device < 0).any():
            raise PassError("place{algo=pipeline}: a node has no device (a bug of the pipeline plan)")
        bad = ~problem.allowed[np.arange(problem.num_nodes), device]
        if bad.any():
            device[bad] = np.argmax(problem.allowed[bad], axis=1)
        classes = problem.colocation
        if (classes >= 0).any():
            first: dict[int, int] = {}
            for v in np.flatnonzero(classes >= 0).tolist():
                device[v] = first.setdefault(int(classes[v]), int(device[v]))
        priority = problem.priority if problem.priority is not None else np.zeros(problem.num_nodes)
        start = np.empty(problem.num_nodes)
        start[keyed_topological_order(problem, priority)] = np.arange(problem.num_nodes, dtype=np.float64)
        return Placement(device, start)
