"""``critical-path``: length of the longest compute path, a lower bound on any makespan.

Requires ``cost``; provides nothing (an analysis: results go to the pass statistics). Runs on the
array view in O(V+E): ``finish[v] = time[v] + max(finish[u] for u in preds(v))``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, register_pass


def longest_path(times: np.ndarray, pred_offsets: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Earliest finish of each node with unlimited devices and free communication (topological input)."""
    finish = np.zeros(len(times))
    offsets = pred_offsets.tolist()
    pred_list = pred.tolist()
    finish_list = finish.tolist()
    times_list = times.tolist()
    for v in range(len(times_list)):
        ready = 0.0
        for k in range(offsets[v], offsets[v + 1]):
            f = finish_list[pred_list[k]]
            if f > ready:
                ready = f
        finish_list[v] = ready + times_list[v]
    return np.asarray(finish_list)


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
