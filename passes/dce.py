"""``dce``: dead-code elimination.

Removes every node none of whose results reaches a graph output, then constants left without
uses when ``prune-constants`` is set (graph inputs are part of the signature and stay). Nodes with
no results exist for their side effects (TensorFlow's ``ResourceApplyAdam``, ``AssignVariableOp``,
``NoOp`` groups) and are kept, with everything they depend on; so are ops listed in ``keep``.
Requires nothing; provides nothing.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass


@register_pass
@dataclasses.dataclass(frozen=True)
class DeadCodeElimination(Pass):
    """Remove nodes that do not contribute to any graph output.

    Options:
        keep: op names never removed (ops with side effects, such as ``tf.AssignVariableOp``).
        prune_constants: also drop constants that end up unused.
    """

    name: ClassVar[str] = "dce"
    keep: tuple[str, ...] = ()
    prune_constants: bool = True

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Mark live nodes backwards from the outputs on the array view, then delete the rest."""
        graph = module.graph
        index = graph.index()
        live = np.zeros(index.num_nodes, dtype=bool)
        keep = set(self.keep)
        for u, node in enumerate(index.nodes):
            if node.op in keep or not node.outputs:
                live[u] = True
        for value in graph.outputs:
            if value.producer is not None:
                live[index.position(value.producer)] = True
        # Reverse topological sweep: a node is live when any successor is live.
        pred_offsets, pred = index.pred_offsets, index.pred
        for v in range(index.num_nodes - 1, -1, -1):
            if live[v]:
                live[pred[pred_offsets[v] : pred_offsets[v + 1]]] = True
        dead = [index.nodes[u] for u in np.flatnonzero(~live)[::-1].tolist()]
        for node in dead:
            graph.remove_node(node)
        pruned = 0
        if self.prune_constants:
            for value in [v for v in graph.constants if not v.uses and v not in graph.outputs]:
                graph.remove_value(value)
                pruned += 1
        ctx.log(f"dce: removed {len(dead)} nodes and {pruned} constants")
        return PassResult(bool(dead or pruned), {"nodes-removed": len(dead), "constants-removed": pruned})
