"""``merge-constants``: one node per distinct constant value on each device.

A TensorFlow training graph carries thousands of small ``Const`` nodes: a reshape's target shape,
a reduction's axes, a gradient's broadcast shape, the optimizer's hyper-parameters. The layers of a
transformer repeat them verbatim (24 layers of BERT-large: 4,518 ``Const`` nodes in one replica of
``zoo:bert_large_train``, most of them copies of a few hundred values), and every one is an op the
executor dispatches each step, which graphir's cost model charges the per-op overhead of its device
(:data:`graphir.cluster_model.GPU_LAUNCH_OVERHEAD`). Grappler's common-subexpression elimination
would merge them before TensorFlow runs the graph, but graphir lowers with Grappler off so that
every op runs where it was placed (:mod:`graphir.backends.tf.session`); this pass is that merge,
done in the IR, so that the simulator and the TF run see the same graph.

Two constant nodes merge when they have the same op, the same params (the value among them), the
same result types and the same ``device``, ``colocate`` and ``group`` annotations: merging never
creates a transfer between devices or a new edge between fusion groups. So do two **constant
subexpressions**: nodes whose operands are all constants or constant subexpressions of the same
classes (a gradient's ``BroadcastGradientArgs`` of two shape constants, an ``InvertPermutation``
of a constant permutation: what Grappler's constant folding would evaluate before the run), unless
the op draws random numbers or touches a resource (a variable). On a placed graph the merge is
per device; on an unplaced one (every ``device`` absent) it is global, and later placement sees
one node. The node of each class that comes first in its device's recorded order is kept
(unplaced: the first in the graph's topological order), so that no user waits for a copy its
device runs later (under an enforced order that would deadlock); the others' users read it
instead, the others are removed, and each device's recorded order is renumbered without them.
Nodes with control edges or regions, and nodes whose results are graph outputs, are left alone.

Requires nothing; provides nothing. Statistics: ``merged`` (nodes removed) and ``kept`` (distinct
constants that absorbed at least one copy). ``parallelize`` runs it on every candidate it
judges, after placement (:mod:`graphir.passes.parallelize`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import ClassVar

from graphir.ir import Graph, Module, Node, Value
from graphir.ops import bare_op, owns_value
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.regions import has_regions
from graphir.types import DType

__all__ = ["MergeConstants", "merge_constants"]


RANDOM_OPS = frozenset({"TruncatedNormal", "Multinomial", "Bernoulli", "RandomShuffle"})
"""Op types that draw random numbers without ``Random`` in their name: two draws are not one."""


def _derivable(node: Node) -> bool:
    """Whether ``node`` computes its results from its operands alone (no state, no randomness, no effect)."""
    op = bare_op(node.op)
    if "Random" in op or op in RANDOM_OPS or not node.outputs:
        return False
    return not any(v.type.dtype is DType.RESOURCE for v in (*node.inputs, *node.outputs))


def _key(node: Node, classes: dict[Value, Hashable]) -> Hashable | None:
    """The merge class of a constant node or a constant subexpression, or ``None`` when it may not merge.

    ``classes`` maps each value already known constant to its class.
    """
    if node.control_inputs or node.control_users or has_regions(node):
        return None
    if node.inputs:
        if not _derivable(node) or any(v not in classes for v in node.inputs):
            return None
        operands: tuple[Hashable, ...] = tuple(classes[v] for v in node.inputs)
    elif owns_value(node.op):
        operands = ()
    else:
        return None
    try:
        params = tuple(sorted(node.params.items()))
        key = (node.op, params, operands, tuple(v.type for v in node.outputs), node.device, node.colocate, node.group)
        hash(key)
    except TypeError:  # a param without a stable hash (none of the importers makes one): leave it alone
        return None
    return key


def merge_constants(graph: Graph) -> tuple[int, int]:
    """Merge equal constant nodes of ``graph`` (module docstring); return ``(removed, kept)``."""
    classes: dict[Hashable, list[Node]] = {}
    known: dict[Value, Hashable] = {}
    for node in graph.index().nodes:
        key = _key(node, known)
        if key is None:
            continue
        for i, value in enumerate(node.outputs):
            known[value] = (key, i)
        if not any(mine in graph.outputs for mine in node.outputs):
            classes.setdefault(key, []).append(node)
    doomed: list[Node] = []
    kept = 0
    for members in classes.values():
        if len(members) < 2:
            continue
        # The one that runs first on its device (a user of a later copy would wait for it under an
        # enforced order: a deadlock); unplaced, the first in topological order.
        keep = min(members, key=lambda n: -1 if n.order is None else n.order)
        for node in members:
            if node is not keep:
                for mine, theirs in zip(node.outputs, keep.outputs, strict=True):
                    mine.replace_all_uses_with(theirs)
                doomed.append(node)
        kept += 1
    for node in reversed(doomed):
        graph.remove_node(node)
    _renumber(graph, {node.device for node in doomed if node.order is not None})
    return len(doomed), kept


def _renumber(graph: Graph, devices: set[str | None]) -> None:
    """Close the gaps the removed nodes left in the recorded order of ``devices`` (orders are ``0..k-1``)."""
    if not devices:
        return
    sequences: dict[str | None, list[tuple[int, Node]]] = {}
    for node in graph.nodes:
        order = node.order
        if order is not None and node.device in devices:
            sequences.setdefault(node.device, []).append((order, node))
    for sequence in sequences.values():
        sequence.sort(key=lambda item: item[0])
        for position, (_, node) in enumerate(sequence):
            node.order = position


@register_pass
@dataclasses.dataclass(frozen=True)
class MergeConstants(Pass):
    """Merge equal constants and constant subexpressions, per device on a placed graph."""

    name: ClassVar[str] = "merge-constants"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Merge, and log how many nodes went."""
        removed, kept = merge_constants(module.graph)
        ctx.log(f"merge-constants: removed {removed} nodes into {kept}")
        return PassResult(removed > 0, {"merged": removed, "kept": kept})
