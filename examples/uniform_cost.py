r"""A worked custom pass: give every node the same compute time.

Load it into ``graphir-opt`` without installing anything::

    graphir-opt model.onnx --load-plugin=examples/uniform_cost.py \\
        --passes='uniform-cost{seconds=2e-6},critical-path' --stats

``uniform-cost`` declares ``provides = ("cost",)``: it is a provider of ``cost`` like the built-in
``profile``. When a pipeline needs a fact that is missing, the pass manager runs the first
registered provider (built-in passes register before plugins, so ``profile`` wins); name
``uniform-cost`` in the pipeline to use it instead. A package can ship passes the same way through
the ``graphir.passes`` entry-point group.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from graphir.annotations import Cost
from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass


@register_pass
@dataclasses.dataclass(frozen=True)
class UniformCost(Pass):
    """Annotate every node with the same cost. Requires nothing; provides cost.

    Options:
        seconds: the compute time given to each node.
        overwrite: replace costs that are already there.
    """

    name: ClassVar[str] = "uniform-cost"
    provides: ClassVar[tuple[str, ...]] = ("cost",)
    seconds: float = 1e-6
    overwrite: bool = False

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Set ``cost`` on every node (keeping existing ones unless ``overwrite``)."""
        if not (math.isfinite(self.seconds) and self.seconds >= 0):
            raise PassError(f"'seconds' must be a finite time >= 0, got {self.seconds}")
        changed = 0
        for node in module.graph.nodes:
            if node.cost is None or self.overwrite:
                node.cost = Cost.of(self.seconds)
                changed += 1
        return PassResult(changed > 0, {"nodes-costed": changed})
