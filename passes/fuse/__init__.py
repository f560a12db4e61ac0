"""``fuse``: CCR-reducing fusion (coarsening) that writes the ``group`` annotation.

Four algorithms, chosen with ``algo`` (each in its own module):

- ``cpd-topo`` (:mod:`graphir.passes.fuse.cpd`): Celeritas Algorithm 1, CPD-TOPO order and the
  Optimal_BP dynamic programme (eq. 4-6) with exploration range ``window`` and memory cap
  ``mem-cap`` per cluster;
- ``rules`` (:mod:`graphir.passes.fuse.rules`): Moirai GCOF with the fusion rules of ``rules``
  (a TOML file; empty: the built-in rules);
- ``acyclic-batch`` (:mod:`graphir.passes.fuse.batch`): Pesto batch merging down to ``target``
  nodes;
- ``colocation`` (:mod:`graphir.passes.fuse.colocation`): one group per ``colocate`` class.

Every algorithm runs on the current quotient graph (existing groups are nodes), so fusions
compose; afterwards *every* node carries ``group``, numbered ``0..k-1`` by the first topological
position of a member (the quotient's coarse-node numbers). The statistics report the quotient
size and the CCR (Celeritas eq. 1, with the cluster's representative link, :class:`graphir.links.LinkModel`)
before and after, plus the algorithm's own figures.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import PassError
from graphir.index import GraphIndex
from graphir.ir import Module
from graphir.links import LinkModel
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.fuse import topo_order  # noqa: F401 - registers the topo-order analysis pass
from graphir.passes.fuse.batch import fuse_acyclic_batch
from graphir.passes.fuse.colocation import fuse_colocation
from graphir.passes.fuse.common import CoarseGraph, FineGraph, coarsen, compose, write_groups
from graphir.passes.fuse.cpd import fuse_cpd_topo
from graphir.passes.fuse.rules import fuse_rules, load_rules

Algo = Literal["cpd-topo", "rules", "acyclic-batch", "colocation"]

_OPTIONS_OF: dict[str, frozenset[str]] = {
    "cpd-topo": frozenset({"window", "mem_cap"}),
    "rules": frozenset({"rules"}),
    "acyclic-batch": frozenset({"target"}),
    "colocation": frozenset(),
}
_COMMON = frozenset({"algo", "kind"})


def _round(value: float) -> float:
    return float(f"{value:.6g}")


@register_pass
@dataclasses.dataclass(frozen=True)
class Fuse(Pass):
    """Coarsen the graph into groups. Requires: cost. Provides: group.

    Options:
        algo: the fusion algorithm: ``cpd-topo`` (Celeritas Algorithm 1), ``rules`` (Moirai's fusion
            rules), ``acyclic-batch`` (Pesto's cycle-free batch merging), ``colocation`` (one group per
            ``colocate`` class).
        window: cpd-topo: exploration range R, the most nodes per cluster (Celeritas: 200).
        mem_cap: cpd-topo: memory cap M per cluster; <= 1 is a fraction of the smallest device's
            memory (Celeritas: 0.25), > 1 is bytes.
        rules: rules: TOML file of fusion rules (empty: the built-in rules).
        target: acyclic-batch: stop at this many nodes (Pesto: about 200).
        kind: device kind whose per-kind costs to use (empty: each node's default cost).
    """

    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("group",)
    algo: Algo = "cpd-topo"
    window: int = 200
    mem_cap: float = 0.25
    rules: str = ""
    target: int = 200
    kind: str = ""

    def _check_options(self) -> None:
        allowed = _OPTIONS_OF[self.algo] | _COMMON
        for field in dataclasses.fields(self):
            if field.name not in allowed and getattr(self, field.name) != field.default:
                raise PassError(f"option '{field.name.replace('_', '-')}' does not apply to algo={self.algo}")
        if self.window < 1:
            raise PassError(f"window must be at least 1, got {self.window}")
        if not self.mem_cap > 0:
            raise PassError(
                f"mem-cap must be positive (a fraction <= 1 of device memory, or bytes), got {self.mem_cap}"
            )
        if self.target < 1:
            raise PassError(f"target must be at least 1, got {self.target}")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Run the chosen algorithm on the current quotient graph and write the groups."""
        self._check_options()
        index = module.graph.index()
        fine = FineGraph.from_index(index, LinkModel.from_cluster(module.cluster), self.kind or None)
        start = index.quotient().node_group.astype(np.int64)
        before = coarsen(fine, start)
        labels, algo_stats = self._algorithm(module, index, start, before)
        fine_labels = compose(start, labels)
        after = coarsen(fine, fine_labels)
        assert after.is_acyclic(), f"fuse{{algo={self.algo}}} produced a cyclic quotient graph"
        changed = write_groups(index, fine_labels)
        stats: dict[str, Stat] = {
            "nodes-before": before.num_nodes,
            "nodes-after": after.num_nodes,
            "ccr-before": _round(before.ccr()),
            "ccr-after": _round(after.ccr()),
        }
        stats.update({key: _round(v) if isinstance(v, float) else v for key, v in algo_stats.items()})
        ctx.log(f"fuse{{algo={self.algo}}}: {before.num_nodes} -> {after.num_nodes} nodes")
        return PassResult(changed > 0, stats)

    def _algorithm(
        self, module: Module, index: GraphIndex, start: np.ndarray, graph: CoarseGraph
    ) -> tuple[np.ndarray, dict[str, int | float | str]]:
        if self.algo == "cpd-topo":
            cap = self.mem_cap
            if cap <= 1:
                cap *= min(device.memory for device in module.cluster.devices)
            return fuse_cpd_topo(graph, self.window, cap)
        if self.algo == "acyclic-batch":
            return fuse_acyclic_batch(graph, self.target)
        if self.algo == "rules":
            rules = load_rules(self.rules)
            sizes = np.bincount(start, minlength=graph.num_nodes)
            _, first = np.unique(start, return_index=True)
            op_types = [
                index.nodes[f].op if s == 1 else None for f, s in zip(first.tolist(), sizes.tolist(), strict=True)
            ]
            return fuse_rules(graph, op_types, rules)
        classes: dict[str, set[int]] = {}
        for position, node in enumerate(index.nodes):
            if node.colocate is not None:
                classes.setdefault(node.colocate, set()).add(int(start[position]))
        return fuse_colocation(graph, [sorted(classes[name]) for name in sorted(classes)])
