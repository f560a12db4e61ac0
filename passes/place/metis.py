"""Metis-like placement (Celeritas §6.2.2 baseline): ``place{algo=metis}``.

Celeritas compares against METIS (Karypis and Kumar, 1997): a k-way partition of the operation graph
that minimises the weight of cut edges under a balance limit on vertex weights. This placer hands
the coarse graph to the real METIS library (through ``pymetis``, imported on first use):

* **Vertices**: one per coarse node; the members of a colocation class are contracted into one
  vertex first (a class must land on one device, so METIS must not be able to split it).
* **Vertex weight**: compute time, the mean over the cluster's devices, scaled to integers.
* **Edge weight**: bytes crossing the edge (parallel and opposite edges summed; the graph METIS sees
  is undirected), scaled to integers of at least 1.
* **Target weights** (``tpwgts``): proportional to each device's speed, ``1 / Σ_v t[v, d]``, so a
  heterogeneous cluster gets proportionally larger parts on its faster devices (equal parts on a
  homogeneous one).
* **k-way** (``METIS_PartGraphKway``; ``recursive=true``: recursive bisection), seeded with the
  pipeline seed (``graphir-opt --seed``, ``METIS_OPTION_SEED``): deterministic for one seed.

METIS knows neither execution order nor memory. Order: the framework's list scheduler
(:func:`graphir.passes.place.problem.list_schedule`, rank_u priority) orders each device. Memory is not
checked, as in the paper's baseline (it reports METIS running out of memory on three of four
models); ``simulate`` reports an OOM. Affinity: a vertex METIS put on a device its affinity excludes
moves to the allowed device with the least compute load relative to its speed (ties: lowest number).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from graphir.extras import require
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.problem import PlacementProblem

VERTEX_WEIGHT_SCALE = 10_000_000
"""Default total vertex weight METIS sees (integers; kept well below 2^31 for 32-bit METIS builds)."""

EDGE_WEIGHT_SCALE = 1_000_000
"""Default integer weight of the heaviest edge; every edge weighs at least 1."""


def contract_colocation(problem: PlacementProblem) -> np.ndarray:
    """Vertex of each coarse node: colocation classes become one vertex, numbered by first member.

    Returns:
        ``unit[v]`` for every coarse node ``v``; vertices are ``0..max(unit)``, in order of their
        first (topologically lowest) member.
    """
    key = np.where(problem.colocation >= 0, problem.colocation, np.arange(problem.num_nodes))
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse]


def metis_graph(
    problem: PlacementProblem,
    unit: np.ndarray,
    vertex_scale: int = VERTEX_WEIGHT_SCALE,
    edge_scale: int = EDGE_WEIGHT_SCALE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The undirected weighted graph METIS partitions, in CSR form.

    Args:
        problem: the coarse problem.
        unit: METIS vertex of each coarse node (:func:`contract_colocation`).
        vertex_scale: the total integer vertex weight.
        edge_scale: the integer weight of the heaviest edge.

    Returns:
        ``(xadj, adjncy, eweights, vweights, cut_scale)``: ``vweights`` are integer compute times,
        ``eweights`` integer byte weights (both directions stored), ``cut_scale`` the bytes one
        unit of edge weight stands for.
    """
    num_units = int(unit.max()) + 1 if len(unit) else 0
    mean_time = problem.times.mean(axis=1) if problem.num_devices else np.zeros(problem.num_nodes)
    unit_time = np.bincount(unit, weights=mean_time, minlength=num_units)
    total = float(unit_time.sum())
    if total > 0:
        vweights = np.maximum(1, np.rint(unit_time / total * vertex_scale)).astype(np.int64)
    else:
        vweights = np.ones(num_units, dtype=np.int64)
    src = unit[problem.edge_src]
    dst = unit[problem.edge_dst]
    keep = src != dst
    low = np.minimum(src, dst)[keep]
    high = np.maximum(src, dst)[keep]
    nbytes = problem.edge_bytes[keep]
    pair = low * max(num_units, 1) + high
    pairs, inverse = np.unique(pair, return_inverse=True)
    summed = np.bincount(inverse, weights=nbytes, minlength=len(pairs))
    heaviest = float(summed.max()) if len(summed) else 0.0
    cut_scale = max(1, int(np.ceil(heaviest / edge_scale))) if heaviest > 0 else 1
    weights = np.maximum(1, np.rint(summed / cut_scale)).astype(np.int64)
    a = pairs // max(num_units, 1)
    b = pairs % max(num_units, 1)
    # Both directions, sorted by (vertex, neighbour): deterministic CSR.
    rows = np.concatenate([a, b])
    cols = np.concatenate([b, a])
    both = np.concatenate([weights, weights])
    order = np.lexsort((cols, rows))
    rows, cols, both = rows[order], cols[order], both[order]
    xadj = np.zeros(num_units + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=num_units), out=xadj[1:])
    return xadj, cols.astype(np.int64), both, vweights, cut_scale


def device_shares(problem: PlacementProblem) -> np.ndarray:
    """Target fraction of the total weight per device, proportional to its speed (sums to 1)."""
    work = problem.times.sum(axis=0)
    if problem.num_devices == 0 or not (work > 0).all():
        return np.full(problem.num_devices, 1.0 / max(problem.num_devices, 1))
    speed = 1.0 / work
    return speed / speed.sum()


def partition(
    problem: PlacementProblem,
    unit: np.ndarray,
    seed: int = 0,
    vertex_scale: int = VERTEX_WEIGHT_SCALE,
    edge_scale: int = EDGE_WEIGHT_SCALE,
    recursive: bool = False,
) -> tuple[np.ndarray, int]:
    """METIS partition of the contracted graph: ``(part per vertex, edge cut in weight units)``.

    Args:
        problem: the coarse problem.
        unit: METIS vertex of each coarse node.
        seed: ``METIS_OPTION_SEED``.
        vertex_scale: the total integer vertex weight (:func:`metis_graph`).
        edge_scale: the integer weight of the heaviest edge (:func:`metis_graph`).
        recursive: recursive bisection instead of k-way.

    Raises:
        MissingExtraError: ``pymetis`` (the ``solvers`` extra) is not installed.
    """
    num_units = int(unit.max()) + 1 if len(unit) else 0
    k = problem.num_devices
    if num_units <= k:  # nothing to partition: one vertex per device, in order
        return np.arange(num_units, dtype=np.int64), 0
    pymetis = require("pymetis", "solvers", "place{algo=metis}")
    xadj, adjncy, eweights, vweights, _ = metis_graph(problem, unit, vertex_scale, edge_scale)
    options = pymetis.Options()
    options.seed = seed
    shares = device_shares(problem)
    cut, parts = pymetis.part_graph(
        k,
        pymetis.CSRAdjacency(xadj.tolist(), adjncy.tolist()),
        vweights=vweights.tolist(),
        eweights=eweights.tolist() if len(eweights) else None,
        tpwgts=shares.tolist(),
        recursive=recursive,
        options=options,
    )
    return np.asarray(parts, dtype=np.int64), int(cut)


def fix_affinity(problem: PlacementProblem, device: np.ndarray) -> int:
    """Move nodes off devices their affinity excludes (in place); return how many moved.

    A moved node goes to the allowed device with the least load relative to its target share
    (ties: lowest number); colocation classes share ``allowed`` rows, so they move together.
    """
    bad = ~problem.allowed[np.arange(problem.num_nodes), device]
    if not bad.any():
        return 0
    shares = device_shares(problem)
    load = np.bincount(device[~bad], weights=problem.times[~bad, :].mean(axis=1), minlength=problem.num_devices)
    moved: dict[int, int] = {}
    key = np.where(problem.colocation >= 0, problem.colocation, np.arange(problem.num_nodes))
    for v in np.flatnonzero(bad).tolist():
        root = int(key[v])
        if root not in moved:
            allowed = np.flatnonzero(problem.allowed[v])
            relative = load[allowed] / shares[allowed]
            moved[root] = int(allowed[int(np.argmin(relative))])
        device[v] = moved[root]
        load[device[v]] += problem.times[v].mean()
    return int(bad.sum())


@register_placer
@dataclasses.dataclass(frozen=True)
class Metis(Placer):
    """k-way METIS partition (compute-time vertex weights, byte edge weights); list-scheduled order.

    METIS is seeded with the pipeline seed (``graphir-opt --seed``).

    Options:
        vertex_scale: the total integer vertex weight METIS sees (compute times are scaled to it).
        edge_scale: the integer weight of the heaviest edge (bytes are scaled to it; at least 1 each).
        recursive: recursive bisection (``METIS_PartGraphRecursive``) instead of k-way.
    """

    name: ClassVar[str] = "metis"
    vertex_scale: int = VERTEX_WEIGHT_SCALE
    edge_scale: int = EDGE_WEIGHT_SCALE
    recursive: bool = False

    def __post_init__(self) -> None:
        """Reject scales METIS cannot use when the pipeline is parsed."""
        for key, value in (("vertex-scale", self.vertex_scale), ("edge-scale", self.edge_scale)):
            if not 1 <= value < 2**31:
                raise ValueError(f"{key} must be in [1, 2^31), got {value}")

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Partition the contracted graph, then move nodes off devices their affinity excludes."""
        if problem.num_nodes == 0:
            return Placement(np.zeros(0, dtype=np.int64))
        unit = contract_colocation(problem)
        parts, cut = partition(problem, unit, ctx.seed, self.vertex_scale, self.edge_scale, self.recursive)
        device = parts[unit]
        moved = fix_affinity(problem, device)
        crossing = device[problem.edge_src] != device[problem.edge_dst]
        stats = {
            "metis-vertices": int(unit.max()) + 1,
            "metis-cut-weight": cut,
            "cut-bytes": float(problem.edge_bytes[crossing].sum()),
            "affinity-moves": moved,
        }
        return Placement(device, None, stats)
