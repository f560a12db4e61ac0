"""``place{algo=stages}``: contiguous ranges of layers per device, PipeDream's partition of a training graph.

PipeDream (Narayanan et al., SOSP 2019, §3.1) splits a model's layers into contiguous *stages*,
one per worker, with the dynamic programme

    A(j, m) = min_{i < j} max( A(i, m - 1), 2 C_i, T(i + 1 -> j) )

over the first ``j`` layers on ``m`` workers: the slowest stage bounds a pipeline's throughput, a stage
costs its compute time ``T`` (forward and backward) and the link between two stages carries the
boundary's activations forward and their gradients back (``2 C_i``). This module implements it without
PipeDream's replication (one device per stage; data parallelism is the ``data-parallel`` pass's)
and with each stage's own device, so stages may run on devices of different speeds and links:

* a **layer** is :mod:`graphir.passes.training`'s: its forward ops, the gradients and updates anchored to
  them and the variables (weights, optimizer slots) they read, all on the stage's device;
* ``T(s, i..j)`` is the layers' compute time (forward + backward + optimizer: the ``cost`` annotation
  for the kind of stage ``s``'s device, as the placement problem holds it);
* ``C`` is the link model's transfer time (:class:`graphir.links.LinkModel`) of the bytes crossing the
  boundary between the two stages' devices (values, once per value and consuming layer, produced on
  one side of the boundary and read on the other);
* **memory is a hard limit**: a stage is admissible only when its estimate fits its device:
  ``persistent + copies_s x saved + working``, with ``persistent`` the layers' ``mem.persistent``
  (weights, slots), ``saved`` the bytes of forward results read by backward or optimizer ops
  (activations saved for backward), ``copies_s`` the copies of them alive at once (1 for one batch;
  the pipeline placer passes M for GPipe, ``min(M, S - s)`` for 1F1B with M micro-batches) and
  ``working`` the largest layer's other results (its forward temporaries or its gradients). When no
  partition fits, the one with the smallest largest share of a device's memory is returned (``fits``
  False) and ``simulate`` reports the OOM.

Nodes without a layer (constants, shared step counters) join the stage of their first consumer that
has one (else their producer's, else stage 0); a colocation class goes with its largest member's
(by persistent bytes); a node whose affinity excludes its stage's device goes to its first allowed
device. The placer orders with the list scheduler (:func:`graphir.passes.place.problem.list_schedule`).
On a fused problem a coarse node takes the layer of its first member that has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from graphir.errors import PassError
from graphir.ir import Module
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.training import BACKWARD, FORWARD, OPTIMIZER

__all__ = [
    "LayerCrossings",
    "StagePlan",
    "Stages",
    "accelerators",
    "layer_crossings",
    "partition_problem",
    "split_layers",
    "stage_partition",
]


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """A partition of a training graph's layers into pipeline stages.

    Attributes:
        stage_of_layer: stage of each layer: contiguous, non-decreasing, ``0..stages-1``.
        node_stage: int64 stage per node of ``module.graph.index().nodes`` (every node has one).
        stage_time: compute seconds of each stage (forward + backward + optimizer) on its device.
        stage_bytes: peak bytes estimate of each stage under the given activation copies.
        fits: every stage's estimate fits its device's memory.
    """

    stage_of_layer: list[int]
    node_stage: np.ndarray
    stage_time: list[float]
    stage_bytes: list[int]
    fits: bool


@dataclasses.dataclass(frozen=True)
class _Layers:
    """Per-layer figures of a problem: times per device, bytes, and the bytes crossing each boundary."""

    coarse_layer: np.ndarray  # layer per coarse node, -1 none
    time: np.ndarray  # (num_layers, num_devices) seconds
    persistent: np.ndarray  # bytes per layer
    saved: np.ndarray  # activation bytes saved for backward, per layer
    working: np.ndarray  # the other result bytes of the layer (forward temporaries or gradients)
    cut: np.ndarray  # bytes crossing the boundary after layer i (num_layers - 1)


@dataclasses.dataclass(frozen=True)
class LayerCrossings:
    """Values read in a layer other than the one that makes them: one entry per (value, reading layer).

    The one account of the bytes crossing a boundary between layers, for PipeDream's ``C`` here
    (:meth:`cut`) and for the pipeline screen's sends (:meth:`sent`,
    :func:`graphir.passes.place.pipeline.layer_profile`).

    Attributes:
        value: the value's index (``GraphIndex`` value numbering).
        producer: the layer of the node that makes it.
        reader: a layer that reads it (never ``producer``).
        num_layers: ``L``.
    """

    value: np.ndarray
    producer: np.ndarray
    reader: np.ndarray
    num_layers: int

    def cut(self, value_bytes: np.ndarray) -> np.ndarray:
        """Bytes crossing each boundary ``l | l+1`` (``L - 1`` entries): once per value and reading layer."""
        low, high = np.minimum(self.producer, self.reader), np.maximum(self.producer, self.reader)
        return _span_sums(low, high, value_bytes[self.value], self.num_layers)

    def sent(self, value_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bytes sent forward and back across each boundary, once per value: to its furthest reader each way."""
        count = len(value_bytes)
        furthest = np.full(count, -1, dtype=np.int64)
        np.maximum.at(furthest, self.value, self.reader)
        nearest = np.full(count, self.num_layers, dtype=np.int64)
        np.minimum.at(nearest, self.value, self.reader)
        produced = np.full(count, -1, dtype=np.int64)
        produced[self.value] = self.producer
        ahead = np.flatnonzero((produced >= 0) & (furthest > produced))
        behind = np.flatnonzero((produced >= 0) & (nearest < produced))
        nbytes = np.asarray(value_bytes, dtype=np.float64)  # no copy when it is already
        forward = _span_sums(produced[ahead], furthest[ahead], nbytes[ahead], self.num_layers)
        back = _span_sums(nearest[behind], produced[behind], nbytes[behind], self.num_layers)
        return forward, back


def layer_crossings(
    edge_src: np.ndarray, edge_dst: np.ndarray, edge_value: np.ndarray, layer: np.ndarray, num_layers: int
) -> LayerCrossings:
    """The :class:`LayerCrossings` of the data edges ``edge_src -> edge_dst`` carrying ``edge_value``.

    ``layer`` is per node (-1: none; such edges cross nothing).
    """
    producer, reader = layer[edge_src], layer[edge_dst]
    crossing = (producer >= 0) & (reader >= 0) & (producer != reader)
    width = max(num_layers, 1)
    key, first = np.unique(edge_value[crossing] * width + reader[crossing], return_index=True)
    return LayerCrossings(key // width, producer[crossing][first], key % width, num_layers)


def _span_sums(low: np.ndarray, high: np.ndarray, weight: np.ndarray, num_layers: int) -> np.ndarray:
    """Per boundary ``l | l+1``, the sum of the weights of the spans ``low <= l < high`` (a difference array)."""
    diff = np.zeros(num_layers + 1)
    np.add.at(diff, low, weight)
    np.add.at(diff, high, -weight)
    return np.cumsum(diff)[: max(num_layers - 1, 0)]


def _layer_figures(problem: PlacementProblem) -> _Layers:
    """Sum the problem's per-node figures per layer (module docstring)."""
    training = problem.training
    assert training is not None
    num_layers = training.num_layers
    group = problem.node_group
    fine = problem.fine
    n = problem.num_nodes
    # A coarse node's layer: its first member's that has one.
    layered = np.flatnonzero(training.layer >= 0)
    first = np.full(n, len(group), dtype=np.int64)
    np.minimum.at(first, group[layered], layered)
    coarse_layer = np.where(first < len(group), training.layer[np.minimum(first, len(group) - 1)], -1)
    on = coarse_layer >= 0
    time = np.zeros((num_layers, problem.num_devices))
    np.add.at(time, coarse_layer[on], problem.times[on])
    persistent = np.bincount(coarse_layer[on], weights=problem.persistent[on], minlength=num_layers)
    # Saved activations: forward results read by a backward or optimizer op (each value once).
    data = ~fine.edge_control
    src, dst, val = fine.edge_src[data], fine.edge_dst[data], fine.edge_value[data]
    role = training.role
    saved_edge = (role[src] == FORWARD) & np.isin(role[dst], (BACKWARD, OPTIMIZER))
    saved_values = np.unique(val[saved_edge])
    is_saved = np.zeros(len(fine.value_bytes), dtype=bool)
    is_saved[saved_values] = True
    value_layer = training.layer[fine.value_producer] if len(fine.value_producer) else np.zeros(0, dtype=np.int64)
    value_bytes = fine.value_bytes.astype(np.float64)
    has_layer = value_layer >= 0
    saved = np.bincount(
        value_layer[has_layer & is_saved], weights=value_bytes[has_layer & is_saved], minlength=num_layers
    )
    producer_role = role[fine.value_producer] if len(fine.value_producer) else np.zeros(0, dtype=np.int8)
    other = has_layer & ~is_saved
    forward_rest = np.bincount(
        value_layer[other & (producer_role == FORWARD)],
        weights=value_bytes[other & (producer_role == FORWARD)],
        minlength=num_layers,
    )
    gradient = np.bincount(
        value_layer[other & (producer_role != FORWARD)],
        weights=value_bytes[other & (producer_role != FORWARD)],
        minlength=num_layers,
    )
    working = np.maximum(forward_rest, gradient)
    # Boundary bytes: a value read in another layer crosses every boundary between the two layers
    # (once per value and reading layer).
    cut = layer_crossings(src, dst, val, training.layer, num_layers).cut(value_bytes)
    return _Layers(coarse_layer, time, persistent, saved, working, cut)


def _stage_bytes(layers: _Layers, i: int, j: int, copies: float) -> float:
    """The memory estimate of a stage holding layers ``i..j-1``."""
    return float(
        layers.persistent[i:j].sum() + copies * layers.saved[i:j].sum() + (layers.working[i:j].max() if j > i else 0)
    )


def _dynamic_programme(
    problem: PlacementProblem, layers: _Layers, devices: list[int], copies: list[float], memory_first: bool
) -> list[int] | None:
    """PipeDream's DP on ``problem``'s layers (module docstring): the first layer of each stage, or None.

    ``memory_first``: minimise the largest share of a device's memory instead, with no limit (the
    fallback when no partition fits).
    """
    num_layers = len(layers.persistent)
    comm = np.zeros((len(devices), num_layers + 1))  # 2 C: the boundary before layer k, both ways (PipeDream)
    for s in range(1, len(devices)):
        for k in range(1, num_layers):
            comm[s, k] = 2 * problem.links.transfer_time(float(layers.cut[k - 1]), devices[s - 1], devices[s])
    return split_layers(
        layers.time[:, devices],
        layers.persistent,
        layers.saved,
        layers.working,
        comm=comm,
        copies=copies,
        capacity=[float(problem.capacity[d]) for d in devices],
        memory_first=memory_first,
    )


def split_layers(
    time: np.ndarray,
    persistent: np.ndarray,
    saved: np.ndarray,
    working: np.ndarray,
    *,
    comm: np.ndarray,
    copies: Sequence[float],
    capacity: Sequence[float],
    memory_first: bool = False,
) -> list[int] | None:
    """PipeDream's partitioning DP over arrays: the first layer of each stage, or None when nothing fits.

    ``A(j, s) = min over i < j of max(A(i, s - 1), comm[s, i], T_s(i..j-1))``, the slowest stage of
    the best split of layers ``0..j-1`` into ``s + 1`` stages (Narayanan et al., SOSP 2019, §3.1);
    a stage is admissible when ``persistent + copies[s] x saved + max working`` of its layers fits
    ``capacity[s]``.

    Args:
        time: ``(L, S)`` seconds of each layer on stage ``s``'s device.
        persistent: persistent bytes per layer (weights, optimizer slots).
        saved: bytes per layer its forward saves for backward (one copy).
        working: the layer's other result bytes (its transient set).
        comm: ``(S, L + 1)`` seconds charged for the boundary before layer ``k`` entering stage ``s``.
        copies: per stage, the copies of its saved activations alive at once.
        capacity: per stage, its device's memory bytes.
        memory_first: minimise the largest share of a device's memory instead, with no limit (the
            fallback when no partition fits).
    """
    num_layers, stages = time.shape
    prefix_time = np.vstack([np.zeros(stages), np.cumsum(time, axis=0)])
    prefix_persistent = np.concatenate([[0.0], np.cumsum(persistent)])
    prefix_saved = np.concatenate([[0.0], np.cumsum(saved)])
    inf = np.inf
    best = np.full((stages, num_layers + 1), inf)
    choice = np.full((stages, num_layers + 1), -1, dtype=np.int64)
    # The first stage starts at layer 0: A(j, 0) for every j at once (i = 0 is its only choice).
    j = np.arange(1, num_layers - (stages - 1) + 1)
    peak = np.maximum.accumulate(np.asarray(working, dtype=np.float64))[j - 1]  # max of working[0..j-1]
    need = prefix_persistent[j] - prefix_persistent[0] + copies[0] * (prefix_saved[j] - prefix_saved[0]) + peak
    stage_time = prefix_time[j, 0] - prefix_time[0, 0]
    best[0, j] = need / capacity[0] if memory_first else np.where(need <= capacity[0], stage_time, inf)
    choice[0, j] = 0
    for s in range(1, stages):
        # Only A(L, S - 1) is read of the last stage: one j there.
        first = max(num_layers, s + 1) if s == stages - 1 else s + 1
        for j in range(first, num_layers - (stages - 1 - s) + 1):
            i = np.arange(s, j)  # stage s holds layers i..j-1
            stage_time = prefix_time[j, s] - prefix_time[i, s]
            peak = np.maximum.accumulate(working[i[::-1]])[::-1]  # max of working[i..j-1]
            need = prefix_persistent[j] - prefix_persistent[i] + copies[s] * (prefix_saved[j] - prefix_saved[i]) + peak
            cost = need / capacity[s] if memory_first else np.where(need <= capacity[s], stage_time, inf)
            link = 0.0 if memory_first else comm[s, i]
            cost = np.maximum(np.maximum(best[s - 1, i], link), cost)
            k = int(np.argmin(cost))
            best[s, j] = cost[k]
            choice[s, j] = int(i[k])
    if not np.isfinite(best[stages - 1, num_layers]):
        return None
    starts = [0] * stages
    j = num_layers
    for s in range(stages - 1, -1, -1):
        starts[s] = int(choice[s, j])
        j = starts[s]
    return starts


def accelerators(problem: PlacementProblem) -> list[int]:
    """The cluster's accelerators: devices whose total compute time is within 2x the fastest's, in cluster order."""
    total = problem.times.sum(axis=0)
    fastest = float(total.min()) if problem.num_devices else 0.0
    return [d for d in range(problem.num_devices) if total[d] <= 2 * fastest]


@dataclasses.dataclass(frozen=True)
class _Partition:
    """A stage per coarse node and the plan's figures."""

    coarse_stage: np.ndarray
    device: np.ndarray
    stage_of_layer: list[int]
    stage_time: list[float]
    stage_bytes: list[int]
    fits: bool


def partition_problem(
    problem: PlacementProblem,
    stages: int,
    devices: Sequence[int] | None = None,
    activation_copies: Sequence[float] | None = None,
) -> _Partition:
    """Partition ``problem``'s layers into ``stages`` stages on ``devices`` (module docstring).

    Raises:
        PassError: the problem has no training structure, or the stage count or devices are invalid.
    """
    training = problem.training
    if training is None or training.num_layers == 0:
        raise PassError("place{algo=stages} needs a training graph (forward, gradients and updates; none found)")
    chosen = list(range(stages)) if devices is None else [int(d) for d in devices]
    if stages < 1 or len(chosen) != stages or any(not 0 <= d < problem.num_devices for d in chosen):
        raise PassError(f"stages: {stages} stages need as many devices of the cluster's {problem.num_devices}")
    copies = [1.0] * stages if activation_copies is None else [float(c) for c in activation_copies]
    if len(copies) != stages:
        raise PassError(f"stages: {len(copies)} activation copies given for {stages} stages")
    layers = _layer_figures(problem)
    num_layers = training.num_layers
    used = min(stages, num_layers)  # fewer layers than stages: one layer per stage, the rest idle
    starts = _dynamic_programme(problem, layers, chosen[:used], copies[:used], memory_first=False)
    fits = starts is not None
    if starts is None:
        starts = _dynamic_programme(problem, layers, chosen[:used], copies[:used], memory_first=True)
        assert starts is not None
    bounds = [*starts, num_layers]
    stage_of_layer = np.zeros(num_layers, dtype=np.int64)
    for s in range(used):
        stage_of_layer[bounds[s] : bounds[s + 1]] = s
    coarse_stage = np.where(layers.coarse_layer >= 0, stage_of_layer[np.maximum(layers.coarse_layer, 0)], -1)
    coarse_stage = _assign_rest(problem, coarse_stage)
    device = np.asarray(chosen, dtype=np.int64)[coarse_stage]
    bad = ~problem.allowed[np.arange(problem.num_nodes), device]
    if bad.any():  # affinity: the first allowed device (colocation classes share their rows)
        device[bad] = np.argmax(problem.allowed[bad], axis=1)
    stage_time = [float(layers.time[bounds[s] : bounds[s + 1], chosen[s]].sum()) for s in range(used)]
    stage_bytes = [round(_stage_bytes(layers, bounds[s], bounds[s + 1], copies[s])) for s in range(used)]
    stage_time += [0.0] * (stages - used)
    stage_bytes += [0] * (stages - used)
    return _Partition(coarse_stage, device, stage_of_layer.tolist(), stage_time, stage_bytes, fits)


def _assign_rest(problem: PlacementProblem, stage: np.ndarray) -> np.ndarray:
    """Stages for nodes without a layer (first consumer's, else producer's, else 0); classes kept whole."""
    stage = stage.copy()
    offsets, succ = problem.succ_offsets.tolist(), problem.succ.tolist()
    current = stage.tolist()
    for v in range(problem.num_nodes - 1, -1, -1):
        if current[v] < 0:
            current[v] = next((current[s] for s in succ[offsets[v] : offsets[v + 1]] if current[s] >= 0), -1)
    pred_offsets, pred = problem.pred_offsets.tolist(), problem.pred.tolist()
    for v in range(problem.num_nodes):
        if current[v] < 0:
            current[v] = max((current[p] for p in pred[pred_offsets[v] : pred_offsets[v + 1]]), default=0)
            current[v] = max(current[v], 0)
    stage = np.asarray(current, dtype=np.int64)
    classes = problem.colocation >= 0
    if classes.any():
        members = np.flatnonzero(classes)
        roots = problem.colocation[members]
        # The member with the most persistent bytes (ties: the first) decides its class's stage.
        order = np.lexsort((members, -problem.persistent[members], roots))
        first = np.ones(len(order), dtype=bool)
        first[1:] = roots[order][1:] != roots[order][:-1]
        leader_of_root = dict(zip(roots[order][first].tolist(), members[order][first].tolist(), strict=True))
        stage[members] = stage[[leader_of_root[r] for r in roots.tolist()]]
    return stage


def stage_partition(
    module: Module,
    stages: int,
    *,
    devices: Sequence[int] | None = None,
    activation_copies: Sequence[float] | None = None,
) -> StagePlan:
    """PipeDream's partition of ``module``'s training graph into ``stages`` stages (module docstring).

    Args:
        module: a training graph with ``cost`` annotations (members of a group share its stage).
        stages: the number of stages.
        devices: ``devices[s]`` is the cluster position of stage ``s`` (default ``0..stages-1``).
        activation_copies: copies of stage ``s``'s saved activations alive at once (default 1).

    Raises:
        PassError: not a training graph, no cost, or invalid stages or devices.
    """
    problem = PlacementProblem.from_module(module, training=True)
    part = partition_problem(problem, stages, devices, activation_copies)
    return StagePlan(
        stage_of_layer=part.stage_of_layer,
        node_stage=part.coarse_stage[problem.node_group],
        stage_time=part.stage_time,
        stage_bytes=part.stage_bytes,
        fits=part.fits,
    )


@register_placer
@dataclasses.dataclass(frozen=True)
class Stages(Placer):
    """Contiguous layer ranges per device (PipeDream's partition), each layer's gradients and variables with it.

    Options:
        stages: the number of stages (0: one per accelerator, :func:`accelerators`); stage ``s``
            runs on the ``s``-th of the accelerators in cluster order.
    """

    name: ClassVar[str] = "stages"
    uses_training: ClassVar[bool] = True
    stages: int = 0

    def __post_init__(self) -> None:
        """Reject a negative stage count when the pipeline is parsed."""
        if self.stages < 0:
            raise ValueError(f"stages must be >= 0, got {self.stages}")

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Partition the layers; every node on its stage's device."""
        devices = accelerators(problem)
        count = self.stages or len(devices)
        if count > len(devices):
            devices = list(range(problem.num_devices))
        if count > len(devices):
            raise PassError(f"stages={count}: the cluster has {problem.num_devices} devices")
        part = partition_problem(problem, count, devices[:count])
        stats: dict[str, int | float | str] = {
            "stages.layers": len(part.stage_of_layer),
            "stages.fits": str(part.fits).lower(),
            "stages.time-ms": ",".join(f"{t * 1e3:.3f}" for t in part.stage_time),
            "stages.bytes": ",".join(str(b) for b in part.stage_bytes),
        }
        return Placement(part.device, None, stats)
