"""Clusters: the devices a graph is placed on and the channels between them.

A cluster is resolved from a spec string (:func:`resolve_cluster`):

* a **shorthand** ``NxKIND[-pcie|-nvlink]`` (``4xV100``, ``8xV100-nvlink``, ``2xA100-nvlink``,
  ``4xH100``): N identical GPUs of a catalogued kind (:data:`DEVICE_KINDS`), every pair joined by
  one PCIe (default) or NVLink channel;
* ``Nxcpu``: N logical CPU devices ``/device:CPU:0..N-1`` sharing this machine's CPU, whose peak
  FLOP/s and memory bandwidth are measured once (:func:`host_cpu_speed`);
* a **preset** for a paper's testbed (:data:`PRESETS`, listed by ``graphir-opt --list-clusters``);
* a **TOML file** (``*.toml``)::

    [[device]]
    name = "gpu0"
    tf_device = "/job:worker/task:0/device:GPU:0"   # default /device:GPU:k (CPU:k for kind "cpu")
    kind = "V100"               # per-kind costs are keyed by this; a catalogued kind fills defaults
    memory = "16GiB"            # bytes, or a size with a unit
    peak_flops = 15.7e12        # FLOP/s
    mem_bandwidth = 900e9       # bytes/s
    launch_overhead = 5e-6      # seconds per kernel (optional)

    [default_link]              # pairs not otherwise given (default: PCIe 3.0, 10 us, 12 GB/s)
    latency = 10e-6
    bandwidth = 12e9

    [[link]]                    # a channel given end to end, per ordered pair
    src = "gpu0"
    dst = "gpu1"
    latency = 5e-6              # seconds
    bandwidth = 50e9            # bytes per second
    bidirectional = true        # also dst -> src (default true)

    [[wire]]                    # OR physical links: routes between every pair are derived
    a = "gpu0"
    b = "gpu1"
    latency = 5e-6
    bandwidth = 25e9
    bidirectional = true        # default true; false: only a -> b

Every ordered device pair is one FIFO channel whose transfer time is the papers' linear model
``latency + bytes / bandwidth`` (Celeritas §4.2.1 ``t = k·d + b``; Pesto §3.1
``T = β0 + β1·data``). A pair given by ``[[link]]`` uses it. Otherwise, when the file has
``[[wire]]`` tables, the pair uses the multi-hop route over the wires as in Moirai §III-A/Fig. 3 and
§III-C: the route's bandwidth is the narrowest wire on it and its latency the sum of the wires'
latencies; among routes, the widest one is taken (ties: the lowest latency, then the fewest hops).
Pairs that the wires do not connect are an error. Without wires, unlisted pairs use
``[default_link]``.

Per-kind costs (``Cost({kind: seconds})``) are keyed by ``kind``, so all devices of one kind must
share peak FLOP/s, memory bandwidth and launch overhead.
"""

from __future__ import annotations

import heapq
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from graphir.errors import GraphIRError
from graphir.hostcpu import CPU_MEASURE_ENV, CpuSpeed, host_cpu_speed

DEFAULT_CLUSTER = "4xV100"
"""Cluster used when neither the module nor ``--cluster`` names one."""

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
    """

    name: str
    tf_device: str
    kind: str
    memory: int
    peak_flops: float
    mem_bandwidth: float
    launch_overhead: float = GPU_LAUNCH_OVERHEAD


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
class Cluster:
    """Devices and the links between every ordered pair.

    Attributes:
        spec: the text this cluster was resolved from (recorded in the module header).
        devices: the devices, in order.
        links: one link per ordered pair of distinct devices.
    """

    spec: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]

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


# --------------------------------------------------------------------------- building clusters


def _catalogue_device(name: str, tf_device: str, kind: str, memory: int | None = None) -> Device:
    entry = DEVICE_KINDS[kind]
    return Device(
        name=name,
        tf_device=tf_device,
        kind=kind,
        memory=entry.memory if memory is None else memory,
        peak_flops=entry.peak_flops,
        mem_bandwidth=entry.mem_bandwidth,
        launch_overhead=entry.launch_overhead,
    )


def _full_mesh(devices: tuple[Device, ...], latency: float, bandwidth: float) -> tuple[Link, ...]:
    return tuple(Link(a.name, b.name, latency, bandwidth) for a in devices for b in devices if a.name != b.name)


def _homogeneous(spec: str, count: int, kind: str, interconnect: str) -> Cluster:
    devices = tuple(_catalogue_device(f"gpu{i}", f"/device:GPU:{i}", kind) for i in range(count))
    latency, bandwidth = INTERCONNECTS[interconnect]
    return Cluster(spec, devices, _full_mesh(devices, latency, bandwidth))


def cpu_cluster(count: int, spec: str | None = None) -> Cluster:
    """``count`` logical CPU devices of this machine (``/device:CPU:0..count-1``), kind ``cpu``.

    The logical devices share the host's cores, memory and bandwidth; each gets the measured
    speed (:func:`host_cpu_speed`) and 1/count of the physical memory. A transfer between two of
    them is a host memory copy: ~20 us of runtime rendezvous, bytes read and written once at the
    copy bandwidth (calibrate them with ``calibrate-comm``).
    """
    fallback = DEVICE_KINDS["cpu"]
    speed = host_cpu_speed(CpuSpeed(fallback.peak_flops, fallback.mem_bandwidth, fallback.memory, False))
    devices = tuple(
        Device(
            name=f"cpu{i}",
            tf_device=f"/device:CPU:{i}",
            kind="cpu",
            memory=speed.memory // count,
            peak_flops=speed.peak_flops,
            mem_bandwidth=speed.mem_bandwidth,
            launch_overhead=CPU_LAUNCH_OVERHEAD,
        )
        for i in range(count)
    )
    return Cluster(spec or f"{count}xcpu", devices, _full_mesh(devices, 20e-6, speed.mem_bandwidth / 2))


def _gbps(value: float) -> float:
    """Gigabits per second (Moirai Table III's unit) to bytes per second."""
    return value * 1e9 / 8


def _table_links(names: list[str], table: list[list[float | None]], latency: float) -> tuple[Link, ...]:
    """One link per ordered pair from a square bandwidth table (row = source, column = destination)."""
    return tuple(
        Link(src, dst, latency, _gbps(table[i][j]))  # type: ignore[arg-type]
        for i, src in enumerate(names)
        for j, dst in enumerate(names)
        if i != j
    )


def _preset_celeritas(spec: str) -> Cluster:
    # Celeritas §6.2.1: 4 NVIDIA Tesla V100 (32 GB each), interconnected via the PCIe bus.
    devices = tuple(_catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100-32GB") for i in range(4))
    return Cluster(spec, devices, _full_mesh(devices, *PCIE))


def _preset_fastt(spec: str) -> Cluster:
    # FastT §6 testbed: 8 NVIDIA Tesla V100 (16 GB each) with NVLinks.
    devices = tuple(_catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(8))
    return Cluster(spec, devices, _full_mesh(devices, *NVLINK))


# Intel Xeon Silver 4116 (Pesto §5): 12 cores x 2.1 GHz x 32 FP32 FLOP/cycle (one AVX-512 FMA
# unit), 6 channels of DDR4-2400 (115 GB/s).
_XEON_SILVER_4116 = (12 * 2.1e9 * 32, 115.2e9)


def _preset_pesto(spec: str) -> Cluster:
    # Pesto §5: one Xeon Silver 4116 and two V100 SXM2 16 GB; each GPU has a dedicated PCIe
    # connection to the CPU, the GPUs talk directly over NVLink.
    gpus = tuple(_catalogue_device(f"gpu{i}", f"/device:GPU:{i}", "V100") for i in range(2))
    cpu = Device("cpu0", "/device:CPU:0", "cpu", 64 * GiB, *_XEON_SILVER_4116, CPU_LAUNCH_OVERHEAD)
    links = [Link("gpu0", "gpu1", *NVLINK), Link("gpu1", "gpu0", *NVLINK)]
    for gpu in gpus:
        links += [Link(gpu.name, "cpu0", *PCIE), Link("cpu0", gpu.name, *PCIE)]
    return Cluster(spec, (*gpus, cpu), tuple(links))


def _preset_moirai_inter(spec: str) -> Cluster:
    # Moirai Table III, inter-server: four single-GPU servers over InfiniBand, average bandwidth
    # in Gbps per ordered pair (row = sender A..D, column = receiver A..D).
    kinds = ["2080Ti", "T4", "P4", "3060Ti"]
    devices = tuple(_catalogue_device(f"gpu{i}", f"/job:worker/task:{i}/device:GPU:0", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 44.26, 32.92, 44.28],
        [42.39, None, 35.32, 44.51],
        [33.2, 35.31, None, 32.95],
        [42.08, 43.22, 33.28, None],
    ]
    return Cluster(spec, devices, _table_links([d.name for d in devices], table, INFINIBAND_LATENCY))


def _preset_moirai_intra(spec: str) -> Cluster:
    # Moirai Table III, intra-server: 2x V100 32 GB + 2x P100 16 GB, NVLink + NVSwitch; average
    # bandwidth in Gbps per ordered pair (row = sender, column = receiver).
    kinds = ["V100-32GB", "V100-32GB", "P100", "P100"]
    devices = tuple(_catalogue_device(f"gpu{i}", f"/device:GPU:{i}", k) for i, k in enumerate(kinds))
    table: list[list[float | None]] = [
        [None, 1170.04, 626.10, 610.56],
        [1148.16, None, 618.98, 581.09],
        [630.43, 609.82, None, 571.96],
        [622.67, 575.08, 581.35, None],
    ]
    return Cluster(spec, devices, _table_links([d.name for d in devices], table, NVLINK[0]))


PRESETS: dict[str, tuple[str, Callable[[str], Cluster]]] = {
    "celeritas": ("Celeritas testbed: 4x V100 32 GB over PCIe", _preset_celeritas),
    "fastt": ("FastT testbed: 8x V100 16 GB over NVLink", _preset_fastt),
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


def device_toml(device: Device, memory: int | None = None) -> list[str]:
    """The ``[[device]]`` table of ``device`` as cluster-file lines (``memory`` overrides its bytes)."""
    return [
        "[[device]]",
        f'name = "{device.name}"',
        f'tf_device = "{device.tf_device}"',
        f'kind = "{device.kind}"',
        f"memory = {device.memory if memory is None else memory}",
        f"peak_flops = {device.peak_flops!r}",
        f"mem_bandwidth = {device.mem_bandwidth!r}",
        f"launch_overhead = {device.launch_overhead!r}",
    ]


def link_toml(src: str, dst: str, latency: float, bandwidth: float, comment: str = "") -> list[str]:
    """A one-way ``[[link]]`` table as cluster-file lines (``comment`` follows the header after ``#``)."""
    return [
        "[[link]]" + (f"  # {comment}" if comment else ""),
        f'src = "{src}"',
        f'dst = "{dst}"',
        f"latency = {latency!r}",
        f"bandwidth = {bandwidth!r}",
        "bidirectional = false",
    ]


def list_clusters() -> str:
    """Text for ``graphir-opt --list-clusters``: presets, shorthands and the TOML form."""
    lines = ["presets:"]
    for name, (doc, _) in PRESETS.items():
        lines.append(f"  {name:14s} {doc}")
    lines.append("shorthands:")
    lines.append("  NxKIND[-pcie|-nvlink]  N identical GPUs, all pairs over PCIe (default) or NVLink, e.g. 4xV100")
    for kind, entry in DEVICE_KINDS.items():
        if entry.tf_type == "CPU":
            continue
        lines.append(
            f"    {kind:10s} {entry.memory / GiB:4.0f} GiB  {entry.peak_flops / 1e12:5.1f} TFLOP/s  "
            f"{entry.mem_bandwidth / 1e9:5.0f} GB/s"
        )
    lines.append("  Nxcpu                  N logical CPU devices /device:CPU:0..N-1 with this CPU's measured speed")
    lines.append(f"                         ({CPU_MEASURE_ENV}=0: fixed 100 GFLOP/s, 20 GB/s)")
    lines.append("files:")
    lines.append("  PATH.toml              [[device]], [[link]] and/or [[wire]] tables (see graphir/cluster.py)")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- TOML


def _parse_bytes(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ClusterError(f"{where}: memory must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)\s*", value)
        if match:
            scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[match.group(2)]
            return int(float(match.group(1)) * scale)
    raise ClusterError(f'{where}: memory must be bytes or a size such as "16GiB", got {value!r}')


def _number(raw: dict[str, Any], key: str, default: float | None, where: str, *, positive: bool) -> float:
    value = raw.get(key, default)
    if value is None:
        raise ClusterError(f"{where}: missing key '{key}'")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ClusterError(f"{where}: '{key}' must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise ClusterError(f"{where}: '{key}' must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    return value


def _table_list(data: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    raw = data.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise ClusterError(f"{path}: '{key}' must be an array of tables ([[{key}]])")
    return raw


def _load_device(raw: dict[str, Any], k: int, where: str) -> Device:
    if "name" not in raw:
        raise ClusterError(f"{where}: missing key 'name'")
    kind = str(raw.get("kind", "V100"))
    entry = DEVICE_KINDS.get(kind)
    tf_type = entry.tf_type if entry is not None else "GPU"
    return Device(
        name=str(raw["name"]),
        tf_device=str(raw.get("tf_device", f"/device:{tf_type}:{k}")),
        kind=kind,
        memory=_parse_bytes(raw.get("memory", entry.memory if entry else 16 * GiB), where),
        peak_flops=_number(raw, "peak_flops", entry.peak_flops if entry else None, where, positive=True),
        mem_bandwidth=_number(raw, "mem_bandwidth", entry.mem_bandwidth if entry else None, where, positive=True),
        launch_overhead=_number(
            raw, "launch_overhead", entry.launch_overhead if entry else GPU_LAUNCH_OVERHEAD, where, positive=False
        ),
    )


def load_cluster_toml(path: Path) -> Cluster:
    """Read a cluster TOML file (see the module docstring for the format).

    Raises:
        ClusterError: unreadable file, bad syntax, unknown keys' values, unknown devices in links,
            kinds with inconsistent speeds, or wires that leave a pair unconnected (one line).
    """
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read cluster file: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{path}: invalid TOML: {exc}") from exc
    raw_devices = _table_list(data, "device", path)
    if not raw_devices:
        raise ClusterError(f"{path}: a cluster needs at least one [[device]]")
    devices = [_load_device(raw, k, f"{path}: device #{k}") for k, raw in enumerate(raw_devices)]
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: device names must be unique, got {names}")
    _check_kinds(devices, str(path))
    default = data.get("default_link", {})
    if not isinstance(default, dict):
        raise ClusterError(f"{path}: 'default_link' must be a table")
    default_latency = _number(default, "latency", PCIE[0], f"{path}: default_link", positive=False)
    default_bandwidth = _number(default, "bandwidth", PCIE[1], f"{path}: default_link", positive=True)
    given: dict[tuple[str, str], Link] = {}
    for k, raw in enumerate(_table_list(data, "link", path)):
        where = f"{path}: link #{k}"
        src, dst = str(raw.get("src")), str(raw.get("dst"))
        if src not in names or dst not in names:
            raise ClusterError(f"{where} joins unknown devices '{src}' -> '{dst}'")
        if src == dst:
            raise ClusterError(f"{where} joins '{src}' to itself")
        latency = _number(raw, "latency", default_latency, where, positive=False)
        bandwidth = _number(raw, "bandwidth", default_bandwidth, where, positive=True)
        given[(src, dst)] = Link(src, dst, latency, bandwidth)
        if raw.get("bidirectional", True) and (dst, src) not in given:
            given[(dst, src)] = Link(dst, src, latency, bandwidth)
    wires: dict[tuple[str, str], tuple[float, float]] = {}
    for k, raw in enumerate(_table_list(data, "wire", path)):
        where = f"{path}: wire #{k}"
        a, b = str(raw.get("a")), str(raw.get("b"))
        if a not in names or b not in names:
            raise ClusterError(f"{where} joins unknown devices '{a}' - '{b}'")
        if a == b:
            raise ClusterError(f"{where} joins '{a}' to itself")
        spec = (
            _number(raw, "latency", default_latency, where, positive=False),
            _number(raw, "bandwidth", None, where, positive=True),
        )
        wires[(a, b)] = spec
        if raw.get("bidirectional", True):
            wires.setdefault((b, a), spec)
    links: list[Link] = []
    for a in names:
        routes = widest_routes(names, wires, a) if wires else {}
        for b in names:
            if a == b:
                continue
            if (a, b) in given:
                links.append(given[(a, b)])
            elif wires:
                if b not in routes:
                    raise ClusterError(f"{path}: the wires connect no route from '{a}' to '{b}'")
                links.append(routes[b])
            else:
                links.append(Link(a, b, default_latency, default_bandwidth))
    return Cluster(str(path), tuple(devices), tuple(links))


def _check_kinds(devices: list[Device] | tuple[Device, ...], where: str) -> None:
    """Costs are per kind: every device of a kind must have the same speeds."""
    first: dict[str, Device] = {}
    for device in devices:
        seen = first.setdefault(device.kind, device)
        speeds = (device.peak_flops, device.mem_bandwidth, device.launch_overhead)
        if speeds != (seen.peak_flops, seen.mem_bandwidth, seen.launch_overhead):
            raise ClusterError(
                f"{where}: devices '{seen.name}' and '{device.name}' are both of kind '{device.kind}' but differ in "
                "peak_flops, mem_bandwidth or launch_overhead (costs are per kind: give them different kinds)"
            )


def widest_routes(names: list[str], wires: dict[tuple[str, str], tuple[float, float]], src: str) -> dict[str, Link]:
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
                if wire_bandwidth >= width and nxt not in best:
                    heapq.heappush(
                        heap, (latency + wire_latency, hops + 1, (*route, nxt), min(narrowest, wire_bandwidth))
                    )
        for node, (latency, hops, route, narrowest) in best.items():
            if node != src and node not in out:
                out[node] = Link(src, node, latency, narrowest, route if hops > 1 else ())
        if len(out) == len(names) - 1:
            break
    return out


# --------------------------------------------------------------------------- resolution

_SHORTHAND = re.compile(r"^(?P<count>\d+)x(?P<kind>[A-Za-z0-9]+(?:-32GB)?)(?:-(?P<link>pcie|nvlink))?$")
_MAX_DEVICES = 4096


def resolve_cluster(spec: str) -> Cluster:
    """Resolve a shorthand (``4xV100``, ``2xA100-nvlink``, ``4xcpu``), a preset name or a TOML file path.

    Raises:
        ClusterError: the spec is none of these, naming the accepted forms (one line).
    """
    if spec in PRESETS:
        return PRESETS[spec][1](spec)
    match = _SHORTHAND.match(spec)
    if match and match.group("kind") in DEVICE_KINDS:
        count = int(match.group("count"))
        if count < 1:
            raise ClusterError(f"cluster '{spec}' has no devices")
        if count > _MAX_DEVICES:
            raise ClusterError(f"cluster '{spec}' has more than {_MAX_DEVICES} devices")
        if match.group("kind") == "cpu":
            if match.group("link"):
                raise ClusterError(f"cluster '{spec}': logical CPU devices take no interconnect suffix")
            return cpu_cluster(count, spec)
        return _homogeneous(spec, count, match.group("kind"), match.group("link") or "pcie")
    if spec.endswith(".toml"):
        path = Path(spec)
        if not path.is_file():
            raise ClusterError(f"cluster file '{spec}' does not exist")
        return load_cluster_toml(path)
    kinds = ", ".join(DEVICE_KINDS)
    presets = ", ".join(PRESETS)
    raise ClusterError(
        f"unknown cluster '{spec}': expected NxKIND[-pcie|-nvlink] (KIND one of {kinds}), a preset "
        f"({presets}) or a .toml file (see graphir-opt --list-clusters)"
    )
