"""``critical-path``: length of the longest compute path, a lower bound on any makespan.

Requires ``cost``; provides nothing (an analysis: results go to the pass statistics). Runs on the
array view in O(V+E) (:func:`graphir.paths.longest_path`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass
from graphir.paths import longest_path


@register_pass
@dataclasses.dataclass(frozen=True)
class CriticalPath(Pass):
    """Report the critical-path length and total work (seconds) in the statistics.

    Options:
        kind: device kind whose per-kind times to use (default: each node's default time).
    """

    name: ClassVar[str] = "critical-path"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    kind: str = ""

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Compute the longest path over the cost annotation."""
        index = module.graph.index()
        times = np.nan_to_num(index.times(self.kind or None), nan=0.0)
        finish = longest_path(times, index.pred_offsets, index.pred)
        length = float(finish.max()) if len(finish) else 0.0
        return PassResult(False, {"critical-path-s": length, "total-work-s": float(times.sum())})
