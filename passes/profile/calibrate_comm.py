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

import numpy as np

from graphir.cluster import (
    Cluster,
    ClusterError,
    Device,
    device_toml,
    link_toml,
    load_cluster_toml,
    resolve_cluster,
)
from graphir.errors import GraphIRError, PassError
from graphir.importers.tf import load_tensorflow
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass

DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))
"""1 KiB, 4 KiB, ..., 64 MiB."""


@dataclasses.dataclass(frozen=True)
class LinkFit:
    """A fitted channel: ``latency`` s + bytes / ``bandwidth`` (bytes/s), and the fit's R²."""

    src: str
    dst: str
    latency: float
    bandwidth: float
    r2: float
    samples: tuple[tuple[int, float], ...]


def fit_linear(samples: Sequence[tuple[float, float]]) -> tuple[float, float, float]:
    """Least-squares ``t = latency + bytes / bandwidth`` over (bytes, seconds) points.

    Returns:
        (latency, bandwidth, r2). A negative intercept is clamped to 0 and the slope refitted
        through the origin; a non-positive slope gives an infinite bandwidth.
    """
    x = np.array([s[0] for s in samples], dtype=float)
    y = np.array([s[1] for s in samples], dtype=float)
    design = np.stack([np.ones_like(x), x], axis=1)
    (intercept, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
    if intercept < 0:
        intercept = 0.0
        slope = float(x @ y / (x @ x)) if x @ x > 0 else 0.0
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
    """

    name: ClassVar[str] = "calibrate-comm"
    output: str = ""
    repeats: int = 5
    min_bytes: int = 1024
    max_bytes: int = 64 << 20
    apply: bool = False

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Measure, fit, report, and write the TOML when asked."""
        sizes = calibration_sizes(self.min_bytes, self.max_bytes)
        if self.repeats < 1:
            raise PassError(f"'repeats' must be >= 1, got {self.repeats}")
        if self.apply and not self.output:
            raise PassError("'apply' needs an 'output' TOML path")
        cluster = module.cluster
        fits, unreachable = measure_pairs(cluster, sizes, self.repeats)
        stats = fit_stats(fits, unreachable)
        if self.output:
            write_text(Path(self.output), cluster_toml(cluster, fits))
            if self.apply:
                module.set_cluster(load_cluster_toml(Path(self.output)))
        return PassResult(bool(self.apply), stats)


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
    parser = argparse.ArgumentParser(prog="calibrate-comm", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="2xcpu", help="cluster whose devices to calibrate (default 2xcpu)")
    parser.add_argument("-o", "--output", help="cluster TOML to write")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per size (default 5)")
    parser.add_argument("--min-bytes", type=int, default=1024)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    args = parser.parse_args(argv)
    try:
        cluster = resolve_cluster(args.cluster)
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
