"""Cluster specs that need a file, a cache or this machine: ``*.toml``, ``Nxcpu``, ``Nxcpu-workers``.

The core (:func:`graphir.cluster.resolve_cluster`) resolves presets and GPU shorthands itself and
checks the form of every other spec; what needs input from outside the process it hands to the
resolvers registered with :func:`graphir.cluster.register_cluster_resolver`. Importing this module
(the driver package imports it) registers :func:`resolve_file_or_host`:

* ``PATH.toml``: the cluster file (:func:`graphir.cluster_toml.load_cluster_toml`);
* ``Nxcpu``: N logical CPU devices with this CPU's measured speed (:func:`graphir.backends.host.cpu_cluster`);
* ``Nxcpu-workers``: the local TensorFlow worker rig, calibrated or not
  (:func:`graphir.backends.host.cpu_workers_cluster`).

``from graphir.driver.clusters import resolve_cluster`` is the core's resolver with these forms
registered: what ``graphir-opt --cluster`` and the tools call.
"""

from __future__ import annotations

from pathlib import Path

from graphir.backends.host import CPU_MEASURE_ENV, cpu_cluster, cpu_workers_cluster
from graphir.cluster import (
    DEVICE_KINDS,
    PRESETS,
    WORKERS_SUFFIX,
    Cluster,
    ClusterError,
    GiB,
    load_cluster_toml,
    register_cluster_resolver,
    resolve_cluster,
)

__all__ = ["list_clusters", "resolve_cluster", "resolve_file_or_host"]


@register_cluster_resolver
def resolve_file_or_host(spec: str) -> Cluster | None:
    """The cluster of a ``*.toml``, ``Nxcpu`` or ``Nxcpu-workers`` spec; ``None`` for any other spec.

    The core has already checked the spec's form (device counts, no interconnect suffix on
    ``Nxcpu``) before asking.

    Raises:
        ClusterError: a ``*.toml`` spec names no file.
    """
    if spec.endswith(WORKERS_SUFFIX) and spec[: -len(WORKERS_SUFFIX)].isdigit():
        return cpu_workers_cluster(int(spec[: -len(WORKERS_SUFFIX)]), spec)
    if spec.endswith("xcpu") and spec[: -len("xcpu")].isdigit():
        return cpu_cluster(int(spec[: -len("xcpu")]), spec)
    if spec.endswith(".toml"):
        path = Path(spec)
        if not path.is_file():
            raise ClusterError(f"cluster file '{spec}' does not exist")
        return load_cluster_toml(path)
    return None


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
