"""Longest paths through the DAG's array view: the critical path, a lower bound on any makespan.

``finish[v] = time[v] + max(finish[u] for u in preds(v))`` in one topological sweep, O(V+E).
"""

from __future__ import annotations

import numpy as np


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
