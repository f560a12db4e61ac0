"""Presets: the papers' testbeds as clusters (``--cluster=fastt``, ``celeritas``, ``pesto``, ``moirai-*``).

Each builder documents its source (paper section, table) next to its numbers. A preset has two
layers: its ``links`` (one end-to-end channel per ordered pair, the numbers every result used before
topologies existed, and what the papers' own congestion rules ``pair|port|task`` use) and its
``topology`` (switches and wires of the physical machine, used by ``congestion=topology``). Where a
paper does not describe its machine's wiring, the builder says what it chose and why.

Wire numbers (per direction): NVLink 2.0 25 GB/s per link (NVIDIA V100 whitepaper: six links of
25 GB/s); PCIe 3.0 x16 12 GB/s achievable (as :data:`PCIE`), 5 us per hop so that the usual two-hop
GPU-switch-GPU or GPU-switch-CPU route keeps :data:`PCIE`'s 10 us; the socket interconnect (QPI /
UPI) 19.2 GB/s, 1 us; InfiniBand EDR 100 Gb/s = 12.5 GB/s, 5 us (:data:`INFINIBAND_LATENCY`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from graphir.cluster_model import (
    CPU_LAUNCH_OVERHEAD,
    INFINIBAND_LATENCY,
    NVLINK,
    PCIE,
    Cluster,
    Device,
    GiB,
    Link,
    Switch,
    Topology,
    Wire,
    build_topology,
    catalogue_device,
    duplex,
    full_mesh,
)

NVLINK_WIRE = (5e-6, 25e9)
"""One NVLink 2.0 link (brick) between two V100s, per direction; ``NV2`` pairs get two (50 GB/s)."""
PCIE_HOP = (5e-6, 12e9)
"""One PCIe 3.0 x16 hop (GPU - switch, switch - host bridge)."""
SOCKET_LINK = (1e-6, 19.2e9)
"""QPI/UPI between the two sockets' host bridges (one 9.6 GT/s link, per direction)."""
INFINIBAND_EDR = (INFINIBAND_LATENCY, 100e9 / 8)
"""100 Gb/s InfiniBand EDR (NIC - network switch)."""

# DGX-1 with V100 (NVIDIA DGX-1 System Architecture whitepaper WP-08437-001, §3.1: "hybrid
# cube-mesh", six NVLink connection points per V100 at 25 GB/s per direction, the V100's 16 PCIe
# 3.0 lanes "used for connecting between the CPUs and GPUs and high-speed IB network interface
# cards"). Link counts per GPU pair (1 = NV1, 2 = NV2) as ``nvidia-smi topo -m`` prints them on an
# 8x V100-SXM2-16GB server (OneFlow DLPerf test reports, github.com/Oneflow-Inc/DLPerf: GPU0 NV1 to
# 1 and 2, NV2 to 3 and 4, SYS to 5-7; ...; GPUs 0-3 on NUMA node 0, 4-7 on node 1; GPUs 2 and 3
# PIX, i.e. behind one PCIe switch, with the NIC); every GPU has six.
_DGX1_NVLINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2,
    (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2,
}  # fmt: skip

# FastT §6.2: "2 Intel(R) Xeon(R) Platinum 8163 CPUs, where each CPU has 24 cores". The 8163 is a
# Skylake-SP part (AVX-512, two FMA units per core: 64 FP32 FLOP/cycle; 2.5 GHz) with the platform's
# six DDR4-2666 channels per socket (6 x 21.3 GB/s = 128 GB/s). TensorFlow shows both sockets as
# one ``/device:CPU:0`` whose thread pool spans every core; its memory (the variables TF-slim keeps
# there) is taken to be socket 0's, so the host device sits on socket 0's host bridge.
_XEON_PLATINUM_8163_X2 = (2 * 24 * 2.5e9 * 64, 6 * 21.33e9)
HOST_MEMORY_WIRE = (0.0, _XEON_PLATINUM_8163_X2[1])
"""The host device's memory behind socket 0's root complex: no latency of its own, 128 GB/s."""
HOST_MEMORY = 256 * GiB
"""Host RAM of the FastT preset's CPU device (the paper does not give it; nothing here comes near it)."""


def _dgx1_wires(gpus: list[str], prefix: str, pairs: dict[tuple[int, int], int]) -> tuple[list[Switch], list[Wire]]:
    """The NVLink mesh among ``gpus`` plus DGX-1's PCIe tree.

    GPUs 2k and 2k+1 share PCIe switch k (a PLX PEX8764 whose one x16 uplink both GPUs share);
    switches 0-1 hang off socket 0's host bridge, 2-3 off socket 1's; the sockets are joined by QPI.
    """
    switches: list[Switch] = []
    wires: list[Wire] = []
    for (a, b), count in pairs.items():
        if a < len(gpus) and b < len(gpus):
            wires += duplex(gpus[a], gpus[b], NVLINK_WIRE[0], count * NVLINK_WIRE[1], "nvlink")
    sockets = sorted({k // 4 for k in range(len(gpus))})
    for socket in sockets:
        switches.append(Switch(f"{prefix}hb{socket}", "host-bridge"))
    for k, gpu in enumerate(gpus):
        if k % 2 == 0:
            plx = f"{prefix}plx{k // 2}"
            switches.append(Switch(plx, "pcie-switch"))
            wires += duplex(plx, f"{prefix}hb{k // 4}", *PCIE_HOP, "pcie")
        wires += duplex(gpu, f"{prefix}plx{k // 2}", *PCIE_HOP, "pcie")
    if len(sockets) == 2:
        wires += duplex(f"{prefix}hb0", f"{prefix}hb1", *SOCKET_LINK, "qpi")
    return switches, wires


def _staged_through_host(topology: Topology, gpus: list[str], host: str, pairs: dict[tuple[int, int], int]) -> Topology:
    """``topology`` with every GPU pair that has no NVLink routed through the host's memory.

    Without NVLink a DGX-1's GPU pair sits on different sockets (``SYS`` in ``nvidia-smi topo -m``),
    and PCIe peer-to-peer does not cross the socket interconnect, so CUDA has no peer access between
    them. TensorFlow 1.x still copies the tensor with one ``cuMemcpyPeerAsync`` on the sender's
    device-to-device stream (``GPUUtil::DeviceToDeviceCopy``); without peer access the driver stages
    it through pinned host memory: out of the sender into host memory, then from host memory into
    the receiver. The route is therefore the sender's route to the host followed by the host's route
    to the receiver, and it holds the host's memory wire in both directions, which every host copy
    (TF-slim's weight reads, the summed gradients) also holds. The staging buffer is taken to be in
    the host device's memory (socket 0), like the variables.
    """
    linked = {(gpus[a], gpus[b]) for a, b in pairs if a < len(gpus) and b < len(gpus)}
    linked |= {(b, a) for a, b in linked}
    paths = []
    for path in topology.paths:
        if path.src in gpus and path.dst in gpus and (path.src, path.dst) not in linked:
            up, down = topology.path(path.src, host), topology.path(host, path.dst)
            route = up.route + down.route[1:]
            path = Link(path.src, path.dst, up.latency + down.latency, min(up.bandwidth, down.bandwidth), route)
        paths.append(path)
    return Topology(topology.switches, topology.wires, tuple(paths), topology.copy_streams)


def _gbps(value: float) -> float:
    """Gigabits per second (Moirai Table III's unit) to bytes per second."""
    return value * 1e9 / 8


def _table_links(names: list[str], table: list[list[float | None]], latency: float) -> tuple[Link, ...]:
    """One link per ordered pair from a square bandwidth table (row = source, column = destination)."""
    return tuple(
        Link(src, dst, latency, _gbps(cast(float, table[i][j])))  # off the diagonal: a number
        for i, src in enumerate(names)
        for j, dst in enumerate(names)
        if i != j
    )


def _preset_celeritas(spec: str) -> Cluster:
    # Celeritas §6.2.1: 2 Xeon Gold 5220 and 4 NVIDIA Tesla V100 (32 GB each), "interconnected via
    # the PCIe bus". The paper does not say which GPUs share a switch; chosen: the common 4-GPU
    # dual-socket layout, GPUs 0-1 behind a PCIe switch on socket 0, GPUs 2-3 behind one on socket 1,
    # sockets joined by UPI. GPU 0 -> 1 stays under its switch (10 us, 12 GB/s, as the links);
    # GPU 0 -> 2 crosses both host bridges (21 us) and contends on both switch uplinks.
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100-32GB") for i in range(4))
    names = [d.name for d in devices]
    switches = [Switch("hb0", "host-bridge"), Switch("hb1", "host-bridge"), Switch("plx0"), Switch("plx1")]
    wires = [
        *duplex("plx0", "hb0", *PCIE_HOP, "pcie"),
        *duplex("plx1", "hb1", *PCIE_HOP, "pcie"),
        *duplex("hb0", "hb1", *SOCKET_LINK, "upi"),
    ]
    for k, gpu in enumerate(names):
        wires += duplex(gpu, f"plx{k // 2}", *PCIE_HOP, "pcie")
    topology = build_topology(names, switches, wires, relay=False, where=spec)
    return Cluster(spec, devices, full_mesh(devices, *PCIE), topology)


def _preset_fastt(spec: str) -> Cluster:
    # FastT §6.2 testbed: "physical machines, each equipped with 8 NVIDIA Tesla V100 GPUs with
    # NVLinks, where each GPU has 16GB memory, and 2 Intel(R) Xeon(R) Platinum 8163 CPUs". The
    # links keep one 50 GB/s NVLink channel per GPU pair and PCIe (:data:`PCIE`) between the host
    # and each GPU; the topology is a DGX-1 (the 8-V100 NVLink server of its time): the hybrid
    # cube-mesh, where 12 of the 28 GPU pairs have no NVLink and no peer access (they sit on
    # different sockets), so TensorFlow's copy is staged through the host's memory over PCIe and QPI
    # (:func:`_staged_through_host`; relay=False: a GPU does not forward another GPU's tensor), plus the
    # host CPU ``cpu0`` (TensorFlow's ``/device:CPU:0``, where TF-slim keeps the variables) on
    # socket 0's host bridge, joined to it by its memory (:data:`HOST_MEMORY_WIRE`). A host
    # transfer's route is host - bridge - switch uplink - GPU (10 us, 12 GB/s, as :data:`PCIE`), so
    # host traffic to several GPUs contends on the host's memory wire and on the switch uplinks the
    # GPU pairs share, and GPUs 4-7 also on QPI. FastT runs TensorFlow 1.x, so a transfer queues on
    # the copy stream TensorFlow issues it on, not on device ports (``copy_streams``, see
    # :attr:`graphir.cluster_model.Topology.copy_streams`): a GPU takes its peers' tensors over
    # its NVLink bricks and PCIe at once (e.g. TF-slim's gradients into GPU 0), copies from the
    # host to one GPU go one after the other on its host-to-device stream, and the host's copies
    # to all GPUs share its memory wire, which each holds for bytes / 12 GB/s (the route's
    # narrowest wire), i.e. they serialise at PCIe speed.
    gpus = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(8))
    host = Device("cpu0", "/device:CPU:0", "cpu", HOST_MEMORY, *_XEON_PLATINUM_8163_X2, CPU_LAUNCH_OVERHEAD)
    devices = (*gpus, host)
    names = [d.name for d in devices]
    switches, wires = _dgx1_wires(names[:8], "", _DGX1_NVLINKS)
    wires += duplex("cpu0", "hb0", *HOST_MEMORY_WIRE, "memory")
    topology = build_topology(names, switches, wires, relay=False, where=spec, copy_streams=True)
    topology = _staged_through_host(topology, names[:8], "cpu0", _DGX1_NVLINKS)
    links = [*full_mesh(gpus, *NVLINK)]
    for gpu in gpus:
        links += [Link(gpu.name, "cpu0", *PCIE), Link("cpu0", gpu.name, *PCIE)]
    return Cluster(spec, devices, tuple(links), topology)


def fastt_gpus(count: int, *, host: bool = True) -> Cluster:
    """The ``fastt`` preset with only GPUs ``0..count-1`` (and the host): FastT's 1-, 2- and 4-GPU settings.

    FastT §6.2 runs 1, 2 and 4 of a server's 8 GPUs; TF-slim's clone ``i`` is ``/device:GPU:i``. The
    devices kept, their wires and every route between them are the preset's own (routes never pass
    through a GPU, so dropping GPUs changes no route). ``host=False`` drops the host CPU too, for
    placers that should only use the GPUs. Its spec, ``fastt/gpus=N`` (``fastt/gpus=N/no-host``), is
    recorded on the module (attach it with ``Module.set_cluster``; ``resolve_cluster`` knows only ``fastt``).

    Raises:
        ValueError: ``count`` is not between 1 and 8.
    """
    if not 1 <= count <= 8:
        raise ValueError(f"the fastt server has 1 to 8 GPUs, got {count}")
    full = _preset_fastt("fastt")
    if count == 8 and host:
        return full
    keep = {f"gpu{k}" for k in range(count)} | ({"cpu0"} if host else set())
    topology = full.topology
    assert topology is not None
    paths = tuple(p for p in topology.paths if p.src in keep and p.dst in keep)
    return Cluster(
        f"fastt/gpus={count}" + ("" if host else "/no-host"),
        tuple(d for d in full.devices if d.name in keep),
        tuple(link for link in full.links if link.src in keep and link.dst in keep),
        Topology(topology.switches, topology.wires, paths, topology.copy_streams),
        full.transfer_overhead,
    )


def _preset_fastt_2x4(spec: str) -> Cluster:
    # FastT §6.2 "8 GPUs (2 servers)": "4 GPU cards each on two servers", inter-server traffic in
    # the cost model. Chosen: GPUs 0-3 of a DGX-1 in each server (NVLink among them, PCIe switches
    # on socket 0) and one 100 Gb/s InfiniBand EDR NIC per server on the host bridge, joined by a
    # network switch; the paper names no network. Device gpu0-3 are /job:worker/task:0, gpu4-7
    # task:1. Unlike the older presets, the links are the topology's own routes.
    devices = tuple(
        catalogue_device(f"gpu{4 * s + i}", f"/job:worker/task:{s}/device:GPU:{i}", "V100")
        for s in range(2)
        for i in range(4)
    )
    switches: list[Switch] = [Switch("ib", "network")]
    wires: list[Wire] = []
    for server in range(2):
        gpus = [f"gpu{4 * server + i}" for i in range(4)]
        prefix = f"s{server}."
        more_switches, more_wires = _dgx1_wires(gpus, prefix, _DGX1_NVLINKS)
        nic = f"{prefix}nic"
        switches += [*more_switches, Switch(nic, "nic")]
        wires += [
            *more_wires,
            *duplex(f"{prefix}hb0", nic, *PCIE_HOP, "pcie"),
            *duplex(nic, "ib", *INFINIBAND_EDR, "infiniband"),
        ]
    names = [d.name for d in devices]
    topology = build_topology(names, switches, wires, relay=False, where=spec)
    return Cluster(spec, devices, topology.paths, topology)


# Intel Xeon Silver 4116 (Pesto §5): 12 cores x 2.1 GHz x 32 FP32 FLOP/cycle (one AVX-512 FMA
# unit), 6 channels of DDR4-2400 (115 GB/s).
_XEON_SILVER_4116 = (12 * 2.1e9 * 32, 115.2e9)


def _preset_pesto(spec: str) -> Cluster:
    # Pesto §5: one Xeon Silver 4116 and two V100 SXM2 16 GB; each GPU has a dedicated PCIe
    # connection to the CPU, the GPUs talk directly over NVLink.
    gpus = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(2))
    cpu = Device("cpu0", "/device:CPU:0", "cpu", 64 * GiB, *_XEON_SILVER_4116, CPU_LAUNCH_OVERHEAD)
    # Topology: the same three wires (the NVLink pair counted as two links, 50 GB/s as the links'
    # NVLINK; each GPU's dedicated PCIe connection one 10 us hop), plus ports.
    links = [Link("gpu0", "gpu1", *NVLINK), Link("gpu1", "gpu0", *NVLINK)]
    wires = [*duplex("gpu0", "gpu1", *NVLINK, "nvlink")]
    for gpu in gpus:
        links += [Link(gpu.name, "cpu0", *PCIE), Link("cpu0", gpu.name, *PCIE)]
        wires += duplex(gpu.name, "cpu0", *PCIE, "pcie")
    topology = build_topology(["gpu0", "gpu1", "cpu0"], [], wires, relay=False, where=spec)
    return Cluster(spec, (*gpus, cpu), tuple(links), topology)


def _preset_moirai_inter(spec: str) -> Cluster:
    # Moirai Table III, inter-server: four single-GPU servers over InfiniBand, average bandwidth
    # in Gbps per ordered pair (row = sender A..D, column = receiver A..D).
    kinds = ["2080Ti", "T4", "P4", "3060Ti"]
    devices = tuple(catalogue_device(f"gpu{i}", f"/job:worker/task:{i}/device:GPU:0", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 44.26, 32.92, 44.28],
        [42.39, None, 35.32, 44.51],
        [33.2, 35.31, None, 32.95],
        [42.08, 43.22, 33.28, None],
    ]
    # Topology: each server's NIC on one InfiniBand switch ("interconnected with a 100Gbps
    # InfiniBand network", §V-A); route numbers stay the measured pairs, the route adds the NICs'
    # and the switch ports' contention.
    links = _table_links([d.name for d in devices], table, INFINIBAND_LATENCY)
    switches = [Switch("ib", "network"), *(Switch(f"nic{i}", "nic") for i in range(4))]
    wires: list[Wire] = []
    for i, device in enumerate(devices):
        wires += [*duplex(device.name, f"nic{i}", *PCIE_HOP, "pcie"), *duplex(f"nic{i}", "ib", *INFINIBAND_EDR, "ib")]
    return Cluster(spec, devices, links, _measured_topology(devices, switches, wires, links, spec))


def _preset_moirai_intra(spec: str) -> Cluster:
    # Moirai Table III, intra-server: 2x V100 32 GB + 2x P100 16 GB, NVLink + NVSwitch; average
    # bandwidth in Gbps per ordered pair (row = sender, column = receiver).
    kinds = ["V100-32GB", "V100-32GB", "P100", "P100"]
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 1170.04, 626.10, 610.56],
        [1148.16, None, 618.98, 581.09],
        [630.43, 609.82, None, 571.96],
        [622.67, 575.08, 581.35, None],
    ]
    # Topology: every GPU on one NVSwitch ("connected via NVLink and expanded through NVSwitch to
    # enable all-to-all communication", §V-A); measured pair numbers, NVSwitch ports contend.
    links = _table_links([d.name for d in devices], table, NVLINK[0])
    wires: list[Wire] = []
    for device in devices:
        wires += duplex(device.name, "nvswitch", NVLINK_WIRE[0], 6 * NVLINK_WIRE[1], "nvlink")
    return Cluster(
        spec, devices, links, _measured_topology(devices, [Switch("nvswitch", "nvswitch")], wires, links, spec)
    )


def _measured_topology(
    devices: tuple[Device, ...], switches: list[Switch], wires: list[Wire], links: tuple[Link, ...], spec: str
) -> Topology:
    """Routes from the wires, numbers from the measured ``links`` (Moirai Table III)."""
    measured = {(link.src, link.dst): (link.latency, link.bandwidth) for link in links}
    return build_topology([d.name for d in devices], switches, wires, relay=False, measured=measured, where=spec)


PRESETS: dict[str, tuple[str, Callable[[str], Cluster]]] = {
    "celeritas": ("Celeritas testbed: 4x V100 32 GB over PCIe", _preset_celeritas),
    "fastt": (
        "FastT testbed: 8x V100 16 GB over NVLink + the host CPU (topology: DGX-1 hybrid cube-mesh + PCIe tree)",
        _preset_fastt,
    ),
    "fastt-2x4": (
        "FastT 2-server setting: 2 servers x 4 V100 16 GB (DGX-1 NVLink quad), 100 Gb/s InfiniBand between",
        _preset_fastt_2x4,
    ),
    "pesto": ("Pesto testbed: 2x V100 16 GB (NVLink) + Xeon Silver 4116 CPU (PCIe to each GPU)", _preset_pesto),
    "moirai-inter": (
        "Moirai Table III inter-server: 2080 Ti, T4, P4, 3060 Ti over InfiniBand (measured Gbps per pair)",
        _preset_moirai_inter,
    ),
    "moirai-intra": (
        "Moirai Table III intra-server: 2x V100 32 GB + 2x P100 16 GB, NVLink + NVSwitch (measured Gbps per pair)",
        _preset_moirai_intra,
    ),
}
"""Named presets: name -> (one-line description, builder taking the spec)."""
