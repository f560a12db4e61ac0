r"""``calibrate-comm``: measure tensor transfers between devices and fit ``latency + bytes / bandwidth``.

For every ordered pair of the module's cluster devices that TensorFlow can reach (logical CPU
devices made with ``tf.config.set_logical_device_configuration``, and real GPUs when present), it
times transfers of 1 KiB to 64 MiB (powers of 4), takes the median of ``repeats`` runs per size,
and fits the papers' linear model ``t = latency + bytes / bandwidth`` by least squares per pair
(Pesto §3.1 / Fig. 4b ``T = β0 + β1·data``, R² 0.92-0.99; FastT §4 fits one linear model per
device pair; Celeritas §4.2.1 ``t = k·d + b``). It reports R² per pair and can write a cluster
TOML (the module's devices with the fitted ``[[link]]`` tables) usable with ``--cluster=``.

**What one transfer is.** The tensor is a variable resident on the source device; a
``tf.function`` reads it there and makes a ``DeepCopy`` on the destination, so the measurement
covers TF's send/receive rendezvous plus materialising the bytes in the destination's memory.
(Between logical CPU devices TF hands over the buffer without copying; the explicit copy is
what a real device-to-device transfer costs, and keeps the model linear in bytes.) The Python
call overhead, measured on a no-transfer function, is subtracted. When the fitted intercept is
negative, the latency is set to 0 and the bandwidth refitted through the origin.

**On the rig** (``rig=true``, a cluster of ``/job:worker/task:k`` devices such as
``2xcpu-workers``): the cluster's pinned single-core TF workers are started
(:mod:`graphir.backends.tf.rig`) and the micro-benchmarks of
:func:`graphir.backends.tf.rig.calibration_runs` run on them. From the same runs it fits

* per ordered pair, ``t = latency + bytes / bandwidth`` over the measured transfer times (the
  producing kernel's end to the receiver's ``RecvTensor`` end, over TF's gRPC);
* the **per-transfer fixed cost** ``[overheads] transfer``: the smallest fitted intercept over the
  pairs (what every transfer pays in the runtime); each link keeps the rest of its own intercept;
* the **per-op overhead** ``op_overhead`` of each device: whole calibration models
  (:data:`CALIBRATION_MODELS`, none of them in the fidelity benchmark) run on one worker; the
  untraced step minus the sum of traced kernel times, regressed on the number of TF kernels run:
  the slope is the executor's gap per kernel, the intercept the fixed cost of a step (client → master → worker RPCs,
  feeds, fetches), reported as ``step-overhead-s`` (the simulator has no per-step term). Without
  calibration models, a chain of dependent scalar ops gives them instead (its slope minus the op's
  kernel time) — smaller, because TF's executor runs such cheap kernels inline rather than through
  its thread pool. The simulator charges ``op_overhead`` per IR node: exact for TF-imported graphs
  (one kernel per node), an undercount for ONNX-imported ones, whose nodes lower to a few TF ops;
* the **CPU a transfer costs** the sending and the receiving worker (``[overheads] send_cpu``,
  ``send_cpu_per_byte``, ``recv_cpu``, ``recv_cpu_per_byte``, charged by ``congestion=topology``):
  each worker's on-CPU time per step with ``K`` tensors sent minus the same tensors kept on the
  sender (:func:`graphir.backends.tf.rig.transfer_cpu_runs`), fitted as ``a + K·(c0 + c1·bytes)``
  over sizes and ``K`` by relative least squares, pooled over the pairs (one description for the
  testbed); ``a`` (the step's cost of involving a second worker) is dropped, negative terms are 0.
  ``K`` is 16 and 64 tensors in flight at once, as in a model's step: a lone transfer costs more
  fixed CPU (:data:`graphir.backends.tf.rig.TRANSFER_CPU_COUNTS`). The rig's ``[runtime]`` runs
  these costs on one **transfer lane** per worker (``transfer_lanes``, :mod:`graphir.links`);
* a **stream check** (:func:`graphir.backends.tf.rig.stream_runs`): ``K`` tensors in flight one way
  and both ways at once, untraced, merged over the runs by median, written as comments of the
  cluster TOML beside what the fitted description predicts for them
  (:meth:`RigFit.stream_predictions`), so each calibration says how well its lanes hold;
* each device's roofline: one core's FLOP/s (a 1024² MatMul) and bytes/s (an ``AddV2`` of 16 MiB
  vectors, bytes read + written), so ``profile{mode=analytical}`` works on the rig too.

It writes the cluster TOML (default for an ``Nxcpu-workers`` cluster: the cache that resolving
``Nxcpu-workers`` reads, :func:`graphir.backends.host.rig_cache_path`), so every model is then judged
with this one description::

    python -m graphir.tools.calibrate_comm --rig --cluster=2xcpu-workers

TensorFlow is imported only when the pass runs. Logical CPU devices must be configured before
TensorFlow initialises its runtime; in a process where it already has, the devices it has are
used and missing ones are reported as unreachable. From the command line (a fresh process)::

    python -m graphir.tools.calibrate_comm --cluster=2xcpu -o calibrated.toml
    graphir-opt model.onnx --cluster=calibrated.toml ...

In a pipeline: ``graphir-opt m.gir --cluster=2xcpu --passes='calibrate-comm{output=c.toml}'``.
Requires nothing; provides nothing (with ``apply=true`` and an ``output`` it switches the module's
cluster to the written file). Statistics: ``pairs``, ``unreachable-pairs``, ``min-r2``, and
``latency-s.<src>-><dst>``, ``bandwidth.<src>-><dst>``, ``r2.<src>-><dst>`` per pair.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import attrs
import numpy as np

from graphir.backends.host import rig_cache_path
from graphir.cluster import (
    WORKERS_SUFFIX,
    Cluster,
    ClusterError,
    Device,
    TransferCpu,
    TransferService,
    device_toml,
    link_toml,
    load_cluster_toml,
    resolve_cluster,
)
from graphir.cluster_toml import TRANSFER_CPU_KEYS, service_toml
from graphir.errors import GraphIRError, PassError
from graphir.importers.tf import load_tensorflow
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass

DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))
"""1 KiB, 4 KiB, ..., 64 MiB."""

RIG_MAX_BYTES = 16 << 20
"""Largest transfer calibrated on the rig: over TF's gRPC on loopback, 64 MiB took 20x the time of
16 MiB (150 ms against 7.5 ms, measured on the 2-worker rig), far off any line through the smaller
sizes; models' tensors at the benchmark's batch sizes stay below 16 MiB."""


@dataclasses.dataclass(frozen=True)
class LinkFit:
    """A fitted channel: ``latency`` s + bytes / ``bandwidth`` (bytes/s), and the fit's R²."""

    src: str
    dst: str
    latency: float
    bandwidth: float
    r2: float
    samples: tuple[tuple[int, float], ...]


def fit_linear(samples: Sequence[tuple[float, float]], relative: bool = False) -> tuple[float, float, float]:
    """Least-squares ``t = latency + bytes / bandwidth`` over (bytes, seconds) points.

    With ``relative``, each point's residual is divided by its measured time (the fit minimises
    relative errors, so the small transfers that dominate a model's count are not swamped by the
    largest size); R² is still computed on absolute residuals.

    Returns:
        (latency, bandwidth, r2). A negative intercept is clamped to 0 and the slope refitted
        through the origin; a non-positive slope gives an infinite bandwidth.
    """
    x = np.array([s[0] for s in samples], dtype=float)
    y = np.array([s[1] for s in samples], dtype=float)
    weight = 1.0 / np.maximum(y, 1e-12) if relative else np.ones_like(y)
    design = np.stack([np.ones_like(x), x], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(design * weight[:, None], y * weight, rcond=None)
    if intercept < 0:
        intercept = 0.0
        wx, wy = x * weight, y * weight
        slope = float(wx @ wy / (wx @ wx)) if wx @ wx > 0 else 0.0
    predicted = intercept + slope * x
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - predicted) ** 2).sum()) / total if total > 0 else 1.0
    bandwidth = 1.0 / slope if slope > 0 else float("inf")
    return float(intercept), bandwidth, r2


def _tf_device_index(device: Device) -> tuple[str, int] | None:
    match = re.search(r"device:(CPU|GPU):(\d+)$", device.tf_device, flags=re.IGNORECASE)
    return (match.group(1).upper(), int(match.group(2))) if match else None


def configure_logical_cpus(count: int) -> int:
    """Ask TensorFlow for ``count`` logical CPU devices; returns how many it has (lazy TF import)."""
    tf = load_tensorflow("calibrate-comm")

    cpus = tf.config.list_physical_devices("CPU")
    try:
        if count > 1 and cpus:
            tf.config.set_logical_device_configuration(
                cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
            )
    except RuntimeError:
        pass  # the runtime is already initialised: use what it has
    return len(tf.config.list_logical_devices("CPU"))


def measure_pairs(
    cluster: Cluster, sizes: Sequence[int] = DEFAULT_SIZES, repeats: int = 5
) -> tuple[list[LinkFit], list[tuple[str, str]]]:
    """Time transfers between every reachable ordered pair of ``cluster``'s devices and fit each.

    Returns:
        (fits, unreachable pairs).
    """
    tf = load_tensorflow("calibrate-comm")

    parsed = {device.name: _tf_device_index(device) for device in cluster.devices}
    cpu_needed = 1 + max((t[1] for t in parsed.values() if t is not None and t[0] == "CPU"), default=0)
    configure_logical_cpus(cpu_needed)
    available = {d.name.rsplit("device:", 1)[-1].upper() for d in tf.config.list_logical_devices()}
    local = {
        name: f"/device:{t[0]}:{t[1]}" for name, t in parsed.items() if t is not None and f"{t[0]}:{t[1]}" in available
    }
    fits: list[LinkFit] = []
    unreachable: list[tuple[str, str]] = []

    @tf.function
    def null_call() -> Any:
        return tf.constant(0.0)

    overhead = _median_time(lambda: null_call().numpy(), repeats * 4)
    for src in cluster.devices:
        for dst in cluster.devices:
            if src.name == dst.name:
                continue
            if src.name not in local or dst.name not in local:
                unreachable.append((src.name, dst.name))
                continue
            samples: list[tuple[int, float]] = []
            for size in sizes:
                elements = max(1, size // 4)
                with tf.device(local[src.name]):
                    resident = tf.Variable(tf.ones([elements], tf.float32))
                transfer = _transfer_function(tf, resident, local[src.name], local[dst.name])
                seconds = _median_time(lambda fn=transfer: fn().numpy(), repeats)
                samples.append((elements * 4, max(0.0, seconds - overhead)))
                del resident
            latency, bandwidth, r2 = fit_linear(samples)
            fits.append(LinkFit(src.name, dst.name, latency, bandwidth, r2, tuple(samples)))
    return fits, unreachable


def _transfer_function(tf: Any, resident: Any, src: str, dst: str) -> Any:
    @tf.function
    def transfer() -> Any:
        with tf.device(src):
            value = resident.read_value()
        with tf.device(dst):
            copy = tf.raw_ops.DeepCopy(x=value)
            return copy[0]

    return transfer


def _median_time(call: Any, repeats: int) -> float:
    for _ in range(3):  # warm-up: tracing, allocation, caches
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(statistics.median(times))


def cluster_toml(cluster: Cluster, fits: Sequence[LinkFit]) -> str:
    """A cluster TOML with ``cluster``'s devices and one ``[[link]]`` per fitted pair."""
    lines = [f"# Calibrated by graphir calibrate-comm from cluster '{cluster.spec}'.", ""]
    for device in cluster.devices:
        lines += [*device_toml(device), ""]
    fitted = {(f.src, f.dst) for f in fits}
    for link in cluster.links:
        if (link.src, link.dst) not in fitted:
            kept = "not measured: kept from the input cluster"
            lines += [*link_toml(link.src, link.dst, link.latency, link.bandwidth, kept), ""]
    for fit in fits:
        bandwidth = fit.bandwidth if np.isfinite(fit.bandwidth) else 1e15
        latency = float(f"{fit.latency:.4g}")
        fitted_note = f"R^2 = {fit.r2:.4f} over {len(fit.samples)} sizes"
        lines += [*link_toml(fit.src, fit.dst, latency, float(f"{bandwidth:.4g}"), fitted_note), ""]
    return "\n".join(lines)


@register_pass
@dataclasses.dataclass(frozen=True)
class CalibrateComm(Pass):
    """Measure device-pair transfers, fit latency + bytes/bandwidth, optionally write a cluster TOML.

    Options:
        output: cluster TOML to write (empty: statistics only).
        repeats: timed runs per size (the median is fitted).
        min_bytes: smallest transfer (default 1 KiB).
        max_bytes: largest transfer (default 64 MiB); sizes go up by factors of 4.
        apply: after writing ``output``, make it the module's cluster.
        rig: measure on the cluster's local TF workers (see the module docstring) and fit the
            overheads and device speeds too; sizes above 16 MiB (``RIG_MAX_BYTES``) are skipped.
    """

    name: ClassVar[str] = "calibrate-comm"
    output: str = ""
    repeats: int = 5
    min_bytes: int = 1024
    max_bytes: int = 64 << 20
    apply: bool = False
    rig: bool = False

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Measure, fit, report, and write the TOML when asked."""
        sizes = calibration_sizes(self.min_bytes, self.max_bytes)
        if self.repeats < 1:
            raise PassError(f"'repeats' must be >= 1, got {self.repeats}")
        if self.apply and not self.output:
            raise PassError("'apply' needs an 'output' TOML path")
        cluster = module.cluster
        if self.rig:
            fitted = calibrate_rig(cluster, tuple(s for s in sizes if s <= RIG_MAX_BYTES) or sizes[:1], self.repeats)
            stats = fit_stats(fitted.links, []) | fitted.stats()
            text = fitted.toml(cluster)
        else:
            fits, unreachable = measure_pairs(cluster, sizes, self.repeats)
            stats = fit_stats(fits, unreachable)
            text = cluster_toml(cluster, fits)
        if self.output:
            write_text(Path(self.output), text)
            if self.apply:
                module.set_cluster(load_cluster_toml(Path(self.output)))
        return PassResult(bool(self.apply), stats)


@dataclasses.dataclass(frozen=True)
class RigFit:
    """What ``calibrate-comm{rig=true}`` fitted (see the module docstring).

    Attributes:
        links: one fit per measured ordered pair (intercept = the pair's whole fixed cost).
        transfer_overhead: the per-transfer fixed cost (smallest intercept).
        op_overhead: device -> executor seconds per op beyond its kernel.
        step_overhead: device -> fixed seconds per step (intercept of the chain fit).
        peak_flops / mem_bandwidth: device -> one core's roofline.
        transfer_cpu: the CPU a transfer costs its two workers, None when not measured.
        service: how the rig's workers serve transfers (:data:`graphir.backends.tf.rig.WORKER_SERVICE`:
            how the rig starts them, not fitted; written as ``[runtime]``).
        streams: ``(way, bytes, K, median extra step s)`` of the stream check
            (:func:`graphir.backends.tf.rig.stream_runs`), written with what the fitted cluster's
            link model predicts for them (:meth:`stream_predictions`).
    """

    links: tuple[LinkFit, ...]
    transfer_overhead: float
    op_overhead: dict[str, float]
    step_overhead: dict[str, float]
    peak_flops: dict[str, float]
    mem_bandwidth: dict[str, float]
    transfer_cpu: TransferCpu | None = None
    service: TransferService = TransferService()
    streams: tuple[tuple[str, int, int, float], ...] = ()

    def stream_predictions(self, cluster: Cluster) -> list[tuple[str, int, int, float, float]]:
        """Each stream check as ``(way, bytes, K, measured s, predicted s)``.

        The prediction books the ``K`` transfers (both ways: alternately) requested at 0 with the
        fitted numbers on :class:`graphir.links.LinkModel` under ``topology`` (so with this fit's
        ``service``, e.g. ``transfer_lanes``) and takes the last arrival.
        """
        from graphir.links import LinkModel

        names = cluster.device_names
        position = {name: k for k, name in enumerate(names)}
        latency = np.zeros((len(names), len(names)))
        bandwidth = np.full((len(names), len(names)), np.inf)
        for fit in self.links:
            latency[position[fit.src], position[fit.dst]] = fit.latency
            bandwidth[position[fit.src], position[fit.dst]] = fit.bandwidth
        out = []
        for way, nbytes, count, measured in self.streams:
            links = LinkModel(  # afresh per check: the lanes keep their bookings
                names, latency, bandwidth, congestion="topology", transfer_cpu=self.transfer_cpu, service=self.service
            )
            if way == "both":
                directions = [(0, 1), (1, 0)]
            else:
                src, dst = way.split("->")
                directions = [(position[src], position[dst])]
            free = [0.0] * links.num_resources
            last = 0.0
            for _ in range(count):
                for a, b in directions:
                    last = max(last, links.book(free, 0.0, nbytes, a, b)[1])
            out.append((way, nbytes, count, measured, last))
        return out

    def stats(self) -> dict[str, Stat]:
        """Pass statistics of the overheads and speeds."""
        stats: dict[str, Stat] = {"transfer-overhead-s": self.transfer_overhead}
        if self.transfer_cpu is not None:
            for key, value in zip(TRANSFER_CPU_KEYS, attrs.astuple(self.transfer_cpu), strict=True):
                stats[key.replace("_", "-")] = value
        for name in sorted(self.op_overhead):
            stats[f"op-overhead-s.{name}"] = self.op_overhead[name]
            stats[f"step-overhead-s.{name}"] = self.step_overhead[name]
            stats[f"peak-flops.{name}"] = self.peak_flops[name]
            stats[f"mem-bandwidth.{name}"] = self.mem_bandwidth[name]
        return stats

    def toml(self, cluster: Cluster) -> str:
        """The calibrated cluster TOML: devices with their speeds and overheads, links, ``[overheads]``.

        Devices of one kind share speeds (costs are per kind): each kind gets its devices' median.
        """
        lines = [
            f"# Calibrated on the rig by graphir calibrate-comm{{rig=true}} from cluster '{cluster.spec}'.",
            "# step-overhead (client -> master -> worker, per step; [overheads] step is their median): "
            + ", ".join(f"{n} {s * 1e6:.0f} us" for n, s in sorted(self.step_overhead.items())),
        ]
        if self.streams and len(cluster.devices) >= 2:
            lines.append("# streams (K tensors in flight, untraced; extra step time, measured / this file predicts):")
            lines += [
                f"#   {way} {nbytes >> 10} KiB x {count}: {measured * 1e3:.2f} / {predicted * 1e3:.2f} ms"
                for way, nbytes, count, measured, predicted in self.stream_predictions(cluster)
            ]
        lines.append("")
        by_kind: dict[str, list[str]] = {}
        for device in cluster.devices:
            by_kind.setdefault(device.kind, []).append(device.name)

        def kind_median(values: dict[str, float], kind: str, default: float) -> float:
            found = [values[name] for name in by_kind[kind] if name in values]
            return float(f"{statistics.median(found):.4g}") if found else default

        for device in cluster.devices:
            calibrated = attrs.evolve(
                device,
                peak_flops=kind_median(self.peak_flops, device.kind, device.peak_flops),
                mem_bandwidth=kind_median(self.mem_bandwidth, device.kind, device.mem_bandwidth),
                op_overhead=kind_median(self.op_overhead, device.kind, device.op_overhead),
            )
            lines += [*device_toml(calibrated), ""]
        lines += ["[overheads]", f"transfer = {float(f'{self.transfer_overhead:.4g}')!r}"]
        if self.step_overhead:
            lines.append(f"step = {float(f'{statistics.median(self.step_overhead.values()):.4g}')!r}")
        if self.transfer_cpu is not None:
            for key, value in zip(TRANSFER_CPU_KEYS, attrs.astuple(self.transfer_cpu), strict=True):
                lines.append(f"{key} = {float(f'{value:.4g}')!r}")
        lines.append("")
        if service_toml(self.service):
            lines += [*service_toml(self.service), ""]
        for fit in self.links:
            bandwidth = fit.bandwidth if np.isfinite(fit.bandwidth) else 1e15
            latency = float(f"{max(fit.latency - self.transfer_overhead, 0.0):.4g}")
            note = f"R^2 = {fit.r2:.4f} over {len(fit.samples)} sizes; intercept {fit.latency * 1e6:.1f} us"
            lines += [*link_toml(fit.src, fit.dst, latency, float(f"{bandwidth:.4g}"), note), ""]
        return "\n".join(lines)


def fit_rig(measured: Any) -> RigFit:
    """Fit a :class:`~graphir.backends.tf.rig.RigCalibration` (see the module docstring)."""
    links = []
    for (src, dst), samples in sorted(measured.transfers.items()):
        latency, bandwidth, r2 = fit_linear(samples, relative=True)
        links.append(LinkFit(src, dst, latency, bandwidth, r2, tuple(samples)))
    op_overhead, step_overhead = {}, {}
    for name, samples in sorted(measured.chains.items()):
        x = np.array([s[0] for s in samples], dtype=float)
        y = np.array([s[1] for s in samples], dtype=float)
        slope, intercept = np.polyfit(x, y, 1)
        op_overhead[name] = max(float(slope) - measured.chain_kernel_s.get(name, 0.0), 0.0)
        step_overhead[name] = max(float(intercept), 0.0)
    if len({nodes for nodes, _, _ in measured.graphs}) >= 2:  # whole models: the gap per node they see
        x = np.array([g[0] for g in measured.graphs], dtype=float)
        y = np.array([g[1] - g[2] for g in measured.graphs], dtype=float)
        slope, intercept = np.polyfit(x, y, 1)
        for name in op_overhead:
            op_overhead[name] = max(float(slope), 0.0)
            step_overhead[name] = max(float(intercept), 0.0)
    peak = {name: flops / seconds for name, (flops, seconds) in measured.matmul.items() if seconds > 0}
    stream = {name: nbytes / seconds for name, (nbytes, seconds) in measured.stream.items() if seconds > 0}
    overhead = min((fit.latency for fit in links), default=0.0)
    cpu = fit_transfer_cpu(measured.transfer_cpu)
    by_case: dict[tuple[str, int, int], list[float]] = {}
    for way, nbytes, count, seconds in measured.streams:
        by_case.setdefault((way, nbytes, count), []).append(seconds)
    streams = tuple((*case, float(statistics.median(values))) for case, values in sorted(by_case.items()))
    return RigFit(tuple(links), overhead, op_overhead, step_overhead, peak, stream, cpu, streams=streams)


def fit_transfer_cpu(samples: Sequence[tuple[int, int, float, float]]) -> TransferCpu | None:
    """Fit ``a + K·(c0 + c1·bytes)`` to the sender's and the receiver's CPU per step (relative least squares).

    ``samples``: ``(bytes, K, sender s, receiver s)``. Returns the per-transfer terms (``a`` is the
    step's, not a transfer's); None with fewer than three distinct ``(bytes, K)`` points.
    """
    if len({(nbytes, count) for nbytes, count, _, _ in samples}) < 3:
        return None
    design = np.array([[1.0, count, count * nbytes] for nbytes, count, _, _ in samples])
    terms = []
    for column in (2, 3):
        y = np.array([sample[column] for sample in samples], dtype=float)
        weight = 1.0 / np.maximum(np.abs(y), 1e-6)  # relative: small transfers count as much as large ones
        solution, *_ = np.linalg.lstsq(design * weight[:, None], y * weight, rcond=None)
        terms += [max(float(solution[1]), 0.0), max(float(solution[2]), 0.0)]
    return TransferCpu(*terms)


CALIBRATION_MODELS = ("light_bvlc_alexnet", "light_shufflenet", "light_zfnet512", "light_densenet121")
"""ONNX models (shipped with the ``onnx`` package) whose single-device runs calibrate the per-op overhead
on the rig; none of them is a model of the fidelity benchmark, so the benchmark stays out of sample."""


def calibration_modules(names: Sequence[str] = CALIBRATION_MODELS) -> list[Module]:
    """Import the calibration models (see :data:`CALIBRATION_MODELS`)."""
    import onnx

    from graphir.importers import load_module

    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return [load_module(folder / f"{name}.onnx") for name in names]


def calibrate_rig(
    cluster: Cluster,
    sizes: Sequence[int] = DEFAULT_SIZES[:-1],
    repeats: int = 5,
    modules: Sequence[Module] | None = None,
    runs: int = 1,
) -> RigFit:
    """Start the cluster's rig, run its micro-benchmarks and whole calibration models, and fit them.

    ``modules`` default to :func:`calibration_modules` (an empty list: the scalar-chain estimate of
    the per-op overhead only). With ``runs`` > 1 the whole measurement is repeated on a freshly
    started rig each time and the runs are merged before fitting (:func:`merge_calibrations`).
    """
    from graphir.backends.tf.rig import (
        WORKER_SERVICE,
        calibration_runs,
        graph_gaps,
        rig,
        stream_runs,
        transfer_cpu_runs,
    )

    if runs < 1:
        raise PassError(f"calibration needs at least one run, got {runs}")
    if modules is None:
        modules = calibration_modules()
    for module in modules:
        module.set_cluster(cluster)
    measured = []
    for _ in range(runs):
        with rig(cluster) as servers:
            run = calibration_runs(cluster, servers, sizes, repeats)
            run.transfer_cpu = transfer_cpu_runs(cluster, servers)
            run.streams = stream_runs(cluster, servers)
            if modules:
                run.graphs = graph_gaps(modules, servers, cluster.devices[0].name, steps=repeats)
        measured.append(run)
    return dataclasses.replace(fit_rig(merge_calibrations(measured)), service=WORKER_SERVICE)


def merge_calibrations(runs: Sequence[Any]) -> Any:
    """One :class:`~graphir.backends.tf.rig.RigCalibration` from several taken on fresh rigs.

    Every timed point (a transfer size of a pair, a chain length, a kernel) becomes the median of
    its runs' medians; the CPU samples and whole-model gaps, which are fitted by least squares, are
    pooled. Why: four calibrations of the rig within three minutes (16:15-16:18 UTC 2026-11-24, load
    1.0-1.2, ``benchmarks/results/ruler-weight-fills.md``) fitted worker0->worker1 at 1.74, 1.64,
    1.56 and 1.93 GB/s and the receive CPU at 4.5-5.7e-10 s/B, and a transfer-bound fidelity pair
    (lstm-train topo) simulates in proportion: one rig session's slow moment moved every pair of a run.
    """
    from graphir.backends.tf.rig import RigCalibration

    if not runs:
        raise PassError("no calibration runs to merge")

    def median_points(series: Sequence[Sequence[tuple[int, float]]]) -> list[tuple[int, float]]:
        by_x: dict[int, list[float]] = {}
        for points in series:
            for x, y in points:
                by_x.setdefault(x, []).append(y)
        return [(x, float(statistics.median(ys))) for x, ys in sorted(by_x.items())]

    def median_pairs(values: Sequence[tuple[float, float]]) -> tuple[float, float]:
        return values[0][0], float(statistics.median(v[1] for v in values))

    pairs = sorted({key for run in runs for key in run.transfers})
    devices = sorted({key for run in runs for key in run.chains})
    return RigCalibration(
        {key: median_points([run.transfers[key] for run in runs if key in run.transfers]) for key in pairs},
        {key: median_points([run.chains[key] for run in runs if key in run.chains]) for key in devices},
        {
            key: float(statistics.median(run.chain_kernel_s[key] for run in runs if key in run.chain_kernel_s))
            for key in sorted({k for run in runs for k in run.chain_kernel_s})
        },
        {
            key: median_pairs([run.matmul[key] for run in runs if key in run.matmul])
            for key in sorted({k for run in runs for k in run.matmul})
        },
        {
            key: median_pairs([run.stream[key] for run in runs if key in run.stream])
            for key in sorted({k for run in runs for k in run.stream})
        },
        [gap for run in runs for gap in run.graphs],
        [sample for run in runs for sample in run.transfer_cpu],
        [sample for run in runs for sample in run.streams],
    )


def calibration_sizes(min_bytes: int, max_bytes: int) -> tuple[int, ...]:
    """Sizes from ``min_bytes`` to ``max_bytes`` by factors of 4 (at least two, so a line can be fitted)."""
    if min_bytes < 4 or max_bytes < 4 * min_bytes:
        raise PassError(f"need 4 <= min-bytes and 4*min-bytes <= max-bytes, got {min_bytes} and {max_bytes}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return tuple(sizes)


def fit_stats(fits: Sequence[LinkFit], unreachable: Sequence[tuple[str, str]]) -> dict[str, Stat]:
    """Pass statistics for a calibration."""
    stats: dict[str, Stat] = {"pairs": len(fits), "unreachable-pairs": len(unreachable)}
    if fits:
        stats["min-r2"] = min(f.r2 for f in fits)
    for fit in fits:
        key = f"{fit.src}->{fit.dst}"
        stats[f"latency-s.{key}"] = fit.latency
        stats[f"bandwidth.{key}"] = fit.bandwidth
        stats[f"r2.{key}"] = fit.r2
    return stats


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (one-line error when impossible)."""
    try:
        path.write_text(text)
    except OSError as exc:
        raise PassError(f"cannot write '{path}': {exc.strerror or exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m graphir.tools.calibrate_comm --cluster=2xcpu -o out.toml``: calibrate in a fresh process."""
    parser = argparse.ArgumentParser(prog="calibrate-comm", description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--cluster", default="2xcpu", help="cluster whose devices to calibrate (default 2xcpu)")
    parser.add_argument("-o", "--output", help="cluster TOML to write")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per size (default 5)")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument(
        "--runs", type=int, default=1, help="with --rig: independent calibrations on fresh rigs, merged (default 1)"
    )
    parser.add_argument(
        "--max-bytes", type=int, default=None, help="largest transfer (default 64 MiB; with --rig 16 MiB)"
    )
    parser.add_argument(
        "--rig",
        action="store_true",
        help="measure on the cluster's local TF workers, fit overheads and speeds too (default output for "
        "Nxcpu-workers: the cache its resolution reads)",
    )
    args = parser.parse_args(argv)
    try:
        cluster = resolve_cluster(args.cluster)
        if args.max_bytes is None:
            args.max_bytes = RIG_MAX_BYTES if args.rig else 64 << 20
        if args.rig:
            return _main_rig(cluster, args)
        fits, unreachable = measure_pairs(cluster, calibration_sizes(args.min_bytes, args.max_bytes), args.repeats)
        for fit in fits:
            print(
                f"{fit.src} -> {fit.dst}: latency {fit.latency * 1e6:.2f} us, "
                f"bandwidth {fit.bandwidth / 1e9:.3f} GB/s, R^2 {fit.r2:.4f}"
            )
        for src, dst in unreachable:
            print(f"{src} -> {dst}: unreachable from this process")
        if args.output:
            write_text(Path(args.output), cluster_toml(cluster, fits))
    except (GraphIRError, ClusterError) as exc:
        print(f"calibrate-comm: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _main_rig(cluster: Cluster, args: argparse.Namespace) -> int:
    fitted = calibrate_rig(cluster, calibration_sizes(args.min_bytes, args.max_bytes), args.repeats, runs=args.runs)
    for fit in fitted.links:
        print(
            f"{fit.src} -> {fit.dst}: intercept {fit.latency * 1e6:.1f} us, "
            f"bandwidth {fit.bandwidth / 1e9:.3f} GB/s, R^2 {fit.r2:.4f}"
        )
    print(f"per-transfer overhead {fitted.transfer_overhead * 1e6:.1f} us")
    for name in sorted(fitted.op_overhead):
        print(
            f"{name}: op overhead {fitted.op_overhead[name] * 1e6:.2f} us, step overhead "
            f"{fitted.step_overhead[name] * 1e6:.0f} us, {fitted.peak_flops.get(name, 0) / 1e9:.1f} GFLOP/s, "
            f"{fitted.mem_bandwidth.get(name, 0) / 1e9:.1f} GB/s"
        )
    output = args.output
    if output is None and cluster.spec.endswith(WORKERS_SUFFIX) and cluster.spec[: -len(WORKERS_SUFFIX)].isdigit():
        path = rig_cache_path(int(cluster.spec[: -len(WORKERS_SUFFIX)]))
        path.parent.mkdir(parents=True, exist_ok=True)
        output = str(path)
    if output:
        write_text(Path(output), fitted.toml(cluster))
        print(f"wrote {output}")
    return 0
