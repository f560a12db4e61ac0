"""Clusters: the devices a graph is placed on and the channels between them.

A cluster is resolved from a spec string (:func:`resolve_cluster`):

* a **shorthand** ``NxKIND[-pcie|-nvlink]`` (``4xV100``, ``8xV100-nvlink``, ``2xA100-nvlink``,
  ``4xH100``): N identical GPUs of a catalogued kind (:data:`DEVICE_KINDS`), every pair joined by
  one PCIe (default) or NVLink channel;
* ``Nxcpu``: N logical CPU devices ``/device:CPU:0..N-1`` sharing this machine's CPU, whose peak
  FLOP/s and memory bandwidth are measured once (:func:`host_cpu_speed`);
* ``Nxcpu-workers``: the fidelity rig, N local TensorFlow worker processes
  ``/job:worker/task:0..N-1/device:CPU:0``, each pinned to one core (:func:`cpu_workers_cluster`);
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
    kernel_dispatch = 0.0       # optional, default the kind's (0: off): seconds to issue one kernel
                                # asynchronously; an op with work then costs max(roofline, this)
                                # (graphir.cluster_model.Device.kernel_dispatch)

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

    [topology]                  # optional, with [[wire]] and [[switch]] tables
    relay = false               # may a route pass through a device (default true)
    copy_streams = true         # TensorFlow's GPU copy streams instead of device ports (default
                                # false; graphir.cluster_model.Topology.copy_streams)

    [overheads]                 # all optional, default 0 (calibrate-comm{rig=true} writes them)
    transfer = 140e-6           # seconds added to every transfer's latency (send/recv rendezvous)
    step = 2.4e-3               # fixed seconds per step beyond the graph (Cluster.step_overhead; not simulated)
    send_cpu = 50e-6            # compute seconds a transfer costs its sender (congestion=topology) ...
    send_cpu_per_byte = 2e-10   # ... plus these per byte
    recv_cpu = 50e-6            # and its receiver
    recv_cpu_per_byte = 2e-10

    [runtime]                   # how transfers are served (TransferService; congestion=topology; default false)
    serve_when_idle = true      # a device's tensors leave once its compute thread first runs out of ready work
    recv_cpu_preempts = true    # the receive CPU stretches what runs on the receiver's core, is not queued on it
    control_sends = true        # a control dependency between devices is an empty tensor's transfer
    send_when_idle = true       # enforced order: a tensor leaves at its device's next idle moment
    transfer_lanes = true       # each device's sends and receives share one serial lane; no wire resource

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

import os
import re
from pathlib import Path

import attrs

from graphir.cluster_model import (
    CPU_LAUNCH_OVERHEAD,
    DEVICE_KINDS,
    GPU_LAUNCH_OVERHEAD,
    INFINIBAND_LATENCY,
    INTERCONNECTS,
    NVLINK,
    PCIE,
    Cluster,
    ClusterError,
    Device,
    DeviceKind,
    GiB,
    Link,
    TransferCpu,
    TransferService,
    catalogue_device,
    full_mesh,
    widest_routes,
)
from graphir.cluster_presets import PRESETS
from graphir.cluster_toml import device_toml, link_toml, load_cluster_toml
from graphir.hostcpu import CPU_MEASURE_ENV, CpuSpeed, cache_dir, host_cpu_speed

__all__ = [
    "CPU_LAUNCH_OVERHEAD",
    "DEFAULT_CLUSTER",
    "DEVICE_KINDS",
    "GPU_LAUNCH_OVERHEAD",
    "INFINIBAND_LATENCY",
    "INTERCONNECTS",
    "NVLINK",
    "PCIE",
    "PRESETS",
    "WORKERS_SUFFIX",
    "Cluster",
    "ClusterError",
    "Device",
    "DeviceKind",
    "GiB",
    "Link",
    "TransferCpu",
    "TransferService",
    "cpu_cluster",
    "cpu_workers_cluster",
    "rig_cache_path",
    "device_toml",
    "link_toml",
    "list_clusters",
    "load_cluster_toml",
    "resolve_cluster",
    "widest_routes",
]

DEFAULT_CLUSTER = "4xV100"
"""Cluster used when neither the module nor ``--cluster`` names one."""


def _homogeneous(spec: str, count: int, kind: str, interconnect: str) -> Cluster:
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", kind) for i in range(count))
    latency, bandwidth = INTERCONNECTS[interconnect]
    return Cluster(spec, devices, full_mesh(devices, latency, bandwidth))


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
    return Cluster(spec or f"{count}xcpu", devices, full_mesh(devices, 20e-6, speed.mem_bandwidth / 2))


WORKERS_SUFFIX = "xcpu-workers"
"""``Nxcpu-workers``: the rig of N single-core local TensorFlow workers."""


def rig_cache_path(count: int) -> Path:
    """Where ``calibrate-comm{rig=true}`` caches the calibrated ``{count}xcpu-workers`` cluster TOML."""
    return cache_dir() / f"cluster-{count}{WORKERS_SUFFIX}.toml"


def cpu_workers_cluster(count: int, spec: str | None = None) -> Cluster:
    """``count`` local TensorFlow workers, one core each: ``/job:worker/task:k/device:CPU:0``, kind ``cpu``.

    The description calibrated on this machine (``python -m graphir.passes.profile.calibrate_comm
    --rig --cluster=2xcpu-workers``: one core's roofline, the executor's per-op overhead, gRPC
    transfer latency and bandwidth, the fixed per-transfer cost) is read from :func:`rig_cache_path`
    when it exists, so every model is judged with one cluster description. Without it (or with
    ``GRAPHIR_MEASURE_CPU=0``) the devices get one core's share of the host's measured speed and
    the links typical loopback-gRPC numbers (1 ms, 0.5 GB/s), uncalibrated.
    """
    spec = spec or f"{count}{WORKERS_SUFFIX}"
    measure = os.environ.get(CPU_MEASURE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    cached = rig_cache_path(count)
    if measure and cached.is_file():
        return attrs.evolve(load_cluster_toml(cached), spec=spec)
    fallback = DEVICE_KINDS["cpu"]
    speed = host_cpu_speed(CpuSpeed(fallback.peak_flops, fallback.mem_bandwidth, fallback.memory, False))
    cores = max(os.cpu_count() or 1, 1)
    devices = tuple(
        Device(
            name=f"worker{k}",
            tf_device=f"/job:worker/task:{k}/device:CPU:0",
            kind="cpu",
            memory=speed.memory // count,
            peak_flops=speed.peak_flops / cores,
            mem_bandwidth=speed.mem_bandwidth / cores,
            launch_overhead=CPU_LAUNCH_OVERHEAD,
        )
        for k in range(count)
    )
    return Cluster(spec, devices, full_mesh(devices, 1e-3, 0.5e9))


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
    lines.append("  Nxcpu-workers          N local TF workers /job:worker/task:k, one core each (the fidelity rig)")
    lines.append("files:")
    lines.append("  PATH.toml              [[device]], [[link]] and/or [[wire]] tables (see graphir/cluster.py)")
    return "\n".join(lines) + "\n"


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
    if spec.endswith(WORKERS_SUFFIX) and spec[: -len(WORKERS_SUFFIX)].isdigit():
        count = int(spec[: -len(WORKERS_SUFFIX)])
        if not 1 <= count <= 64:
            raise ClusterError(f"cluster '{spec}': between 1 and 64 workers")
        return cpu_workers_cluster(count, spec)
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
