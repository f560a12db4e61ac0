"""``calibrate-comm``: least-squares link fits, the TOML it writes, and a real run on 2 logical CPUs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV
from graphir.cluster import load_cluster_toml, resolve_cluster
from graphir.errors import PassError
from graphir.passes.profile.calibrate_comm import LinkFit, calibration_sizes, cluster_toml, fit_linear, fit_stats


def test_fit_recovers_latency_and_bandwidth():
    samples = [(size, 20e-6 + size / 8e9) for size in calibration_sizes(1024, 64 << 20)]
    latency, bandwidth, r2 = fit_linear(samples)
    assert latency == pytest.approx(20e-6) and bandwidth == pytest.approx(8e9) and r2 == pytest.approx(1.0)


def test_negative_intercept_is_clamped_and_noise_lowers_r2():
    latency, bandwidth, _ = fit_linear([(1000, 0.0), (2000, 1.5e-6), (4000, 4.5e-6)])
    assert latency == 0.0 and bandwidth > 0
    _, _, r2 = fit_linear([(1, 1.0), (2, 3.0), (3, 1.0), (4, 3.0)])
    assert r2 < 0.5


def test_sizes_span_1kib_to_64mib_by_factors_of_4():
    sizes = calibration_sizes(1024, 64 << 20)
    assert sizes[0] == 1024 and sizes[-1] == 64 << 20 and len(sizes) == 9
    with pytest.raises(PassError, match="4\\*min-bytes <= max-bytes"):
        calibration_sizes(1024, 2048)


def test_written_toml_is_a_usable_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    cluster = resolve_cluster("3xcpu")
    fits = [LinkFit("cpu0", "cpu1", 3e-5, 9e9, 0.99, ((1024, 3e-5),)), LinkFit("cpu1", "cpu0", 2e-5, 7e9, 0.98, ())]
    path = tmp_path / "c.toml"
    path.write_text(cluster_toml(cluster, fits))
    loaded = load_cluster_toml(path)
    assert loaded.device_names == cluster.device_names
    assert loaded.devices[0].peak_flops == cluster.devices[0].peak_flops
    assert loaded.link("cpu0", "cpu1").bandwidth == 9e9 and loaded.link("cpu1", "cpu0").latency == 2e-5
    assert loaded.link("cpu0", "cpu2") == cluster.link("cpu0", "cpu2")  # not measured: kept
    stats = fit_stats(fits, [("cpu0", "cpu2")])
    assert stats["min-r2"] == 0.98 and stats["unreachable-pairs"] == 1 and stats["r2.cpu0->cpu1"] == 0.99


@pytest.mark.slow
def test_two_logical_cpus_fit_a_line(tmp_path):
    # A fresh process: TensorFlow's logical devices must be configured before its runtime starts.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **{CACHE_DIR_ENV: str(tmp_path / "cache")})
    out = tmp_path / "calibrated.toml"
    command = [sys.executable, "-m", "graphir.tools.calibrate_comm", "--cluster=2xcpu", "-o", str(out), "--repeats=7"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    r2 = [float(v) for v in re.findall(r"R\^2 ([0-9.]+)", result.stdout)]
    print(result.stdout)
    assert len(r2) == 2 and min(r2) >= 0.9
    cluster = resolve_cluster(str(out))
    link = cluster.link("cpu0", "cpu1")
    assert link.bandwidth > 1e8 and 0 <= link.latency < 1e-2
    assert Path(out).read_text().count("[[link]]") == 2
