"""``profile{mode=cost-table path=FILE}``: costs read from a cost store that ``graphir-tune`` wrote.

The store (:mod:`graphir.passes.profile.cost_store`) holds a mean measured time per (node, device).
A node's cost on a device kind of the module's cluster is the mean of its stored times on the
devices of that kind (in the tuning view of ``graphir-tune`` every device is its own kind, so this is
exactly FastT's per-(op, device) cost). A (node, kind) with no stored time gets, with
``unmeasured=zero`` (default), **cost 0**: FastT's exploration rule ("when our algorithm finds a cost
that it needs ... is not in the cost model, it sets the cost to 0, so that the algorithm prefers to
explore the placement", §4); with ``unmeasured=keep``, the cost the node already had for that kind,
else its analytical roofline time. ``mem`` comes from the analytical model (as in ``mode=tf-run``).

With ``per-device=true`` (default) the module's cluster first becomes the tuning view
(:func:`graphir.passes.profile.cost_store.tuning_cluster`): every device its own kind (``cpu@worker0``),
so that costs are per device as in FastT, and every link the linear fit of the pair's stored
transfers (a pair never measured: cost 0 with ``unmeasured=zero``, else the cluster's link). With
``per-device=false`` the cluster is kept and a kind's cost is the mean over its devices.

The store must belong to the module (same model name: the module name ``graphir-tune`` recorded);
``model=NAME`` overrides the name checked. Statistics: ``nodes``, ``measured-entries`` (node, kind)
pairs with a stored time, ``unmeasured-entries``, ``coverage`` (their share), ``store-updates``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from graphir.annotations import Cost, Mem
from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import PassContext, PassResult, Stat
from graphir.passes.profile.base import ProfileMode, kind_times, register_profile_mode
from graphir.passes.profile.cost_store import CostStore, tuning_cluster
from graphir.passes.profile.roofline import analyze_graph

__all__ = ["CostTable", "annotate_from_store"]

UNMEASURED = ("zero", "keep")


@register_profile_mode
@dataclasses.dataclass(frozen=True)
class CostTable(ProfileMode):
    """Per-(node, device) mean measured times from a ``graphir-tune`` cost store; unknown costs 0 (FastT).

    Options:
        path: the cost store (JSON) to read.
        unmeasured: ``zero`` (FastT's exploration rule) or ``keep`` (the node's cost so far, else analytical).
        model: the model name the store must hold (default: the module's name).
        per_device: switch the module's cluster to the tuning view (one kind per device, fitted links).
    """

    name: ClassVar[str] = "cost-table"
    path: str = ""
    unmeasured: str = "zero"
    model: str = ""
    per_device: bool = True

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Annotate ``cost`` from the store and ``mem`` analytically (see the module docstring)."""
        if not self.path:
            raise PassError("profile{mode=cost-table} needs path=FILE (a cost store written by graphir-tune)")
        if self.unmeasured not in UNMEASURED:
            raise PassError(f"profile{{mode=cost-table}}: unmeasured must be one of {', '.join(UNMEASURED)}")
        store = CostStore.load(Path(self.path), self.model or module.name)
        if self.per_device:
            module.set_cluster(tuning_cluster(module.cluster, store, explore=self.unmeasured == "zero"))
        return PassResult(True, annotate_from_store(module, store, self.unmeasured == "zero"))


def annotate_from_store(module: Module, store: CostStore, explore: bool = True) -> dict[str, Stat]:
    """Write every node's ``cost`` per device kind from ``store`` and its analytical ``mem``; the statistics."""
    cluster = module.cluster
    kinds = list(cluster.kinds)
    devices = {kind: [d.name for d in cluster.devices if d.kind == kind] for kind in kinds}
    index = module.graph.index()
    work = analyze_graph(module.graph)
    analytical = None if explore else kind_times(cluster, work)
    measured = unmeasured = 0
    for i, node in enumerate(index.nodes):
        before = dict(node.cost.times) if node.cost is not None else {}
        times = {}
        for kind in kinds:
            found = [t for d in devices[kind] if (t := store.time(node.name, d)) is not None]
            if found:
                measured += 1
                times[kind] = sum(found) / len(found)
                continue
            unmeasured += 1
            if explore:
                times[kind] = 0.0  # FastT §4: an unknown cost is 0, so the next strategy explores it
            else:
                assert analytical is not None
                times[kind] = before.get(kind, float(analytical[kind][i]))
        node.cost = Cost(tuple((kind, float(f"{t:.12g}")) for kind, t in times.items()))
        node.mem = Mem(int(work.persistent[i]), int(work.activation[i]), int(work.temporary[i]))
    total = measured + unmeasured
    return {
        "nodes": len(index.nodes),
        "measured-entries": measured,
        "unmeasured-entries": unmeasured,
        "coverage": measured / total if total else 1.0,
        "store-updates": store.updates,
    }
