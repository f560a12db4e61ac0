"""The cluster data model: devices, channels (links), the device catalogue and the papers' interconnects.

:class:`Cluster` is what every pass sees; :mod:`graphir.cluster` resolves one from a spec (shorthand,
preset, TOML file) and documents the formats. Builders shared by presets, shorthands and the TOML
loader live here too (:func:`catalogue_device`, :func:`full_mesh`, :func:`widest_routes`).
"""

from __future__ import annotations

import heapq

import attrs

from graphir.errors import GraphIRError

GPU_LAUNCH_OVERHEAD = 5e-6
"""Seconds per GPU kernel: CUDA launch plus the framework's per-op dispatch (TF executor, ~5 us)."""
CPU_LAUNCH_OVERHEAD = 1e-6
"""Seconds per CPU kernel: per-node dispatch of a CPU runtime (onnxruntime, TF executor, ~1 us)."""


@attrs.frozen
class Device:
    """One device.

    Attributes:
        name: short unique name used in ``device`` annotations (``gpu0``).
        tf_device: TensorFlow device string (``/job:worker/task:1/device:GPU:0`` is legal).
        kind: device kind used to look up per-kind costs (``V100``).
        memory: bytes of device memory.
        peak_flops: peak FLOP/s.
        mem_bandwidth: memory bandwidth in bytes/s.
        launch_overhead: fixed seconds added to every kernel (the roofline's per-op constant).
        op_overhead: seconds the framework's executor spends per op *beyond* its ``cost`` (dispatch
            that measured kernel times do not contain), charged by the simulator; 0 by default.
        kernel_dispatch: seconds the host needs to issue one kernel when kernels run asynchronously
            (a GPU stream); 0 (the default): off, every op costs ``roofline + launch_overhead``.
            When positive, an op with work costs ``max(roofline, kernel_dispatch)`` (the host issues
            the next kernel while the device runs the current one, so a long kernel hides its launch
            and a short one waits for it) and an op without work (metadata: reshape, identity) still
            costs ``launch_overhead`` (:func:`graphir.passes.profile.roofline.roofline`).
    """

    name: str
    tf_device: str
    kind: str
    memory: int
    peak_flops: float
    mem_bandwidth: float
    launch_overhead: float = GPU_LAUNCH_OVERHEAD
    op_overhead: float = 0.0
    kernel_dispatch: float = 0.0


@attrs.frozen
class Link:
    """The channel from ``src`` to ``dst``: ``latency`` seconds + bytes / ``bandwidth`` (bytes/s).

    Attributes:
        route: device names from ``src`` to ``dst`` when the channel is a multi-hop route derived
            from wires (Moirai Fig. 3); empty for a direct channel.
    """

    src: str
    dst: str
    latency: float
    bandwidth: float
    route: tuple[str, ...] = ()


@attrs.frozen
class DeviceKind:
    """Catalogue entry for shorthands: memory, peak FLOP/s, memory bandwidth, TF device type."""

    memory: int
    peak_flops: float
    mem_bandwidth: float
    tf_type: str = "GPU"
    launch_overhead: float = GPU_LAUNCH_OVERHEAD
    kernel_dispatch: float = 0.0


GiB = 1 << 30
# Vendor datasheet numbers: FP32 peak (no tensor cores: the cost model counts FP32 FLOPs) and
# HBM/GDDR bandwidth. "cpu" is the fixed fallback used when measuring the host is disabled.
DEVICE_KINDS: dict[str, DeviceKind] = {
    "V100": DeviceKind(16 * GiB, 15.7e12, 900e9),
    "V100-32GB": DeviceKind(32 * GiB, 15.7e12, 900e9),
    "P100": DeviceKind(16 * GiB, 9.3e12, 732e9),
    "A100": DeviceKind(40 * GiB, 19.5e12, 1555e9),
    "H100": DeviceKind(80 * GiB, 67e12, 3350e9),
    "T4": DeviceKind(16 * GiB, 8.1e12, 320e9),
    "P4": DeviceKind(8 * GiB, 5.5e12, 192e9),
    "2080Ti": DeviceKind(11 * GiB, 13.4e12, 616e9),
    "3060Ti": DeviceKind(8 * GiB, 16.2e12, 448e9),
    "cpu": DeviceKind(8 * GiB, 100e9, 20e9, tf_type="CPU", launch_overhead=CPU_LAUNCH_OVERHEAD),
}

PCIE = (10e-6, 12e9)
"""PCIe 3.0 x16: ~12 GB/s achievable, ~10 us per transfer (Li et al. 2019, cited by Pesto [42])."""
NVLINK = (5e-6, 50e9)
"""NVLink 2.0, two bricks between a GPU pair: 50 GB/s per direction, ~5 us per transfer."""
INTERCONNECTS = {"pcie": PCIE, "nvlink": NVLINK}
INFINIBAND_LATENCY = 5e-6
"""Per-message latency assumed for Moirai's InfiniBand testbed (the paper gives bandwidths only)."""


@attrs.frozen
class TransferCpu:
    """Compute seconds one transfer of ``B`` bytes costs its two end devices (``[overheads]`` of a cluster file).

    ``send + send_per_byte·B`` on the sender and ``recv + recv_per_byte·B`` on the receiver: on the
    rig, TF's gRPC serialises and copies the tensor on the worker's one pinned core, which its kernels
    also need. Measured, never guessed: ``calibrate-comm{rig=true}`` fits it from the workers' CPU time.
    """

    send: float = 0.0
    send_per_byte: float = 0.0
    recv: float = 0.0
    recv_per_byte: float = 0.0

    def send_seconds(self, nbytes: float) -> float:
        """The sender's compute time for ``nbytes``."""
        return self.send + self.send_per_byte * nbytes

    def recv_seconds(self, nbytes: float) -> float:
        """The receiver's compute time for ``nbytes``."""
        return self.recv + self.recv_per_byte * nbytes

    @property
    def charged(self) -> bool:
        """Whether any transfer costs its devices compute time."""
        return any((self.send, self.send_per_byte, self.recv, self.recv_per_byte))


@attrs.frozen
class TransferService:
    """How the devices' runtime serves transfers (``[runtime]`` of a cluster file; all off by default).

    The defaults are a runtime with its own copy engine (a GPU's copy stream, Pesto's and FastT's
    model): a tensor leaves when its producer finishes, a transfer's CPU, if any is charged, is
    queued on the device's compute like a node, and a control dependency is a signal. A TensorFlow
    worker whose compute runs on one thread (the rig: inter- and intra-op pools of one thread, one
    pinned core) differs in three ways, all used by ``congestion=topology`` only:

    Attributes:
        serve_when_idle: a peer's request for a tensor is answered on the sender's compute thread,
            which takes the requests only when it has no ready work of its own (TF's
            ``grpc_worker_service.cc`` schedules ``RecvTensor`` on the worker's compute pool; the
            executor's own ready successors go to the front of that pool's queue, closures from
            the gRPC threads to its back). The requests of a step are all made at its start (a
            ``_Recv`` has no inputs), so a device's tensors wait until it first runs out of ready
            work in the step and from then on leave when produced (the request is registered with
            the rendezvous, and the send answers it inline).
        recv_cpu_preempts: the CPU a transfer costs its receiver (:class:`TransferCpu`) is taken,
            when the bytes arrive, from whatever runs on the receiver's core (a gRPC thread the OS
            time-shares with the kernel: the node running then takes that much longer; a receive
            in an idle gap costs nothing) instead of being queued on the device's compute, where a
            receive due later would hold the core from the moment it is booked.
        control_sends: a control dependency between devices is a transfer of an empty tensor,
            one per (control source, receiving device) (TF's graph partitioner gives each a
            ``_Send``/``_Recv`` pair of a dummy tensor), which pays a transfer's latency, fixed
            overhead, route and CPU like any other; off: a signal that takes the latency only.
        send_when_idle: under the ``enforced`` order, a tensor leaves its device at the device's
            next idle moment after it is made, not when it is made. TF's executor runs the next
            node of the order inline on the thread that finished its predecessor (a node's last
            ready successor that is not cheap runs inline; the others, the ``_Send`` among them,
            go to the front of the compute pool's queue), so with the per-device control chain
            the ``_Send`` waits until the chain stops at a node whose input is not there yet; the
            waiting sends then run newest first (the queue's front).
            Under ``dynamic`` the inline runs are short (a node with several successors, or whose
            successor waits for another input, ends one) and tensors leave when made.
        transfer_lanes: with a :class:`TransferCpu`, each device's transfer CPU (the sends *and*
            the receives of its core, both directions) runs on one serial lane per device, and the
            wire between the two ends is no resource of its own (the rig's loopback: a transfer is
            CPU on both ends). A transfer's send takes the sender's lane, its receive the
            receiver's lane (FIFO, from one latency after the send began), and it arrives no
            earlier than its lone-transfer time ``latency + bytes / bandwidth``. So a lone
            transfer keeps the calibrated link time, a stream of transfers one way runs at the
            slower end's per-byte CPU, and traffic both ways at once pays each core's send plus
            receive CPU (:mod:`graphir.links`, "Transfer lanes"). Off: the route is held for
            ``bytes / bandwidth`` and receives on different transfers overlap freely.
    """

    serve_when_idle: bool = False
    recv_cpu_preempts: bool = False
    control_sends: bool = False
    send_when_idle: bool = False
    transfer_lanes: bool = False


@attrs.frozen
class Cluster:
    """Devices and the links between every ordered pair.

    Attributes:
        spec: the text this cluster was resolved from (recorded in the module header).
        devices: the devices, in order.
        links: one link per ordered pair of distinct devices (the end-to-end channel numbers the
            papers' congestion rules ``pair``, ``port`` and ``task`` use).
        topology: the physical wires, switches and per-pair routes (``congestion=topology``), or
            None when the cluster describes channels only.
        transfer_overhead: seconds added to every cross-device transfer on top of its link's
            latency (the runtime's send/recv rendezvous); 0 by default.
        transfer_cpu: the compute time a transfer costs the sending and the receiving device (the
            runtime serialising and copying the tensor on the device's own cores), as measured by
            ``calibrate-comm{rig=true}``; charged by ``congestion=topology`` only. None: no charge.
        service: how the devices' runtime serves transfers (:class:`TransferService`; the rig's
            single-threaded TF workers set every rule), used by ``congestion=topology`` only.
        step_overhead: the fixed seconds a step costs beyond its graph (a TF session step: the
            client -> master -> worker RPCs, feeding the inputs, fetching the outputs), measured by
            ``calibrate-comm{rig=true}``; 0 by default. The simulator does not schedule it (the
            makespan is the graph's); whatever compares a makespan with a measured step adds it
            (the fidelity benchmark), and ``profile{mode=tf-run}`` takes it out of the untraced
            step it scales the kernels to.
    """

    spec: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    topology: Topology | None = None
    transfer_overhead: float = 0.0
    transfer_cpu: TransferCpu | None = None
    service: TransferService = TransferService()
    step_overhead: float = 0.0

    def device(self, name: str) -> Device:
        """The device called ``name``; raises ``KeyError``."""
        for device in self.devices:
            if device.name == name:
                return device
        raise KeyError(name)

    @property
    def device_names(self) -> tuple[str, ...]:
        """Device names in order."""
        return tuple(d.name for d in self.devices)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Distinct device kinds, in order of first appearance."""
        return tuple(dict.fromkeys(d.kind for d in self.devices))

    def kind_device(self, kind: str) -> Device:
        """The first device of ``kind`` (all devices of a kind share their speeds); raises ``KeyError``."""
        for device in self.devices:
            if device.kind == kind:
                return device
        raise KeyError(kind)

    def link(self, src: str, dst: str) -> Link:
        """The channel from ``src`` to ``dst``; raises ``KeyError``."""
        for link in self.links:
            if link.src == src and link.dst == dst:
                return link
        raise KeyError((src, dst))


class ClusterError(GraphIRError):
    """A cluster spec that cannot be resolved."""


def catalogue_device(name: str, tf_device: str, kind: str, memory: int | None = None) -> Device:
    """A device of a catalogued ``kind`` (:data:`DEVICE_KINDS`), optionally with other ``memory`` bytes."""
    entry = DEVICE_KINDS[kind]
    return Device(
        name=name,
        tf_device=tf_device,
        kind=kind,
        memory=entry.memory if memory is None else memory,
        peak_flops=entry.peak_flops,
        mem_bandwidth=entry.mem_bandwidth,
        launch_overhead=entry.launch_overhead,
        kernel_dispatch=entry.kernel_dispatch,
    )


def full_mesh(devices: tuple[Device, ...], latency: float, bandwidth: float) -> tuple[Link, ...]:
    """One channel per ordered pair of distinct ``devices``, all with the same numbers."""
    return tuple(Link(a.name, b.name, latency, bandwidth) for a in devices for b in devices if a.name != b.name)


def _speeds(device: Device) -> tuple[float, ...]:
    return (device.peak_flops, device.mem_bandwidth, device.launch_overhead, device.op_overhead, device.kernel_dispatch)


def check_kinds(devices: list[Device] | tuple[Device, ...], where: str) -> None:
    """Costs are per kind: every device of a kind must have the same speeds."""
    first: dict[str, Device] = {}
    for device in devices:
        seen = first.setdefault(device.kind, device)
        if _speeds(device) != _speeds(seen):
            raise ClusterError(
                f"{where}: devices '{seen.name}' and '{device.name}' are both of kind '{device.kind}' but differ in "
                "peak_flops, mem_bandwidth, launch_overhead, op_overhead or kernel_dispatch (costs are per kind: "
                "give them different kinds)"
            )


def widest_routes(
    names: list[str],
    wires: dict[tuple[str, str], tuple[float, float]],
    src: str,
    relays: frozenset[str] | None = None,
) -> dict[str, Link]:
    """Channels from ``src`` to every reachable device over multi-hop wire routes (Moirai §III-C).

    A route's bandwidth is its narrowest wire and its latency the sum of its wires' latencies
    (Moirai Fig. 3: A -> B -> D -> F seen as one indirect channel A - F). For each destination the
    widest route is chosen; among equally wide routes the lowest latency, then the fewest hops.
    Widest-then-shortest is not isotone, so it is computed exactly: for each candidate bottleneck
    ``w`` (distinct wire bandwidths, widest first) a Dijkstra on latency over wires of bandwidth
    ``>= w`` settles the destinations first reached at that width.

    Args:
        names: device names.
        wires: ``(a, b) -> (latency, bandwidth)`` for each directed physical wire.
        src: the source device.
        relays: the nodes a route may pass through (None: every node, Moirai's devices that
            forward); a destination outside ``relays`` is still reached, but not passed through.

    Returns:
        destination name -> :class:`Link` with its ``route``; unreachable devices are absent.
    """
    adjacency: dict[str, list[tuple[str, float, float]]] = {n: [] for n in names}
    for (a, b), (latency, bandwidth) in sorted(wires.items()):
        adjacency[a].append((b, latency, bandwidth))
    out: dict[str, Link] = {}
    for width in sorted({bw for _, bw in wires.values()}, reverse=True):
        best: dict[str, tuple[float, int, tuple[str, ...], float]] = {}
        heap: list[tuple[float, int, tuple[str, ...], float]] = [(0.0, 0, (src,), float("inf"))]
        while heap:
            latency, hops, route, narrowest = heapq.heappop(heap)
            node = route[-1]
            if node in best:
                continue
            best[node] = (latency, hops, route, narrowest)
            for nxt, wire_latency, wire_bandwidth in adjacency[node]:
                if wire_bandwidth >= width and nxt not in best and (relays is None or node == src or node in relays):
                    heapq.heappush(
                        heap, (latency + wire_latency, hops + 1, (*route, nxt), min(narrowest, wire_bandwidth))
                    )
        for node, (latency, hops, route, narrowest) in best.items():
            if node != src and node not in out:
                out[node] = Link(src, node, latency, narrowest, route if hops > 1 else ())
        if len(out) == len(names) - 1:
            break
    return out


# --------------------------------------------------------------------------- topology

SWITCH_KINDS = ("pcie-switch", "host-bridge", "nvswitch", "nic", "network")
"""Kinds of non-device nodes a topology may hold (informative: every kind routes the same way)."""


@attrs.frozen
class Switch:
    """A node of the topology that is not a device.

    A PCIe switch, a CPU's host bridge (root complex; the socket interconnect is a wire to the
    other socket's bridge), an NVSwitch, a NIC or a network switch. It is non-blocking inside:
    contention happens on its wires.
    """

    name: str
    kind: str = "pcie-switch"


@attrs.frozen
class Wire:
    """One direction of a physical link between two nodes (devices or switches).

    Each wire is one shared resource: a full-duplex link is two wires, one per direction.
    """

    src: str
    dst: str
    latency: float
    bandwidth: float
    kind: str = "wire"


@attrs.frozen
class Topology:
    """The physical interconnect: switches, directed wires and the route of every ordered device pair.

    Attributes:
        switches: the non-device nodes.
        wires: directed wires (at most one per ordered node pair).
        paths: one :class:`Link` per ordered pair of distinct devices: the numbers of the physical
            route (narrowest wire; summed latencies, unless a preset gives measured numbers) and its
            ``route`` (node names from source to destination, always filled, even for one hop).
        copy_streams: which end's queue a transfer waits in besides the wires. False: the sender's
            egress and the receiver's ingress port (a device sends one transfer and receives one
            at a time). True: TensorFlow's GPU copy streams, as TensorFlow 1.x issues copies (each
            GPU's ``GPUDeviceContext`` has one host-to-device, one device-to-host and one
            device-to-device stream; ``GPUUtil::CopyCPUTensorToGPU`` enqueues a host-to-GPU copy on
            the *receiving* GPU's host-to-device stream, ``CopyGPUTensorToCPU`` a GPU-to-host copy on
            the sending GPU's device-to-host stream, ``DeviceToDeviceCopy`` a GPU-to-GPU copy on the
            *sending* GPU's device-to-device stream): a GPU receives from several peers at once
            (over distinct wires), and the host has no port of its own (its copies share its wires,
            such as its memory). :mod:`graphir.links` names the resources.
    """

    switches: tuple[Switch, ...]
    wires: tuple[Wire, ...]
    paths: tuple[Link, ...]
    copy_streams: bool = False

    def path(self, src: str, dst: str) -> Link:
        """The physical route from device ``src`` to device ``dst``; raises ``KeyError``."""
        for link in self.paths:
            if link.src == src and link.dst == dst:
                return link
        raise KeyError((src, dst))


def duplex(a: str, b: str, latency: float, bandwidth: float, kind: str) -> tuple[Wire, Wire]:
    """The two directed wires of a full-duplex link ``a - b`` with the same numbers each way."""
    return Wire(a, b, latency, bandwidth, kind), Wire(b, a, latency, bandwidth, kind)


def build_topology(
    device_names: tuple[str, ...] | list[str],
    switches: tuple[Switch, ...] | list[Switch],
    wires: tuple[Wire, ...] | list[Wire],
    *,
    relay: bool,
    measured: dict[tuple[str, str], tuple[float, float]] | None = None,
    where: str = "cluster",
    copy_streams: bool = False,
) -> Topology:
    """Derive every device pair's physical route from the wires (:func:`widest_routes`).

    Args:
        device_names: the devices (route endpoints).
        switches: the non-device nodes; routes always may pass through them.
        wires: directed wires; a later wire between the same ordered nodes replaces an earlier one.
        relay: whether a route may pass *through* a device (Moirai Fig. 3's forwarding devices).
            TensorFlow copies a tensor point to point (cudaMemcpyPeer, staged through the host when
            peer access is off): a GPU never forwards another GPU's tensor, so the presets say False.
        measured: ``(src, dst) -> (latency, bandwidth)`` that replace a derived route's numbers
            (Moirai Table III measures pairs end to end); the route's resources stay.
        where: prefix of error messages.
        copy_streams: the queues a transfer waits in (:attr:`Topology.copy_streams`).

    Raises:
        ClusterError: a wire names an unknown node, or a device pair has no route.
    """
    names = list(device_names)
    nodes = names + [s.name for s in switches]
    if len(set(nodes)) != len(nodes):
        raise ClusterError(f"{where}: device and switch names must be unique, got {nodes}")
    known = set(nodes)
    table: dict[tuple[str, str], tuple[float, float]] = {}
    kept: dict[tuple[str, str], Wire] = {}
    for wire in wires:
        if wire.src not in known or wire.dst not in known:
            raise ClusterError(f"{where}: wire '{wire.src}' -> '{wire.dst}' joins an unknown device or switch")
        if wire.src == wire.dst:
            raise ClusterError(f"{where}: wire joins '{wire.src}' to itself")
        table[(wire.src, wire.dst)] = (wire.latency, wire.bandwidth)
        kept[(wire.src, wire.dst)] = wire
    relays = None if relay else frozenset(s.name for s in switches)
    paths: list[Link] = []
    for a in names:
        reach = widest_routes(nodes, table, a, relays)
        for b in names:
            if a == b:
                continue
            if b not in reach:
                raise ClusterError(f"{where}: the wires connect no route from '{a}' to '{b}'")
            link = reach[b]
            route = link.route or (a, b)
            latency, bandwidth = (link.latency, link.bandwidth)
            if measured is not None and (a, b) in measured:
                latency, bandwidth = measured[(a, b)]
            paths.append(Link(a, b, latency, bandwidth, route))
    return Topology(tuple(switches), tuple(kept.values()), tuple(paths), copy_streams)
