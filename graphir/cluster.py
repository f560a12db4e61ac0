"""Clusters: the devices a graph is placed on and the channels between them.

A cluster is resolved from a spec string (:func:`resolve_cluster`):

* a **shorthand** ``NxKIND[-pcie|-nvlink]`` (``4xV100``, ``8xV100-nvlink``, ``2xA100-nvlink``,
  ``4xH100``): N identical GPUs of a catalogued kind (:data:`DEVICE_KINDS`), every pair joined by
  one PCIe (default) or NVLink channel;
* ``Nxcpu``: N logical CPU devices ``/device:CPU:0..N-1`` sharing this machine's CPU, whose peak
  FLOP/s and memory bandwidth are measured once;
* ``Nxcpu-workers``: the fidelity rig, N local TensorFlow worker processes
  ``/job:worker/task:0..N-1/device:CPU:0``, each pinned to one core;
* a **preset** for a paper's testbed (:data:`PRESETS`, listed by ``graphir-opt --list-clusters``);
* a **TOML file** (``*.toml``, read by :func:`load_cluster_toml`)::

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

The core resolves presets and GPU shorthands itself: they are data. A spec that needs a file, a
cache or a measurement of this machine (``*.toml``, ``Nxcpu``, ``Nxcpu-workers``) is checked for
its form here and then handed to the resolvers registered from above
(:func:`register_cluster_resolver`; the driver layer registers one when it is imported), so that
:attr:`graphir.ir.Module.cluster` never reads a file or benchmarks the host by itself. Without a
resolver such a spec is a one-line error; ``Module.set_cluster`` attaches any cluster directly.
"""

from __future__ import annotations

import re
from collections.abc import Callable

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
    "ClusterResolver",
    "Device",
    "DeviceKind",
    "GiB",
    "Link",
    "TransferCpu",
    "TransferService",
    "device_toml",
    "link_toml",
    "load_cluster_toml",
    "register_cluster_resolver",
    "resolve_cluster",
    "widest_routes",
]

DEFAULT_CLUSTER = "4xV100"
"""Cluster used when neither the module nor ``--cluster`` names one."""


def _homogeneous(spec: str, count: int, kind: str, interconnect: str) -> Cluster:
    devices = tuple(catalogue_device(f"gpu{i}", f"/device:GPU:{i}", kind) for i in range(count))
    latency, bandwidth = INTERCONNECTS[interconnect]
    return Cluster(spec, devices, full_mesh(devices, latency, bandwidth))


WORKERS_SUFFIX = "xcpu-workers"
"""``Nxcpu-workers``: the rig of N single-core local TensorFlow workers."""


# --------------------------------------------------------------------------- resolution

ClusterResolver = Callable[[str], Cluster | None]
"""``spec -> Cluster``, or ``None`` when the spec is not one this resolver knows."""

CLUSTER_RESOLVERS: list[ClusterResolver] = []
"""Resolvers of the specs the core does not resolve itself, asked in registration order."""


def register_cluster_resolver(resolver: ClusterResolver) -> ClusterResolver:
    """Ask ``resolver(spec)`` for specs that are not presets or GPU shorthands (files, host clusters, plugins).

    Registered once however often it is called; returns ``resolver`` (usable as a decorator).
    """
    if resolver not in CLUSTER_RESOLVERS:
        CLUSTER_RESOLVERS.append(resolver)
    return resolver


def _ask_resolvers(spec: str) -> Cluster | None:
    for resolver in CLUSTER_RESOLVERS:
        cluster = resolver(spec)
        if cluster is not None:
            return cluster
    return None


def _resolved_above(spec: str) -> Cluster:
    """A spec of a file or host form: what the registered resolvers make of it, else a one-line error."""
    cluster = _ask_resolvers(spec)
    if cluster is None:
        raise ClusterError(
            f"cluster '{spec}' is read from a file or measured on this machine, and no cluster resolver is "
            "registered (the driver layer registers one; or attach a Cluster with Module.set_cluster)"
        )
    return cluster


_SHORTHAND = re.compile(r"^(?P<count>\d+)x(?P<kind>[A-Za-z0-9]+(?:-32GB)?)(?:-(?P<link>pcie|nvlink))?$")
_MAX_DEVICES = 4096


def resolve_cluster(spec: str) -> Cluster:
    """Resolve a shorthand (``4xV100``, ``2xA100-nvlink``, ``4xcpu``), a preset name or a TOML file path.

    Presets and GPU shorthands are resolved here; ``Nxcpu``, ``Nxcpu-workers`` and ``*.toml`` are
    checked for their form, then resolved by the registered resolvers
    (:func:`register_cluster_resolver`), which are also asked about any other spec before it is
    rejected.

    Raises:
        ClusterError: the spec is none of these, naming the accepted forms (one line), or it needs a
            resolver and none is registered.
    """
    if spec in PRESETS:
        return PRESETS[spec][1](spec)
    if spec.endswith(WORKERS_SUFFIX) and spec[: -len(WORKERS_SUFFIX)].isdigit():
        count = int(spec[: -len(WORKERS_SUFFIX)])
        if not 1 <= count <= 64:
            raise ClusterError(f"cluster '{spec}': between 1 and 64 workers")
        return _resolved_above(spec)
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
            return _resolved_above(spec)
        return _homogeneous(spec, count, match.group("kind"), match.group("link") or "pcie")
    if spec.endswith(".toml"):
        return _resolved_above(spec)
    cluster = _ask_resolvers(spec)
    if cluster is not None:
        return cluster
    kinds = ", ".join(DEVICE_KINDS)
    presets = ", ".join(PRESETS)
    raise ClusterError(
        f"unknown cluster '{spec}': expected NxKIND[-pcie|-nvlink] (KIND one of {kinds}), a preset "
        f"({presets}) or a .toml file (see graphir-opt --list-clusters)"
    )
