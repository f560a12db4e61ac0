"""This machine as a target: its CPU's measured speed, the ``Nxcpu`` and ``Nxcpu-workers`` clusters.

A roofline needs two numbers per device: peak FLOP/s and memory bandwidth. For the host CPU they
are measured (a large float32 matrix product and a large array copy, best of five) the first time
an ``Nxcpu`` cluster is built, and cached in ``cpu-speed.json`` under :func:`cache_dir`, so later
runs on the same machine give the same numbers (and byte-identical outputs).

* :func:`cpu_cluster`: ``Nxcpu``, N logical CPU devices ``/device:CPU:0..N-1`` sharing this
  machine's CPU (what the TensorFlow backend runs on; the profile pass's host estimate);
* :func:`cpu_workers_cluster`: ``Nxcpu-workers``, the fidelity rig of N local TensorFlow worker
  processes ``/job:worker/task:0..N-1/device:CPU:0`` (:mod:`graphir.backends.tf.rig`), read from the
  calibration cache :func:`rig_cache_path` when it exists.

These read caches and benchmark the machine, so they live above the core: the core's
:func:`graphir.cluster.resolve_cluster` resolves ``Nxcpu`` and ``Nxcpu-workers`` specs through a
resolver the driver registers (:mod:`graphir.driver.clusters`), and passes call these directly.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import numpy as np

from graphir.cluster import WORKERS_SUFFIX
from graphir.cluster_model import CPU_LAUNCH_OVERHEAD, DEVICE_KINDS, Cluster, Device, full_mesh
from graphir.cluster_toml import load_cluster_toml

CPU_MEASURE_ENV = "GRAPHIR_MEASURE_CPU"
"""Set to ``0`` to skip measuring the host CPU: ``Nxcpu`` then uses the fixed ``cpu`` catalogue entry
(100 GFLOP/s, 20 GB/s, 8 GiB), so outputs do not depend on the machine."""
CACHE_DIR_ENV = "GRAPHIR_CACHE_DIR"
"""Overrides the cache directory (default ``$XDG_CACHE_HOME/graphir`` or ``~/.cache/graphir``)."""
_CPU_CACHE_VERSION = 1


@attrs.frozen
class CpuSpeed:
    """Measured (or fallback) speed of this machine's CPU.

    Attributes:
        peak_flops: FLOP/s of a large float32 matrix product (numpy's BLAS, all cores).
        mem_bandwidth: bytes/s of a large array copy (bytes read + bytes written per second).
        memory: physical memory in bytes.
        measured: False when these are the documented fallback numbers.
    """

    peak_flops: float
    mem_bandwidth: float
    memory: int
    measured: bool


def cache_dir() -> Path:
    """Graphir's per-user cache directory (not created here)."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "graphir"


def _machine_key() -> str:
    return f"{platform.node()}|{platform.machine()}|{platform.processor()}|{os.cpu_count()}"


def _measure_cpu(fallback_memory: int) -> CpuSpeed:
    """Best of a few runs of a 1024^3 float32 matmul and a 64 MiB copy (a roofline's two roofs)."""
    rng = np.random.default_rng(0)
    n = 1024
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    np.matmul(a, b)  # warm-up: thread pool start, page faults
    best = min(_timed(lambda: np.matmul(a, b)) for _ in range(5))
    peak_flops = 2.0 * n**3 / best
    src = np.ones(16 << 20, dtype=np.float32)  # 64 MiB, far beyond the last-level cache
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
    mem_bandwidth = 2.0 * src.nbytes / best
    try:
        memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        memory = fallback_memory
    return CpuSpeed(float(f"{peak_flops:.4g}"), float(f"{mem_bandwidth:.4g}"), memory, True)


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def host_cpu_speed(fallback: CpuSpeed) -> CpuSpeed:
    """This CPU's speed: measured once per machine and cached, or the fixed fallback.

    The measurement (about a second) is written to ``cpu-speed.json`` in :func:`cache_dir` and
    reused by every later run on the same machine, so results stay deterministic across runs.
    ``GRAPHIR_MEASURE_CPU=0`` skips both measurement and cache and returns ``fallback`` (the
    cluster catalogue's ``cpu`` entry).
    """
    if os.environ.get(CPU_MEASURE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return fallback
    path = cache_dir() / "cpu-speed.json"
    key = _machine_key()
    try:
        data = json.loads(path.read_text())
        if data.get("version") == _CPU_CACHE_VERSION and data.get("machine") == key:
            return CpuSpeed(float(data["peak_flops"]), float(data["mem_bandwidth"]), int(data["memory"]), True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    speed = _measure_cpu(fallback.memory)
    record = {
        "version": _CPU_CACHE_VERSION,
        "machine": key,
        "peak_flops": speed.peak_flops,
        "mem_bandwidth": speed.mem_bandwidth,
        "memory": speed.memory,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs a re-measurement next time
    return speed


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


def rig_cache_path(count: int) -> Path:
    """Where ``calibrate-comm{rig=true}`` caches the calibrated ``{count}xcpu-workers`` cluster TOML."""
    return cache_dir() / f"cluster-{count}{WORKERS_SUFFIX}.toml"


def cpu_workers_cluster(count: int, spec: str | None = None) -> Cluster:
    """``count`` local TensorFlow workers, one core each: ``/job:worker/task:k/device:CPU:0``, kind ``cpu``.

    The description calibrated on this machine (``python -m graphir.tools.calibrate_comm --rig
    --cluster=2xcpu-workers``: one core's roofline, the executor's per-op overhead, gRPC transfer
    latency and bandwidth, the fixed per-transfer cost) is read from :func:`rig_cache_path` when it
    exists, so every model is judged with one cluster description. Without it (or with
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
