"""``schedule``: derive per-device ``order`` from an existing ``device`` placement.

Requires ``cost`` and ``device``; provides ``order``. Runs the list scheduler of
:func:`graphir.passes.place.problem.list_schedule` (ready nodes by decreasing rank_u), so placements made
elsewhere (a placement file, a hand-written `.gir`) can be simulated. Option ``order``
(``enforced`` by default, or ``dynamic``) records the order the placement runs under
(:data:`graphir.simulator.ORDER_METADATA`), which ``simulate`` and the TF lowering follow.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.passes.place.problem import PlacementProblem, coarse_devices, list_schedule, write_placement
from graphir.simulator import record_order


@register_pass
@dataclasses.dataclass(frozen=True)
class Schedule(Pass):
    """Order each device's nodes by list scheduling the given placement.

    Options:
        order: the execution order the placement runs under, recorded on the module: ``enforced``
            (control dependencies along each device's ``order``) or ``dynamic`` (TensorFlow's executor).
    """

    name: ClassVar[str] = "schedule"
    requires: ClassVar[tuple[str, ...]] = ("cost", "device")
    provides: ClassVar[tuple[str, ...]] = ("order",)
    order: Literal["enforced", "dynamic"] = "enforced"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Schedule and write ``order`` (devices stay as they are)."""
        problem = PlacementProblem.from_module(module)
        index = module.graph.index()
        position: dict[str | None, int] = {name: k for k, name in enumerate(problem.device_names)}
        fine_device = np.fromiter(
            (position[node.device] for node in index.nodes), dtype=np.int64, count=index.num_nodes
        )
        device, conflict = coarse_devices(problem.node_group, problem.num_nodes, fine_device)
        if conflict >= 0:
            node = index.nodes[conflict]
            raise PassError(f"node '{node.name}' is not on the device of the rest of its group {node.group}")
        start, finish = list_schedule(problem, device)
        write_placement(module, problem, device, start)
        record_order(module, self.order)
        return PassResult(True, {"estimated-makespan-s": float(finish.max()) if len(finish) else 0.0})
