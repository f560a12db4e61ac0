"""Clusters: shorthands, presets, TOML links and wires (multi-hop routes), the measured CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphir.backends.host import CACHE_DIR_ENV, CPU_MEASURE_ENV
from graphir.cluster import (
    DEVICE_KINDS,
    PRESETS,
    ClusterError,
    device_toml,
    load_cluster_toml,
    resolve_cluster,
    widest_routes,
)
from graphir.driver import run
from graphir.links import LinkModel


@pytest.fixture(autouse=True)
def fixed_cpu(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "0")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("spec", "count", "kind", "bandwidth"),
    [("4xV100", 4, "V100", 12e9), ("8xV100-nvlink", 8, "V100", 50e9), ("2xA100-nvlink", 2, "A100", 50e9)],
)
def test_gpu_shorthands(spec, count, kind, bandwidth):
    cluster = resolve_cluster(spec)
    assert len(cluster.devices) == count and cluster.kinds == (kind,)
    assert cluster.devices[-1].tf_device == f"/device:GPU:{count - 1}"
    assert len(cluster.links) == count * (count - 1)
    assert {link.bandwidth for link in cluster.links} == {bandwidth}


def test_h100_shorthand_uses_the_catalogue():
    device = resolve_cluster("4xH100").devices[0]
    assert (device.peak_flops, device.mem_bandwidth, device.memory) == (67e12, 3350e9, 80 << 30)


def test_cpu_shorthand_fallback_is_fixed_and_documented():
    cluster = resolve_cluster("4xcpu")
    assert [d.tf_device for d in cluster.devices] == [f"/device:CPU:{i}" for i in range(4)]
    assert cluster.kinds == ("cpu",)
    device = cluster.devices[0]
    assert (device.peak_flops, device.mem_bandwidth) == (100e9, 20e9)
    assert device.launch_overhead < DEVICE_KINDS["V100"].launch_overhead


def test_cpu_measurement_is_cached_per_machine(monkeypatch, tmp_path):
    monkeypatch.setenv(CPU_MEASURE_ENV, "1")
    first = resolve_cluster("2xcpu").devices[0]
    cache = tmp_path / "cache" / "cpu-speed.json"
    data = json.loads(cache.read_text())
    assert data["peak_flops"] == first.peak_flops and first.peak_flops > 0
    data["peak_flops"] = 1234.0  # a cached value is reused as is: runs stay deterministic
    cache.write_text(json.dumps(data))
    assert resolve_cluster("2xcpu").devices[0].peak_flops == 1234.0


def test_presets_follow_the_papers():
    celeritas = resolve_cluster("celeritas")
    assert len(celeritas.devices) == 4 and {d.memory for d in celeritas.devices} == {32 << 30}
    assert celeritas.link("gpu0", "gpu3").bandwidth == 12e9  # PCIe
    fastt = resolve_cluster("fastt")
    gpus = [d for d in fastt.devices if d.kind == "V100"]
    assert len(gpus) == 8 and {d.memory for d in gpus} == {16 << 30}
    assert [d.tf_device for d in fastt.devices if d.kind == "cpu"] == ["/device:CPU:0"]  # TF-slim's variables
    assert fastt.link("gpu0", "gpu7").bandwidth == 50e9  # NVLink
    pesto = resolve_cluster("pesto")
    assert [d.kind for d in pesto.devices] == ["V100", "V100", "cpu"]
    assert pesto.link("gpu0", "gpu1").bandwidth == 50e9 and pesto.link("cpu0", "gpu1").bandwidth == 12e9
    inter = resolve_cluster("moirai-inter")
    assert [d.kind for d in inter.devices] == ["2080Ti", "T4", "P4", "3060Ti"]
    assert [d.memory >> 30 for d in inter.devices] == [11, 16, 8, 8]
    # Table III, row = sender, column = receiver, Gbps.
    assert inter.link("gpu0", "gpu1").bandwidth == pytest.approx(44.26e9 / 8)
    assert inter.link("gpu1", "gpu0").bandwidth == pytest.approx(42.39e9 / 8)
    assert inter.link("gpu2", "gpu3").bandwidth == pytest.approx(32.95e9 / 8)
    assert inter.devices[3].tf_device == "/job:worker/task:3/device:GPU:0"
    intra = resolve_cluster("moirai-intra")
    assert [d.kind for d in intra.devices] == ["V100-32GB", "V100-32GB", "P100", "P100"]
    assert intra.link("gpu0", "gpu1").bandwidth == pytest.approx(1170.04e9 / 8)
    assert intra.link("gpu3", "gpu2").bandwidth == pytest.approx(581.35e9 / 8)
    assert set(PRESETS) == {"celeritas", "fastt", "fastt-2x4", "pesto", "moirai-inter", "moirai-intra"}


def test_multi_hop_route_uses_its_narrowest_link(tmp_path):
    # Moirai Fig. 3: A - B - D - F is one indirect channel A -> F.
    path = write(
        tmp_path,
        """
[[device]]
name = "A"
[[device]]
name = "B"
[[device]]
name = "D"
[[device]]
name = "F"
[[wire]]
a = "A"
b = "B"
latency = 1e-6
bandwidth = 10e9
[[wire]]
a = "B"
b = "D"
latency = 2e-6
bandwidth = 5e9
[[wire]]
a = "D"
b = "F"
latency = 3e-6
bandwidth = 20e9
""",
    )
    cluster = load_cluster_toml(path)
    link = cluster.link("A", "F")
    assert link.route == ("A", "B", "D", "F")
    assert link.bandwidth == 5e9 and link.latency == pytest.approx(6e-6)
    assert cluster.link("F", "A").bandwidth == 5e9  # wires are bidirectional by default
    assert cluster.link("A", "B").route == () and cluster.link("A", "B").bandwidth == 10e9
    # Moirai §III-C's example: 10 MB/s then 5 MB/s, 100 MB takes 20 s.
    links = LinkModel.from_cluster(cluster)
    a, d = cluster.device_names.index("A"), cluster.device_names.index("D")
    assert links.transfer_time(100e6 * 1000, a, d) == pytest.approx(20.0, rel=1e-3)


def test_widest_route_beats_the_shortest():
    wires = {
        ("a", "c"): (1e-6, 1e9),  # direct but narrow
        ("a", "b"): (1e-6, 10e9),
        ("b", "c"): (1e-6, 10e9),
    }
    routes = widest_routes(["a", "b", "c"], wires, "a")
    assert routes["c"].bandwidth == 10e9 and routes["c"].route == ("a", "b", "c")


def test_explicit_links_override_wires_and_unconnected_wires_fail(tmp_path):
    base = '[[device]]\nname = "x"\n[[device]]\nname = "y"\n[[device]]\nname = "z"\n'
    wires = '[[wire]]\na = "x"\nb = "y"\nbandwidth = 1e9\n'
    with pytest.raises(ClusterError, match="the wires connect no route from 'x' to 'z'"):
        load_cluster_toml(write(tmp_path, base + wires))
    link = '[[link]]\nsrc = "x"\ndst = "z"\nlatency = 0.0\nbandwidth = 3e9\n'
    more = '[[wire]]\na = "y"\nb = "z"\nbandwidth = 2e9\n'
    cluster = load_cluster_toml(write(tmp_path, base + wires + more + link))
    assert cluster.link("x", "z").bandwidth == 3e9 and cluster.link("z", "x").bandwidth == 3e9
    assert cluster.link("y", "x").bandwidth == 1e9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[device]\n", "invalid TOML"),
        ('[[device]]\nname = "a"\npeak_flops = "fast"\n', "'peak_flops' must be a number"),
        ('[[device]]\nname = "a"\nkind = "TPU"\n', "missing key 'peak_flops'"),
        ('[[device]]\nname = "a"\nmem_bandwidth = 0\n', "'mem_bandwidth' must be a finite number > 0"),
        ('[[device]]\nname = "a"\n[[wire]]\na = "a"\nb = "q"\nbandwidth = 1.0\n', "wire #0 joins unknown devices"),
        ('[[device]]\nname = "a"\nmemory = "lots"\n', "memory must be bytes"),
        (
            '[[device]]\nname = "a"\n[[device]]\nname = "b"\npeak_flops = 1e9\n',
            "'a' and 'b' are both of kind 'V100' but differ",
        ),
        ("device = 3\n", "'device' must be an array of tables"),
    ],
)
def test_bad_toml_is_one_clear_line(tmp_path, text, message):
    with pytest.raises(ClusterError, match=message) as info:
        load_cluster_toml(write(tmp_path, text))
    assert "\n" not in str(info.value)


def test_unknown_spec_names_the_accepted_forms():
    with pytest.raises(ClusterError) as info:
        resolve_cluster("moirai")
    text = str(info.value)
    assert text.startswith("error: unknown cluster 'moirai': expected NxKIND[-pcie|-nvlink]")
    assert "moirai-inter" in text and "--list-clusters" in text
    with pytest.raises(ClusterError, match="no interconnect suffix"):
        resolve_cluster("2xcpu-nvlink")


def test_list_clusters_flag(capsys):
    assert run(["--list-clusters"]) == 0
    out = capsys.readouterr().out
    for name in [*PRESETS, "NxKIND[-pcie|-nvlink]", "Nxcpu", "H100"]:
        assert name in out


# ---- topology (issue 14): presets' physical routes and the TOML [[switch]] / [topology] / [overheads]


def test_fastt_topology_is_the_dgx1_hybrid_cube_mesh():
    topology = resolve_cluster("fastt").topology
    assert topology is not None
    nvlink = {(w.src, w.dst): w.bandwidth for w in topology.wires if w.kind == "nvlink"}
    # Every V100 has six NVLink links of 25 GB/s: 150 GB/s out of each GPU.
    for k in range(8):
        assert sum(bw for (a, _), bw in nvlink.items() if a == f"gpu{k}") == 6 * 25e9
    assert topology.path("gpu0", "gpu3").bandwidth == 50e9  # NV2
    assert topology.path("gpu0", "gpu1").route == ("gpu0", "gpu1")  # NV1, direct
    # No NVLink between gpu0 and gpu5 (SYS: no peer access across the sockets): the driver stages the
    # copy through the host's memory, so the route is gpu0 -> host, then host -> gpu5, never relayed by
    # a GPU. Latency: 2 x 5 us PCIe up, host memory 0, then QPI 1 us + 2 x 5 us PCIe down = 21 us.
    path = topology.path("gpu0", "gpu5")
    assert path.route == ("gpu0", "plx0", "hb0", "cpu0", "hb0", "hb1", "plx2", "gpu5")
    assert path.bandwidth == 12e9 and path.latency == pytest.approx(21e-6)
    # The links (congestion=pair|port|task) keep the preset's 50 GB/s channels.
    assert resolve_cluster("fastt").link("gpu0", "gpu5").bandwidth == 50e9


def test_fastt_two_servers_cross_the_network():
    cluster = resolve_cluster("fastt-2x4")
    assert cluster.devices[4].tf_device == "/job:worker/task:1/device:GPU:0"
    link = cluster.link("gpu1", "gpu6")
    assert "ib" in link.route and link.bandwidth == 12e9  # the PCIe hop to the NIC is the narrowest
    assert cluster.link("gpu1", "gpu2").bandwidth == 50e9  # NV2 inside a server


def test_celeritas_topology_shares_switch_uplinks():
    topology = resolve_cluster("celeritas").topology
    assert topology is not None
    assert topology.path("gpu0", "gpu1").route == ("gpu0", "plx0", "gpu1")
    assert topology.path("gpu0", "gpu2").route[:3] == ("gpu0", "plx0", "hb0")
    assert topology.path("gpu1", "gpu3").route[:3] == ("gpu1", "plx0", "hb0")


def test_moirai_topology_keeps_the_measured_numbers():
    cluster = resolve_cluster("moirai-inter")
    assert cluster.topology is not None
    path = cluster.topology.path("gpu0", "gpu1")
    assert path.route == ("gpu0", "nic0", "ib", "nic1", "gpu1")
    assert path.bandwidth == cluster.link("gpu0", "gpu1").bandwidth == pytest.approx(44.26e9 / 8)


def test_toml_switches_relay_and_overheads(tmp_path):
    path = write(
        tmp_path,
        """
[overheads]
transfer = 20e-6
[topology]
relay = false
[[device]]
name = "g0"
op_overhead = 3e-6
[[device]]
name = "g1"
op_overhead = 3e-6
[[device]]
name = "g2"
op_overhead = 3e-6
[[switch]]
name = "sw"
kind = "pcie-switch"
[[wire]]
a = "g0"
b = "sw"
latency = 1e-6
bandwidth = 10e9
[[wire]]
a = "g1"
b = "sw"
latency = 1e-6
bandwidth = 10e9
[[wire]]
a = "g0"
b = "g2"
latency = 2e-6
bandwidth = 40e9
[[wire]]
a = "g2"
b = "sw"
latency = 1e-6
bandwidth = 5e9
""",
    )
    cluster = load_cluster_toml(path)
    assert cluster.transfer_overhead == 20e-6 and cluster.devices[0].op_overhead == 3e-6
    assert cluster.topology is not None
    # relay = false: g1 -> g2 may not pass through g0 (the 40 GB/s wire), only through the switch.
    assert cluster.link("g1", "g2").route == ("g1", "sw", "g2") and cluster.link("g1", "g2").bandwidth == 5e9
    assert cluster.topology.path("g0", "g2").route == ("g0", "g2")
    # The overhead is part of every transfer: 20 us + 2 us + 4e4 B / 40 GB/s = 23 us.
    links = LinkModel.from_cluster(cluster, "topology")
    assert links.transfer_time(4e4, 0, 2) == pytest.approx(23e-6)
    assert [links.resource_names[r] for r in links.routes[1][2]] == ["g1.out", "g1->sw", "sw->g2", "g2.in"]


def test_toml_rejects_unknown_switch_kind(tmp_path):
    path = write(tmp_path, '[[device]]\nname = "g0"\n[[switch]]\nname = "x"\nkind = "hub"\n')
    with pytest.raises(ClusterError, match="kind must be one of"):
        load_cluster_toml(path)


def test_kernel_dispatch_is_read_written_and_kept_per_kind(tmp_path):
    # A device's asynchronous kernel dispatch (seconds; 0 = the additive launch rule) round-trips
    # through its [[device]] table and, like every speed, must agree within a kind.
    path = write(
        tmp_path, '[[device]]\nname = "g0"\nkernel_dispatch = 1e-5\n[[device]]\nname = "g1"\nkernel_dispatch = 1e-5\n'
    )
    cluster = load_cluster_toml(path)
    assert [d.kernel_dispatch for d in cluster.devices] == [1e-5, 1e-5]
    assert "kernel_dispatch = 1e-05" in device_toml(cluster.devices[0])
    assert not any(line.startswith("kernel_dispatch") for line in device_toml(resolve_cluster("4xV100").devices[0]))
    mixed = write(tmp_path, '[[device]]\nname = "g0"\nkernel_dispatch = 1e-5\n[[device]]\nname = "g1"\n')
    with pytest.raises(ClusterError, match="kernel_dispatch"):
        load_cluster_toml(mixed)
