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
sharing a resource cannot overlap on it: they serialise FIFO, in the order they are requested (a
transfer starts when every resource of its route is free). Serialising rather than sharing bandwidth
is a choice: it keeps the simulator an O(log) event per transfer and matches TensorFlow, which copies
on one device-to-device stream per GPU, one tensor after the other. The route depends on the
congestion rule (:data:`CONGESTION_RULES`), so that each paper's model can be run as published:

* ``pair`` (the default of :class:`LinkModel`, which the placers plan with; Pesto §3.2.2 and FastT:
  one channel per ordered device pair): the route of
  ``a -> b`` is the channel ``"a->b"``; transfers between different pairs never contend.
* ``port`` (Moirai eq. (8): "two communication operations should not be processing simultaneously"
  when both leave, or both enter, device k): a device sends one transfer and receives one transfer
  at a time: the route is ``("a.out", "b.in")``.
* ``task`` (Celeritas §6.1: "we treat the data transmission process as an additional task ... on
  the devices which need to send or receive data"): the transfer occupies the compute of both
  devices, ``("a.compute", "b.compute")``; the simulator books the same resources for the nodes it
  runs, so a transfer blocks compute on both ends and waits for the ops running there.
* ``topology`` (the physical interconnect, :class:`graphir.cluster_model.Topology`): the sender's
  egress port, every directed wire of the physical route (NVLink, PCIe links to switches and host
  bridges, the socket interconnect, NIC and network links) and the receiver's ingress port; its time
  is the route's own numbers (narrowest wire, summed latencies), not the pair's channel. A cluster
  without topology data gets ``("a.out", "a->b", "b.in")`` with the channel's numbers. A topology
  with ``copy_streams`` (:attr:`graphir.cluster_model.Topology.copy_streams`, TensorFlow's GPU copy
  streams) replaces the two ports by the one stream TensorFlow issues the copy on: host to GPU
  ``("b.h2d", wires...)`` (the receiver's host-to-device stream), GPU to host ``("a.d2h", wires...)``
  (the sender's device-to-host stream), GPU to GPU ``("a.d2d", wires...)`` (the sender's
  device-to-device stream); the hosts are the cluster's ``cpu`` devices (two hosts: their ports).

**Latency and occupancy** (:meth:`LinkModel.book`). Under the papers' rules a transfer holds its
route for its whole time ``latency + bytes / bandwidth``, as each paper's model does (a
communication op, a channel busy for ``T = β0 + β1·data``, a transmission task). Under
``topology`` only the **occupancy** ``bytes / bandwidth`` holds the route: the latency is a delay
in flight that holds no shared resource, so the next transfer on the route starts as soon as the
previous one's bytes are on the wire (a wire carries back-to-back messages; the latency of each is
propagation, rendezvous and handshakes). Where the cluster gives a measured
:class:`~graphir.cluster_model.TransferCpu` (the rig: gRPC serialises on the worker's one core),
``topology`` also charges the transfer's compute time to both ends, booked on each device's compute
resource, which its nodes also book (FIFO, as under ``task``). Sending, the wire and receiving
are pipelined (gRPC streams the tensor in chunks), so they overlap::

    begin    = max(requested, every route resource free, sender's compute free)
    route    busy [begin, begin + occupancy]
    sender   busy [begin, begin + send_cpu(B)]
    receiver busy [r, r + recv_cpu(B)]  with  r = max(begin + latency, receiver's compute free)
    arrival  = max(begin + max(occupancy, send_cpu(B)) + latency, r + recv_cpu(B))

so a tensor whose receiver is running a long kernel waits for it. A cluster whose
:class:`~graphir.cluster_model.TransferService` says ``recv_cpu_preempts`` (the rig) instead
takes the receive CPU from whatever runs on the receiver's core when the bytes arrive::

    receiver not booked; r = begin + latency; arrival = max(delivered, r + recv_cpu(B))

and the simulator stretches the node running on the receiver at ``r`` by ``recv_cpu(B)``
(:attr:`LinkModel.recv_cpu_preempts`). Its ``serve_when_idle`` is the simulator's too
(:attr:`LinkModel.serve_when_idle`: when a device's tensors are requested, not how long they take).
Alone on its route a transfer takes
``latency + max(bytes / bandwidth, send_cpu, recv_cpu)`` (:meth:`LinkModel.transfer_time`), which
is ``latency + bytes / bandwidth`` without CPU charges.

**Transfer lanes** (``topology`` with a ``transfer_cpu`` on a cluster whose
:class:`~graphir.cluster_model.TransferService` says ``transfer_lanes``; off by default and on
every paper preset). On the rig a transfer is CPU on both ends: gRPC's threads run on each
worker's one pinned core and the loopback "wire" is no resource of its own. The link's
``bandwidth`` is fitted from one tensor in flight, whose two ends mostly run one after the other;
with many tensors in flight the two cores work on different tensors at once, so holding the route
for ``bytes / bandwidth`` per tensor charges a stream the lone-transfer rate (lstm-train's reads:
simulated at 1.67 GB/s, streamed at 2.0-2.7 GB/s on the rig, ``benchmarks/results/ruler-lstm.md``).
Instead, each device has one **lane**, its core's transfer CPU, which its sends and its receives
both take, one at a time (a core cannot send and receive at once: measured, 4 MiB tensors 50 at a
time both ways take 4.0 ms per pair against 1.9 ms one way, ``benchmarks/results/ruler-stream.md``).
A booking takes the lane's first idle slot that holds it (:class:`Lane`), so a send may run before
a receive booked for later::

    begin    = the first slot of the sender's lane at or after max(requested, sender's compute free)
    sender   compute and lane busy [begin, begin + send_cpu(B)]
    receiver lane busy [r, r + recv_cpu(B)]  with  r its lane's first slot at or after begin + latency
    arrival  = max(begin + latency + max(bytes / bandwidth, send_cpu(B)), r + recv_cpu(B))

The route holds nothing. Alone, a transfer takes ``latency + max(bytes / bandwidth, send_cpu,
recv_cpu)``, its :meth:`LinkModel.transfer_time` as without lanes; back to back one way, one arrives
per ``max(send_cpu, recv_cpu)`` (the slower end); both ways at once, each core pays its sends plus
its receives. With ``recv_cpu_preempts`` the receive CPU stretches the node running on the
receiver at ``r`` (:attr:`LinkModel.receive_start`), when the lane, not the latency, lets it run.

The cluster's ``transfer_overhead`` (seconds per transfer, the runtime's send/recv cost) is added to
every pair's latency, for every rule.

The representative time used before placement (coarsening priorities, HEFT's and FastT's ranks) is
the mean over every ordered pair of distinct devices: ``mean(latency) + B · mean(1 / bandwidth)``,
exactly the average of the per-pair transfer times, so a heterogeneous cluster is weighted by all
its links. FastT's rank uses the maximum over pairs instead (:meth:`LinkModel.max_transfer_times`).
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from graphir.cluster import Cluster
    from graphir.cluster_model import TransferCpu, TransferService


CONGESTION_RULES = ("pair", "port", "task", "topology")
"""The congestion rules, in the order of the module docstring.

``pair`` is the link model's default, ``topology`` the simulator's.
"""

OCCUPANCY_RULES = frozenset({"topology"})
"""The rules under which only ``bytes / bandwidth`` holds the route (the latency holds nothing)."""


def _route_names(
    congestion: str,
    names: tuple[str, ...],
    a: int,
    b: int,
    physical_routes: list[list[tuple[str, ...]]] | None,
    stream_hosts: frozenset[str] | None = None,
) -> tuple[str, ...]:
    """The resource names a transfer from device ``a`` to ``b`` occupies under ``congestion``.

    ``stream_hosts``: under ``topology`` with TensorFlow's copy streams, the host devices (see the
    module docstring); None: device ports.
    """
    src, dst = names[a], names[b]
    if congestion == "pair":
        return (f"{src}->{dst}",)
    if congestion == "port":
        return (f"{src}.out", f"{dst}.in")
    if congestion == "task":
        return (f"{src}.compute", f"{dst}.compute")
    if physical_routes is None:
        return (f"{src}.out", f"{src}->{dst}", f"{dst}.in")
    hops = physical_routes[a][b]
    wires = tuple(f"{x}->{y}" for x, y in zip(hops, hops[1:], strict=False))
    if stream_hosts is not None:
        from_host, to_host = src in stream_hosts, dst in stream_hosts
        if from_host and not to_host:
            return (f"{dst}.h2d", *wires)
        if to_host and not from_host:
            return (f"{src}.d2h", *wires)
        if not from_host:
            return (f"{src}.d2d", *wires)
    return (f"{src}.out", *wires, f"{dst}.in")


class Lane:
    """The busy intervals of one device's transfer lane (module docstring, "Transfer lanes").

    Sorted, disjoint ``[start, end)`` intervals. A booking takes the first idle slot at or after
    its ready time that holds it (a send may run before a receive booked later in time, as a core
    runs whichever gRPC work has arrived). Bookings are requested at non-decreasing times ``now``
    (the simulator's event order), so the intervals that end before a request are dropped and the
    search stays short.
    """

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def take(self, ready: float, seconds: float, now: float) -> float:
        """Book ``seconds`` at the first idle slot at or after ``ready`` (>= ``now``); return its start.

        ``now``: when the booking is requested; the intervals that end by then are dropped.
        """
        starts, ends = self.starts, self.ends
        over = bisect.bisect_right(ends, now)
        if over > 64:  # over before this request: no later request (at or after now) reaches them
            del starts[:over], ends[:over]
        i = bisect.bisect_right(ends, ready)
        t = ready
        count = len(starts)
        while i < count and t + seconds > starts[i]:
            if ends[i] > t:
                t = ends[i]
            i += 1
        if seconds > 0.0:
            starts.insert(i, t)
            ends.insert(i, t + seconds)
        return t


class LinkModel:
    """Transfer times and routes between the devices of one cluster, by device position.

    Attributes:
        device_names: devices in cluster order (positions index every array here).
        latency: ``(D, D)`` seconds per transfer; 0 on the diagonal.
        bandwidth: ``(D, D)`` bytes per second; ``inf`` on the diagonal.
        seconds_per_byte: ``(D, D)`` ``1 / bandwidth``; 0 on the diagonal.
        congestion: the congestion rule the routes follow (:data:`CONGESTION_RULES`).
        resource_names: one name per shared resource (``"a->b"`` channels or wires, ``"a.out"`` and
            ``"a.in"`` ports, ``"a.compute"``), ids in order of first use.
        routes: ``routes[a][b]``: the resource ids a transfer ``a -> b`` occupies (empty when a == b).
        compute_resource: per device, the resource id of its compute under ``task`` or when a
            transfer charges compute time (which the simulator also books for the device's nodes);
            -1 otherwise.
        holds_latency: whether the latency holds the route too (the papers' rules) or only the
            occupancy ``bytes / bandwidth`` does (``topology``).
        transfer_cpu: the compute time a transfer charges its ends (``topology`` on a cluster that
            measured it), else None.
        serve_when_idle: ``topology`` on a cluster whose runtime answers a peer's tensor request
            only when the sender's compute thread has no ready work
            (:class:`~graphir.cluster_model.TransferService`; the simulator applies it).
        control_sends: ``topology`` on a cluster whose runtime sends a control dependency between
            devices as an empty tensor (the simulator books it like a transfer of 0 bytes).
        send_when_idle: ``topology`` on a cluster whose runtime sends a tensor made under the
            ``enforced`` order at its device's next idle moment (the simulator applies it).
        recv_cpu_preempts: ``topology`` with a ``transfer_cpu`` on a cluster whose receive CPU is
            taken from what runs on the receiver's core: :meth:`book` does not queue it on the
            receiver's compute, the simulator stretches the node running there.
        lanes: per device, its transfer lane (``topology`` with a ``transfer_cpu`` on a cluster
            whose runtime says ``transfer_lanes``; module docstring), else None. The lanes keep the
            bookings :meth:`book` makes: one link model per simulation.
        receive_start: with a ``transfer_cpu``, when the receive CPU of the last transfer
            :meth:`book` queued starts (one latency after it began, or later when the receiver's
            lane or compute is busy): where the simulator's ``recv_cpu_preempts`` charge lands.
        mean_latency, mean_seconds_per_byte: the representative pair (see the module docstring).
    """

    __slots__ = (
        "_latency_rows",
        "_bandwidth_rows",
        "bandwidth",
        "compute_resource",
        "congestion",
        "holds_latency",
        "transfer_cpu",
        "device_names",
        "latency",
        "mean_latency",
        "mean_seconds_per_byte",
        "resource_names",
        "recv_cpu_preempts",
        "routes",
        "seconds_per_byte",
        "serve_when_idle",
        "control_sends",
        "send_when_idle",
        "lanes",
        "receive_start",
    )

    def __init__(
        self,
        device_names: tuple[str, ...],
        latency: np.ndarray,
        bandwidth: np.ndarray,
        *,
        congestion: str = "pair",
        physical_routes: list[list[tuple[str, ...]]] | None = None,
        transfer_cpu: TransferCpu | None = None,
        service: TransferService | None = None,
        stream_hosts: frozenset[str] | None = None,
    ) -> None:
        if congestion not in CONGESTION_RULES:
            raise ValueError(f"unknown congestion rule '{congestion}': expected one of {', '.join(CONGESTION_RULES)}")
        count = len(device_names)
        self.device_names = device_names
        self.congestion = congestion
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
        ids: dict[str, int] = {}
        routes: list[list[tuple[int, ...]]] = [[() for _ in range(count)] for _ in range(count)]
        for a in range(count):
            for b in range(count):
                if a != b:
                    names = _route_names(congestion, device_names, a, b, physical_routes, stream_hosts)
                    routes[a][b] = tuple(ids.setdefault(name, len(ids)) for name in names)
        self.holds_latency = congestion not in OCCUPANCY_RULES
        self.transfer_cpu = transfer_cpu if congestion in OCCUPANCY_RULES and transfer_cpu is not None else None
        if self.transfer_cpu is not None and not self.transfer_cpu.charged:
            self.transfer_cpu = None
        occupancy_rule = congestion in OCCUPANCY_RULES
        self.serve_when_idle = bool(occupancy_rule and service is not None and service.serve_when_idle)
        self.control_sends = bool(occupancy_rule and service is not None and service.control_sends)
        self.send_when_idle = bool(occupancy_rule and service is not None and service.send_when_idle)
        self.recv_cpu_preempts = bool(
            self.transfer_cpu is not None and service is not None and service.recv_cpu_preempts
        )
        self.compute_resource: list[int] = [-1] * count
        if congestion == "task" or self.transfer_cpu is not None:
            self.compute_resource = [ids.setdefault(f"{name}.compute", len(ids)) for name in device_names]
        self.lanes: list[Lane] | None = None
        if self.transfer_cpu is not None and service is not None and service.transfer_lanes:
            self.lanes = [Lane() for _ in device_names]
        self.receive_start = 0.0
        self.resource_names = tuple(ids)
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
    def from_cluster(cls, cluster: Cluster, congestion: str = "pair") -> LinkModel:
        """The link model of ``cluster`` under a congestion rule (unlisted pairs: latency 0, infinite bandwidth).

        Under ``topology`` with a cluster topology, each pair's numbers and route are its physical
        path's; otherwise the pair's link, and a topology with ``copy_streams`` queues each
        transfer on TensorFlow's copy stream instead of the device ports (the module docstring).
        ``transfer_overhead`` is added to every pair's latency; the cluster's ``transfer_cpu`` is
        charged under ``topology``.
        """
        count = len(cluster.devices)
        position = {name: k for k, name in enumerate(cluster.device_names)}
        latency = np.zeros((count, count))
        bandwidth = np.full((count, count), np.inf)
        physical = congestion == "topology" and cluster.topology is not None
        physical_routes: list[list[tuple[str, ...]]] | None = None
        if physical:
            assert cluster.topology is not None
            physical_routes = [[() for _ in range(count)] for _ in range(count)]
        for link in cluster.topology.paths if physical and cluster.topology is not None else cluster.links:
            a, b = position[link.src], position[link.dst]
            latency[a, b] = link.latency + cluster.transfer_overhead
            bandwidth[a, b] = link.bandwidth
            if physical_routes is not None:
                physical_routes[a][b] = link.route
        stream_hosts = None
        if physical and cluster.topology is not None and cluster.topology.copy_streams:
            stream_hosts = frozenset(d.name for d in cluster.devices if d.kind == "cpu")
        return cls(
            cluster.device_names,
            latency,
            bandwidth,
            congestion=congestion,
            physical_routes=physical_routes,
            transfer_cpu=cluster.transfer_cpu,
            service=cluster.service,
            stream_hosts=stream_hosts,
        )

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
        cpu = self.transfer_cpu
        if cpu is None:
            return self._latency_rows[src][dst] + nbytes / self._bandwidth_rows[src][dst]
        occupancy = nbytes / self._bandwidth_rows[src][dst]
        return self._latency_rows[src][dst] + max(occupancy, cpu.send_seconds(nbytes), cpu.recv_seconds(nbytes))

    def occupancy_time(self, nbytes: float, src: int, dst: int) -> float:
        """Seconds ``nbytes`` hold the route ``src -> dst``.

        The papers' rules: the whole ``latency + bytes / bandwidth``; ``topology``: ``bytes / bandwidth``.
        """
        if src == dst:
            return 0.0
        if self.holds_latency:
            return self._latency_rows[src][dst] + nbytes / self._bandwidth_rows[src][dst]
        return nbytes / self._bandwidth_rows[src][dst]

    def book(
        self, resource_free: list[float], requested: float, nbytes: float, src: int, dst: int
    ) -> tuple[float, float, float]:
        """Queue one transfer on the resources of its route (FIFO); return ``(begin, arrival, held)``.

        ``resource_free[r]`` is when resource ``r`` is next free; it is advanced for every resource
        the transfer holds (see the module docstring, "Latency and occupancy" and "Transfer lanes").
        ``held`` is how long the route is held (under lanes, which hold no route: the receiver's
        lane time). ``src != dst``.
        """
        route = self.routes[src][dst]
        begin = requested
        for r in route:
            if resource_free[r] > begin:
                begin = resource_free[r]
        if self.lanes is not None:
            return self._book_lanes(resource_free, begin, nbytes, src, dst)
        cpu = self.transfer_cpu
        if self.holds_latency:
            held = self._latency_rows[src][dst] + nbytes / self._bandwidth_rows[src][dst]
            arrival = begin + held
        elif cpu is None:
            held = nbytes / self._bandwidth_rows[src][dst]
            arrival = begin + held + self._latency_rows[src][dst]
        else:
            sender = self.compute_resource[src]
            if resource_free[sender] > begin:
                begin = resource_free[sender]
            held = nbytes / self._bandwidth_rows[src][dst]
            sending = cpu.send_seconds(nbytes)
            resource_free[sender] = begin + sending
            latency = self._latency_rows[src][dst]
            delivered = begin + (held if held > sending else sending) + latency
            if self.recv_cpu_preempts:  # taken from what runs on the receiver's core (the simulator's charge)
                unpack = begin + latency
                unpacked = unpack + cpu.recv_seconds(nbytes)
            else:
                receiver = self.compute_resource[dst]
                unpack = resource_free[receiver] if resource_free[receiver] > begin + latency else begin + latency
                unpacked = unpack + cpu.recv_seconds(nbytes)
                resource_free[receiver] = unpacked
            self.receive_start = unpack
            arrival = delivered if delivered > unpacked else unpacked
        for r in route:
            resource_free[r] = begin + held
        return begin, arrival, held

    def _book_lanes(
        self, resource_free: list[float], begin: float, nbytes: float, src: int, dst: int
    ) -> tuple[float, float, float]:
        """:meth:`book` under ``transfer_lanes`` (module docstring, "Transfer lanes").

        The route holds nothing; ``held`` is the receiver's lane time. Sets :attr:`receive_start`.
        """
        cpu = self.transfer_cpu
        lanes = self.lanes
        assert cpu is not None and lanes is not None
        requested = begin
        sender = self.compute_resource[src]
        if resource_free[sender] > begin:
            begin = resource_free[sender]
        sending = cpu.send_seconds(nbytes)
        begin = lanes[src].take(begin, sending, requested)
        resource_free[sender] = begin + sending
        latency = self._latency_rows[src][dst]
        receiving = cpu.recv_seconds(nbytes)
        unpack = lanes[dst].take(begin + latency, receiving, requested)
        unpacked = unpack + receiving
        self.receive_start = unpack
        occupancy = nbytes / self._bandwidth_rows[src][dst]
        alone = begin + latency + (occupancy if occupancy > sending else sending)
        return begin, (alone if alone > unpacked else unpacked), receiving

    def latency_between(self, src: int, dst: int) -> float:
        """The latency of ``src -> dst`` (a control dependency's delay across devices; 0 when equal)."""
        return self._latency_rows[src][dst]

    def arrivals_from(self, ready: float, nbytes: float, src: int) -> list[float]:
        """When ``nbytes`` that are ready on ``src`` at ``ready`` can be on each device (``ready`` on ``src``).

        ``ready + latency[src, d] + nbytes / bandwidth[src, d]`` for every device ``d``: the
        data-ready term of the list schedulers (Celeritas eq. (7), FastT's EST, HEFT, ETF); with a
        :class:`~graphir.cluster_model.TransferCpu`, ``ready + transfer_time``.
        """
        if self.transfer_cpu is not None:
            return [ready + self.transfer_time(nbytes, src, d) for d in range(self.num_devices)]
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
