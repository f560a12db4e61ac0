"""Keep each gradient with its forward op: colocation classes from a training graph's pairing.

A placer that splits a training graph's topological order puts a layer's forward on one device and
its backward on another, and every activation saved for backward crosses devices (issue 37).
TensorFlow's ``colocate_gradients_with_ops`` and Baechi (Jeon et al., SoCC 2020: forward ops are
placed, each gradient follows its forward op) answer with a device pin, and so does this module:
:func:`pair_gradients` adds the pairing of :mod:`graphir.passes.training` to the problem's
``colocation`` classes, which every placer honours (the constraint kernel pins a class to the
device of its first placed member: the forward op, placed first in topological order; METIS
contracts a class into one vertex; the refinement moves whole classes).

**Why a pin, not a fusion.** A fused group is a node of the quotient graph, and a forward op
grouped with its own gradient closes a cycle through the loss (``f -> ... -> loss -> ... -> dY ->
grad(f)``); condensing it (as ``fuse{algo=colocation}`` must) would glue everything between a layer's
forward and its backward into one group. A colocation class is no node of the quotient graph: it
creates no cycle, and the nodes still run in their own order.

**On a coarse problem** (``fuse,place``) a coarse node whose members are all non-forward (gradients,
updates, state) *follows* the one coarse node holding the forward anchors of most of its members
(ties: the lower number); a coarse node holding a forward op leads
its own class and follows nobody, so classes are stars around forward coarse nodes and never chain
from layer to layer. **Room for memory balance:** a follow is taken, heaviest follower first,
only while the class it makes needs (``memory``: the whole-step bytes the kernel checks) at most
:data:`CLASS_SHARE` of the smallest device's memory and its members' affinities still share a
device; a follow that would exceed it is left free.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphir.passes.place.problem import PlacementProblem
from graphir.passes.training import FORWARD
from graphir.unionfind import DisjointSets

__all__ = ["CLASS_SHARE", "pair_gradients"]

CLASS_SHARE = 0.5
"""The most memory a gradient class may need, as a share of the smallest device's memory."""


def pair_gradients(problem: PlacementProblem) -> tuple[PlacementProblem, dict[str, int]]:
    """``problem`` with each gradient (coarse) node colocated with its forward (coarse) node.

    Returns:
        The problem with new ``colocation`` classes (existing classes kept) and ``allowed`` rows
        narrowed to each class's common devices, and statistics: ``pairs`` (follows taken),
        ``pairs-skipped`` (follows left free for memory or affinity). ``problem`` itself when it has
        no :attr:`~PlacementProblem.training` structure.
    """
    training = problem.training
    if training is None:
        return problem, {}
    group = problem.node_group
    n = problem.num_nodes
    is_forward = training.role == FORWARD
    has_forward = np.zeros(n, dtype=bool)
    has_forward[group[is_forward]] = True
    # (follower, leader) coarse nodes of every anchored non-forward fine node; a coarse node
    # holding a forward op leads its own class and follows nobody.
    fine = np.flatnonzero(~is_forward & (training.anchor >= 0))
    follower = group[fine]
    leader = group[training.anchor[fine]]
    keep = (follower != leader) & ~has_forward[follower]
    follower, leader = follower[keep], leader[keep]
    if len(follower) == 0:
        return problem, {"pairs": 0, "pairs-skipped": 0}
    # The leader holding the anchors of most of a follower's members (ties: the lower number).
    unique, votes = np.unique(follower * n + leader, return_counts=True)
    pair_follower, pair_leader = unique // n, unique % n
    order = np.lexsort((pair_leader, -votes, pair_follower))
    first = np.ones(len(order), dtype=bool)
    first[1:] = pair_follower[order][1:] != pair_follower[order][:-1]
    chosen = order[first]
    # Heaviest followers first: they are the likeliest to matter for memory.
    memory = problem.memory.astype(np.float64)
    by_weight = np.lexsort((pair_follower[chosen], -memory[pair_follower[chosen]]))
    follows = list(zip(pair_follower[chosen][by_weight].tolist(), pair_leader[chosen][by_weight].tolist(), strict=True))

    sets: DisjointSets[int] = DisjointSets()
    existing = np.flatnonzero(problem.colocation >= 0).tolist()
    for v in existing:
        sets.union(int(problem.colocation[v]), v)
    class_bytes: dict[int, float] = {}
    class_allowed: dict[int, np.ndarray] = {}
    for v in existing:
        r = sets.find(v)
        if r not in class_bytes:
            class_bytes[r] = 0.0
            class_allowed[r] = np.ones(problem.num_devices, dtype=bool)
        class_bytes[r] += memory[v]
        class_allowed[r] = class_allowed[r] & problem.allowed[v]

    def root(v: int) -> int:
        r = sets.find(v)
        if r not in class_bytes:  # a node in no class yet
            class_bytes[r] = float(memory[v])
            class_allowed[r] = problem.allowed[v].copy()
        return r

    cap = CLASS_SHARE * float(problem.capacity.min()) if problem.num_devices else 0.0
    taken = skipped = 0
    for b, f in follows:
        rb, rf = root(b), root(f)
        if rb == rf:
            continue
        together = class_allowed[rb] & class_allowed[rf]
        size = class_bytes[rb] + class_bytes[rf]
        if size > cap or not together.any():
            skipped += 1
            continue
        for r in (rb, rf):
            del class_bytes[r], class_allowed[r]
        r = sets.union(rb, rf)
        class_bytes[r] = size
        class_allowed[r] = together
        taken += 1
    colocation = np.full(n, -1, dtype=np.int64)
    allowed = problem.allowed.copy()
    roots = {v: sets.find(v) for v in sets}
    size = np.bincount(np.asarray(list(roots.values()), dtype=np.int64), minlength=n)
    for v, r in roots.items():
        if size[r] > 1 or problem.colocation[v] >= 0:  # a node a skipped follow touched stays free
            colocation[v] = r
            allowed[v] = class_allowed[r]
    paired = dataclasses.replace(problem, colocation=colocation, allowed=allowed)
    return paired, {"pairs": taken, "pairs-skipped": skipped}
