"""The link model: how long moving bytes between two devices takes, and which resources it occupies.

It is the one answer to "how long does moving B bytes from device a to device b take, and which
shared resources does it occupy?" in graphir: :class:`LinkModel` serves the simulator, the
placement problem, the list-scheduling placers, Baechi's placers, the ILP, OS-DPOS's critical path
and the coarsening passes (which ask for a representative time before any device is chosen).

Time (the papers' linear model; Celeritas §4.2.1 ``t = k·d + b``, Pesto §3.1 ``T = β0 + β1·data``,
FastT §4 "Cost Models")::

    transfer_time(B, a, b) = latency[a, b] + B / bandwidth[a, b]      (0 when a == b)

Every user gets the same floating-point operations in the same order (:meth:`LinkModel.arrivals_from`
for "data ready at t: when is it on each device?"), so a placer's estimate of a transfer equals the
simulator's to the bit.

Resources: a transfer occupies every resource on its *route* for its whole duration; two transfers
sharing a resource cannot overlap on it (FIFO, in the order they are requested). Today each ordered
device pair is one resource, its *channel* (the papers' "one channel per device pair"), so the
route of ``a -> b`` is that channel alone. The cluster's topology (ports, PCIe switches, NVLink,
NICs) will add resources to routes; the simulator already books every resource of a route.

The representative time used before placement (coarsening priorities, HEFT's and FastT's ranks) is
the mean over every ordered pair of distinct devices: ``mean(latency) + B · mean(1 / bandwidth)``,
exactly the average of the per-pair transfer times, so a heterogeneous cluster is weighted by all
its links. FastT's rank uses the maximum over pairs instead (:meth:`LinkModel.max_transfer_times`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from graphir.cluster import Cluster


class LinkModel:
    """Transfer times and routes between the devices of one cluster, by device position.

    Attributes:
        device_names: devices in cluster order (positions index every array here).
        latency: ``(D, D)`` seconds per transfer; 0 on the diagonal.
        bandwidth: ``(D, D)`` bytes per second; ``inf`` on the diagonal.
        seconds_per_byte: ``(D, D)`` ``1 / bandwidth``; 0 on the diagonal.
        resource_names: one name per shared resource (today: ``"a->b"`` per ordered pair).
        routes: ``routes[a][b]``: the resource ids a transfer ``a -> b`` occupies (empty when a == b).
        mean_latency, mean_seconds_per_byte: the representative pair (see the module docstring).
    """

    __slots__ = (
        "_latency_rows",
        "_bandwidth_rows",
        "bandwidth",
        "device_names",
        "latency",
        "mean_latency",
        "mean_seconds_per_byte",
        "resource_names",
        "routes",
        "seconds_per_byte",
    )

    def __init__(self, device_names: tuple[str, ...], latency: np.ndarray, bandwidth: np.ndarray) -> None:
        count = len(device_names)
        self.device_names = device_names
        self.latency = np.asarray(latency, dtype=np.float64)
        self.bandwidth = np.asarray(bandwidth, dtype=np.float64)
        assert self.latency.shape == (count, count) and self.bandwidth.shape == (count, count)
        per_byte = np.zeros((count, count))
        np.divide(1.0, self.bandwidth, out=per_byte, where=np.isfinite(self.bandwidth))
        np.fill_diagonal(per_byte, 0.0)
        latency_only = self.latency.copy()
        np.fill_diagonal(latency_only, 0.0)
        self.latency = latency_only
        self.seconds_per_byte = per_byte
        self._latency_rows: list[list[float]] = self.latency.tolist()
        self._bandwidth_rows: list[list[float]] = self.bandwidth.tolist()
        names: list[str] = []
        routes: list[list[tuple[int, ...]]] = [[() for _ in range(count)] for _ in range(count)]
        for a in range(count):
            for b in range(count):
                if a != b:
                    routes[a][b] = (len(names),)
                    names.append(f"{device_names[a]}->{device_names[b]}")
        self.resource_names = tuple(names)
        self.routes = routes
        pairs = count * (count - 1)
        if pairs:
            off = ~np.eye(count, dtype=bool)
            self.mean_latency = math.fsum(self.latency[off].tolist()) / pairs
            self.mean_seconds_per_byte = math.fsum(per_byte[off].tolist()) / pairs
        else:
            self.mean_latency = 0.0
            self.mean_seconds_per_byte = 0.0

    @classmethod
    def from_cluster(cls, cluster: Cluster) -> LinkModel:
        """The link model of ``cluster`` (unlisted pairs: latency 0, infinite bandwidth)."""
        count = len(cluster.devices)
        position = {name: k for k, name in enumerate(cluster.device_names)}
        latency = np.zeros((count, count))
        bandwidth = np.full((count, count), np.inf)
        for link in cluster.links:
            a, b = position[link.src], position[link.dst]
            latency[a, b] = link.latency
            bandwidth[a, b] = link.bandwidth
        return cls(cluster.device_names, latency, bandwidth)

    @property
    def num_devices(self) -> int:
        """Number of devices."""
        return len(self.device_names)

    @property
    def num_resources(self) -> int:
        """Number of shared resources routes may occupy."""
        return len(self.resource_names)

    # ---- one transfer -------------------------------------------------------------------------

    def transfer_time(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds to move ``nbytes`` from device ``src`` to ``dst`` alone on its route (0 when equal)."""
        if src == dst:
            return 0.0
        return self._latency_rows[src][dst] + nbytes / self._bandwidth_rows[src][dst]

    def latency_between(self, src: int, dst: int) -> float:
        """The latency of ``src -> dst`` (a control dependency's delay across devices; 0 when equal)."""
        return self._latency_rows[src][dst]

    def arrivals_from(self, ready: float, nbytes: float, src: int) -> list[float]:
        """When ``nbytes`` that are ready on ``src`` at ``ready`` can be on each device (``ready`` on ``src``).

        ``ready + latency[src, d] + nbytes / bandwidth[src, d]`` for every device ``d``: the
        data-ready term of the list schedulers (Celeritas eq. (7), FastT's EST, HEFT, ETF).
        """
        latency = self._latency_rows[src]
        bandwidth = self._bandwidth_rows[src]
        return [ready + latency[d] + nbytes / bandwidth[d] for d in range(len(latency))]

    # ---- arrays -------------------------------------------------------------------------------

    def arrivals(self, ready: np.ndarray, nbytes: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Elementwise :meth:`arrivals_from` over broadcast arrays of ready times, bytes, sources, destinations."""
        return ready + self.latency[src, dst] + nbytes / self.bandwidth[src, dst]

    def pair_transfer_times(self, nbytes: np.ndarray) -> np.ndarray:
        """``(E, P)``: every byte count of ``nbytes`` on every ordered pair of distinct devices."""
        off = ~np.eye(self.num_devices, dtype=bool)
        return self.latency[off][None, :] + np.asarray(nbytes, dtype=np.float64)[:, None] / self.bandwidth[off][None, :]

    def mean_transfer_times(self, nbytes: np.ndarray) -> np.ndarray:
        """The representative time of each byte count: the mean over ordered pairs of distinct devices."""
        return self.mean_latency + np.asarray(nbytes, dtype=np.float64) * self.mean_seconds_per_byte

    def max_transfer_times(self, nbytes: np.ndarray) -> np.ndarray:
        """The slowest pair's time for each byte count (FastT's rank_u); zeros on one device."""
        if self.num_devices < 2:
            return np.zeros(len(nbytes))
        return self.pair_transfer_times(nbytes).max(axis=1)
