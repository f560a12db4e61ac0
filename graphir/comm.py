"""Communication times of edges and the communication-to-computation ratio (CCR).

Every link of a :class:`~graphir.cluster.Cluster` follows the papers' linear model
``t = latency + bytes / bandwidth`` (Celeritas §4.2.1, ``t = k·d + b``). Coarsening passes work
before placement, when the two endpoints of an edge have no device yet, so an edge is charged the
*representative* transfer time of the cluster: the mean over every ordered pair of distinct
devices, ``mean(latency) + bytes · mean(1 / bandwidth)`` — exactly the average of the per-pair
transfer times, so a heterogeneous cluster (Moirai's 4-GPU table) is weighted by all its links.
A single-device cluster has no links and every edge costs 0. A control edge (an ordering
dependency without data) costs 0 whatever the cluster.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from graphir.cluster import Cluster


@dataclasses.dataclass(frozen=True)
class CommModel:
    """Representative cost of moving bytes between two devices: ``latency + bytes * seconds_per_byte``.

    Attributes:
        latency: seconds per transfer (mean over ordered device pairs).
        seconds_per_byte: mean of ``1 / bandwidth`` over ordered device pairs.
    """

    latency: float = 0.0
    seconds_per_byte: float = 0.0

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> CommModel:
        """The mean transfer-time model over every ordered pair of distinct devices of ``cluster``."""
        if not cluster.links:
            return cls(0.0, 0.0)
        latency = math.fsum(link.latency for link in cluster.links) / len(cluster.links)
        per_byte = math.fsum(1.0 / link.bandwidth for link in cluster.links) / len(cluster.links)
        return cls(latency, per_byte)

    def edge_times(self, edge_bytes: np.ndarray, edge_data: np.ndarray | None = None) -> np.ndarray:
        """Seconds per edge: ``latency + bytes * seconds_per_byte``; 0 where ``edge_data`` is False.

        Args:
            edge_bytes: bytes carried by each edge.
            edge_data: True for edges that carry data; ``None`` means every edge does.
        """
        times = self.latency + np.asarray(edge_bytes, dtype=np.float64) * self.seconds_per_byte
        if edge_data is not None:
            times = np.where(edge_data, times, 0.0)
        return times


def ccr(edge_comm: np.ndarray, node_times: np.ndarray) -> float:
    """Celeritas eq. (1): ``CCR = sum_{(i,j) in E} c_ij / sum_{i in V} w_i``.

    Returns 0.0 when there is no communication, and ``inf`` when there is communication but no
    computation (every node without cost).
    """
    total_comm = float(np.sum(edge_comm))
    total_work = float(np.nansum(node_times))
    if total_comm == 0.0:
        return 0.0
    if total_work == 0.0:
        return math.inf
    return total_comm / total_work
