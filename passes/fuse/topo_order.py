"""``topo-order``: an analysis that reports a topological order and the edges it cuts.

Celeritas §4.2.2 compares orders by placing the nodes sequentially on devices: the first
``1/parts`` of the order on the first device, and so on. This pass computes ``order`` (m-topo,
dfs-topo or cpd-topo, :mod:`graphir.passes.orders`) on the current quotient graph, splits it into
``parts`` contiguous runs of equal node count (the first runs take the remainder), and reports the
number of edges and the communication time between different runs. It changes nothing.
Node times default to 0 for nodes without ``cost`` (only ``cpd-topo`` reads them).

Statistics: ``order`` (the node names, or ``group N`` for a multi-node group; only for at most 64
coarse nodes), ``cut-edges``, ``cut-comm-s``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import PassError
from graphir.ir import Module
from graphir.links import LinkModel
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.fuse.common import FineGraph, coarsen
from graphir.passes.orders import cpd_topo, dfs_topo, m_topo, positions

_MAX_PRINTED = 64


@register_pass
@dataclasses.dataclass(frozen=True)
class TopoOrder(Pass):
    """Report a topological order of the quotient graph and the edges cut by a sequential split.

    Requires nothing; provides nothing.

    Options:
        order: ``m-topo`` (Baechi: Kahn's algorithm, FIFO queue), ``dfs-topo`` (Celeritas: ready children
            first) or ``cpd-topo`` (Celeritas's critical-path-driven order, eq. 2-3).
        parts: number of devices the order is split over.
        kind: device kind whose per-kind costs to use (empty: each node's default cost).
    """

    name: ClassVar[str] = "topo-order"
    order: Literal["m-topo", "dfs-topo", "cpd-topo"] = "cpd-topo"
    parts: int = 2
    kind: str = ""

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Compute the order and the cut."""
        if self.parts < 1:
            raise PassError(f"parts must be at least 1, got {self.parts}")
        index = module.graph.index()
        fine = FineGraph.from_index(index, LinkModel.from_cluster(module.cluster), self.kind or None)
        quotient = index.quotient()
        graph = coarsen(fine, quotient.node_group.astype(np.int64))
        n = graph.num_nodes
        if self.order == "m-topo":
            order = m_topo(n, graph.succ_offsets, graph.succ)
        elif self.order == "dfs-topo":
            order = dfs_topo(n, graph.succ_offsets, graph.succ)
        else:
            order = cpd_topo(n, graph.succ_offsets, graph.succ, graph.node_time, graph.succ_comm)
        part = positions(order) * self.parts // max(n, 1)
        cut = part[graph.edge_src] != part[graph.edge_dst]
        stats: dict[str, Stat] = {}
        if n <= _MAX_PRINTED:
            members = quotient.members()
            names = [
                index.nodes[members[g][0]].name if len(members[g]) == 1 else f"group {int(quotient.group_ids[g])}"
                for g in order.tolist()
            ]
            stats["order"] = " ".join(names)
        stats["cut-edges"] = int(np.sum(cut))
        stats["cut-comm-s"] = float(f"{float(np.sum(graph.edge_comm[cut])):.6g}")
        return PassResult(False, stats)
