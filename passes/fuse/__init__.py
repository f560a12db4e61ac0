"""``fuse{algo=...}``: CCR-reducing fusion (coarsening) that writes the ``group`` annotation.

**One fusion API.** A fusion algorithm is a frozen dataclass derived from :class:`FusionAlgorithm`,
registered with :func:`register_fusion` in :data:`FUSIONS`, with a ``name``, typed option fields
(the same types as pass options) and a docstring (first line: the summary ``--list-passes`` shows;
``Options:``: one entry per field). ``fuse{algo=cpd-topo window=16}`` resolves ``algo`` first and
then accepts only that algorithm's options besides the pass's own (``kind``), at parse time:
``fuse{algo=cpd-topo target=5}`` is an error with a caret listing cpd-topo's options. Its method
``fuse(problem)`` gets the :class:`FusionProblem` (the current quotient graph and the facts some
algorithms read) and returns a label per coarse node and its statistics.

The built-in algorithms (the work of each in its own module):

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
from typing import ClassVar, TypeVar

import numpy as np

from graphir.cluster import Cluster
from graphir.errors import PassError
from graphir.index import GraphIndex
from graphir.ir import Module
from graphir.links import LinkModel
from graphir.pass_infra import (
    Algorithm,
    AlgorithmRegistry,
    Pass,
    PassContext,
    PassResult,
    Stat,
    pass_options,
    register_algorithm,
    register_pass,
)
from graphir.passes.fuse import topo_order  # noqa: F401 - registers the topo-order analysis pass
from graphir.passes.fuse.batch import fuse_acyclic_batch
from graphir.passes.fuse.colocation import fuse_colocation
from graphir.passes.fuse.common import CoarseGraph, FineGraph, coarsen, compose, write_groups
from graphir.passes.fuse.cpd import fuse_cpd_topo
from graphir.passes.fuse.rules import fuse_rules, load_rules

DEFAULT_ALGO = "cpd-topo"
"""The fusion algorithm ``fuse`` runs when no ``algo`` is given."""

Grouping = tuple[np.ndarray, dict[str, int | float | str]]
"""A fusion algorithm's answer: a label per coarse node (equal labels fuse) and its statistics."""


def _round(value: float) -> float:
    return float(f"{value:.6g}")


@dataclasses.dataclass(frozen=True)
class FusionProblem:
    """What a fusion algorithm coarsens: the current quotient graph, and the facts some algorithms read.

    Attributes:
        graph: the quotient graph (existing groups are nodes) with node times, memory and edge costs.
        start: the coarse node of each fine node, in index order.
        index: the module's graph index (fine nodes in index order), for op types and colocation.
        cluster: the module's cluster.
    """

    graph: CoarseGraph
    start: np.ndarray
    index: GraphIndex
    cluster: Cluster

    def op_types(self) -> list[str | None]:
        """Per coarse node: the op of its single fine node, ``None`` for a group of several."""
        sizes = np.bincount(self.start, minlength=self.graph.num_nodes)
        _, first = np.unique(self.start, return_index=True)
        nodes = self.index.nodes
        return [nodes[f].op if s == 1 else None for f, s in zip(first.tolist(), sizes.tolist(), strict=True)]

    def colocation_classes(self) -> list[list[int]]:
        """The coarse nodes of each ``colocate`` class, classes sorted by name, nodes ascending."""
        classes: dict[str, set[int]] = {}
        for position, node in enumerate(self.index.nodes):
            if node.colocate is not None:
                classes.setdefault(node.colocate, set()).add(int(self.start[position]))
        return [sorted(classes[name]) for name in sorted(classes)]

    def smallest_device_memory(self) -> int:
        """The memory of the cluster's smallest device (bytes)."""
        return min(device.memory for device in self.cluster.devices)


@dataclasses.dataclass(frozen=True)
class FusionAlgorithm(Algorithm):
    """Base of the algorithms of ``fuse{algo=...}`` (frozen dataclasses; fields are their options)."""

    def check(self) -> None:
        """Reject option values the algorithm cannot run with (a :class:`PassError`), before any work."""

    def fuse(self, problem: FusionProblem) -> Grouping:
        """A label per coarse node of ``problem.graph`` whose quotient stays acyclic, and statistics."""
        raise NotImplementedError


FUSIONS: dict[str, type[FusionAlgorithm]] = {}
"""Every fusion algorithm by ``algo`` name."""


@register_pass
@dataclasses.dataclass(frozen=True)
class Fuse(Pass):
    """Coarsen the graph into groups with the chosen algorithm. Requires: cost. Provides: group.

    Options:
        algo: the fusion algorithm, a name from the fusion registry (``register_fusion``); each
            algorithm has its own options, listed with it.
        kind: device kind whose per-kind costs to use (empty: each node's default cost).
    """

    name: ClassVar[str] = "fuse"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("group",)
    algorithms: ClassVar[AlgorithmRegistry | None] = FUSIONS
    algorithm_selector: ClassVar[str] = "algo"
    algorithm_field: ClassVar[str] = "fuser"
    algorithm_kind: ClassVar[str] = "fusion algorithm"
    algo: str = DEFAULT_ALGO
    kind: str = ""
    fuser: FusionAlgorithm | None = None

    def __post_init__(self) -> None:
        """Reject an unknown algorithm when the pipeline is parsed; default the algorithm's options."""
        self.bind_algorithm()

    @classmethod
    def of(cls, algo: str = DEFAULT_ALGO, kind: str = "", **options: object) -> Fuse:
        """``fuse{algo=ALGO key=value ...}`` from Python: ``Fuse.of("acyclic-batch", target=50)``.

        Raises:
            ValueError: unknown algorithm.
            TypeError: an option the algorithm does not have.
        """
        if algo not in FUSIONS:
            raise ValueError(cls.unknown_algorithm(algo))
        fuser = FUSIONS[algo]
        known = {info.field for info in pass_options(fuser).values()}
        for key in options:
            if key not in known:
                own = ", ".join(pass_options(fuser)) or "none"
                raise TypeError(
                    f"option '{key.replace('_', '-')}' does not apply to algo={algo} ({algo} options: {own}; "
                    f"fuse options: {', '.join(pass_options(cls))})"
                )
        return cls(algo, kind, fuser(**options))

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Run the chosen algorithm on the current quotient graph and write the groups."""
        fuser = self.fuser
        assert fuser is not None
        fuser.check()
        index = module.graph.index()
        fine = FineGraph.from_index(index, LinkModel.from_cluster(module.cluster), self.kind or None)
        start = index.quotient().node_group.astype(np.int64)
        before = coarsen(fine, start)
        labels, algo_stats = fuser.fuse(FusionProblem(before, start, index, module.cluster))
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


_FusionT = TypeVar("_FusionT", bound=type[FusionAlgorithm])


def register_fusion(cls: _FusionT) -> _FusionT:
    """Class decorator: make ``cls`` available as ``fuse{algo=cls.name}``.

    Raises:
        TypeError: no name, a name taken by another class, an unsupported option type, or an
            option named like one of ``fuse``'s own (``algo``, ``kind``).
    """
    register_algorithm(Fuse, cls)
    return cls


@register_fusion
@dataclasses.dataclass(frozen=True)
class CpdTopo(FusionAlgorithm):
    """Celeritas Algorithm 1: CPD-TOPO order, then the Optimal_BP dynamic programme (eq. 4-6).

    Options:
        window: exploration range R, the most nodes per cluster (Celeritas: 200).
        mem_cap: memory cap M per cluster; <= 1 is a fraction of the smallest device's memory
            (Celeritas: 0.25), > 1 is bytes.
    """

    name: ClassVar[str] = "cpd-topo"
    window: int = 200
    mem_cap: float = 0.25

    def check(self) -> None:
        """A positive window and memory cap."""
        if self.window < 1:
            raise PassError(f"window must be at least 1, got {self.window}")
        if not self.mem_cap > 0:
            raise PassError(
                f"mem-cap must be positive (a fraction <= 1 of device memory, or bytes), got {self.mem_cap}"
            )

    def fuse(self, problem: FusionProblem) -> Grouping:
        """Clusters of consecutive CPD-TOPO nodes within the window and the memory cap."""
        cap = self.mem_cap
        if cap <= 1:
            cap *= problem.smallest_device_memory()
        return fuse_cpd_topo(problem.graph, self.window, cap)


@register_fusion
@dataclasses.dataclass(frozen=True)
class Rules(FusionAlgorithm):
    """Moirai's graph coarsening by operator fusion (GCOF) with fusion rules.

    Options:
        rules: TOML file of fusion rules (empty: the built-in rules).
    """

    name: ClassVar[str] = "rules"
    rules: str = ""

    def fuse(self, problem: FusionProblem) -> Grouping:
        """Fuse the single-op coarse nodes the rules match."""
        return fuse_rules(problem.graph, problem.op_types(), load_rules(self.rules))


@register_fusion
@dataclasses.dataclass(frozen=True)
class AcyclicBatch(FusionAlgorithm):
    """Pesto's cycle-free batch merging, down to a target node count.

    Options:
        target: stop at this many nodes (Pesto: about 200).
    """

    name: ClassVar[str] = "acyclic-batch"
    target: int = 200

    def check(self) -> None:
        """A target of at least one node."""
        if self.target < 1:
            raise PassError(f"target must be at least 1, got {self.target}")

    def fuse(self, problem: FusionProblem) -> Grouping:
        """Merge rounds of Theorem 3.5 edges until ``target`` nodes remain."""
        return fuse_acyclic_batch(problem.graph, self.target)


@register_fusion
@dataclasses.dataclass(frozen=True)
class Colocation(FusionAlgorithm):
    """One group per ``colocate`` class (nodes TensorFlow must place together)."""

    name: ClassVar[str] = "colocation"

    def fuse(self, problem: FusionProblem) -> Grouping:
        """Join the coarse nodes of each class."""
        return fuse_colocation(problem.graph, problem.colocation_classes())
