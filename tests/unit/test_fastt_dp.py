"""FastT's data-parallel baseline (issue 14, item 7): the ``fastt`` preset's host and TF-slim's deployment.

Everything here is worked by hand: the DGX-1 wiring is typed from ``nvidia-smi topo -m`` (not from the
preset's own table), and the host traffic of ``place{algo=data-parallel variables=cpu}`` is counted
from the tiny MLP's parameter bytes.
"""

from __future__ import annotations

import pytest
from test_data_parallel import mlp_training_step

from graphir.cluster import resolve_cluster
from graphir.errors import PassError
from graphir.pass_infra import PassContext, load_builtin_passes
from graphir.passes.place import Place
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import data_parallel_devices
from graphir.passes.transform.replicate import data_parallel
from graphir.simulator import simulate

load_builtin_passes()

# ``nvidia-smi topo -m`` on an 8x V100-SXM2-16GB server (OneFlow DLPerf test reports), GPU rows only.
TOPO_M = """
GPU0 X   NV1 NV1 NV2 NV2 SYS SYS SYS
GPU1 NV1 X   NV2 NV1 SYS NV2 SYS SYS
GPU2 NV1 NV2 X   NV2 SYS SYS NV1 SYS
GPU3 NV2 NV1 NV2 X   SYS SYS SYS NV1
GPU4 NV2 SYS SYS SYS X   NV1 NV1 NV2
GPU5 SYS NV2 SYS SYS NV1 X   NV2 NV1
GPU6 SYS SYS NV1 SYS NV1 NV2 X   NV2
GPU7 SYS SYS SYS NV1 NV2 NV1 NV2 X
"""


def test_fastt_nvlink_counts_match_nvidia_smi_topo():
    topology = resolve_cluster("fastt").topology
    assert topology is not None
    nvlink = {(w.src, w.dst): w.bandwidth for w in topology.wires if w.kind == "nvlink"}
    for row in TOPO_M.strip().splitlines():
        head, *cells = row.split()
        a = int(head[3:])
        for b, cell in enumerate(cells):
            if cell.startswith("NV"):
                assert nvlink[(f"gpu{a}", f"gpu{b}")] == int(cell[2:]) * 25e9
            else:
                assert (f"gpu{a}", f"gpu{b}") not in nvlink


def test_fastt_host_sits_on_socket_zero_behind_the_switch_uplinks():
    cluster = resolve_cluster("fastt")
    assert [d.name for d in cluster.devices] == [*(f"gpu{k}" for k in range(8)), "cpu0"]
    assert cluster.devices[8].tf_device == "/device:CPU:0" and cluster.devices[8].kind == "cpu"
    topology = cluster.topology
    assert topology is not None
    # Host -> GPU 0 and GPU 1: the same PCIe switch uplink plx0 <- hb0 (shared by the GPU pair).
    assert topology.path("cpu0", "gpu0").route == ("cpu0", "hb0", "plx0", "gpu0")
    assert topology.path("cpu0", "gpu1").route == ("cpu0", "hb0", "plx0", "gpu1")
    # GPU 5 hangs off socket 1: the route crosses QPI.
    assert topology.path("gpu5", "cpu0").route == ("gpu5", "plx2", "hb1", "hb0", "cpu0")
    # Two PCIe hops of 5 us and 12 GB/s; the host's memory wire adds no latency (as PCIE: 10 us).
    path = topology.path("cpu0", "gpu3")
    assert path.bandwidth == 12e9 and path.latency == pytest.approx(10e-6)
    assert cluster.link("cpu0", "gpu3").bandwidth == 12e9 and cluster.link("gpu0", "gpu7").bandwidth == 50e9


def _placed(replicas: int, variables: str, sums: str = "update"):
    module = mlp_training_step(8)
    module.cluster_spec = "fastt"
    Profile().run(module, PassContext())
    result = data_parallel(module, replicas, replica=mlp_training_step(8 // replicas))
    placed = result.module
    Place.of("data-parallel", variables=variables, sums=sums).run(placed, PassContext())
    return placed


def test_variables_cpu_is_tf_slims_deployment():
    placed = _placed(2, "cpu")
    device = {n.name: n.device for n in placed.graph.nodes}
    # model_deploy: clone i on /device:GPU:i ...
    assert {device[n] for n in device if n.startswith("replica0/")} == {"gpu0"}
    assert {device[n] for n in device if n.startswith("replica1/")} == {"gpu1"}
    # ... variables, their reads, the optimizer slots and updates on /device:CPU:0 ...
    for k in range(2):
        for name in (f"w{k}/h", f"w{k}/read", f"w{k}/m", f"w{k}/v", f"w{k}/adam"):
            assert device[name] == "cpu0", name
        # ... and deploy()'s gradient sums under the optimizer device, the CPU.
        assert device[f"dp/sum/bwd{k}/dw"] == device[f"dp/mean/bwd{k}/dw"] == "cpu0"
    # The loss is not a variable's: its average runs with its first producer, replica 0.
    assert device["dp/sum/loss/sum"] == "gpu0"
    first = _placed(2, "cpu", "first-replica")
    assert first.graph.node("dp/sum/bwd1/dw").device == "gpu0" and first.graph.node("w1/adam").device == "cpu0"


def test_variables_cpu_moves_replicas_times_two_parameter_bytes_over_pcie():
    # Parameters of the (4, 3, 2) MLP: 4x3 + 3x2 floats = 18 x 4 B = 72 B. Each replica reads every
    # weight from the host (72 B down) and sends every gradient back (72 B up): 2 x 72 B per replica.
    for replicas in (1, 2, 4):
        result = simulate(_placed(replicas, "cpu"), congestion="topology")
        down = sum(b for (s, d), b in result.link_bytes.items() if s == "cpu0")
        up = sum(b for (s, d), b in result.link_bytes.items() if d == "cpu0")
        assert (down, up) == (replicas * 72, replicas * 72)
    # With the sums on replica 0's GPU, only the summed gradient goes up (TF-slim's script).
    result = simulate(_placed(4, "cpu", "first-replica"), congestion="topology")
    assert sum(b for (s, d), b in result.link_bytes.items() if d == "cpu0") == 72
    assert sum(b for (s, d), b in result.link_bytes.items() if s == "cpu0") == 4 * 72


def test_variables_cpu_needs_a_host():
    module = mlp_training_step(8)  # 4xV100-nvlink: no CPU device
    result = data_parallel(module, 2, replica=mlp_training_step(4))
    with pytest.raises(PassError, match="no host CPU"):
        data_parallel_devices(result.module, variables="cpu")
    with pytest.raises(ValueError, match="variables must be one of"):
        Place.of("data-parallel", variables="ps")
    with pytest.raises(ValueError, match="sums must be one of"):
        Place.of("data-parallel", sums="gpu3")


def test_balanced_variables_skip_the_host():
    placed = _placed(2, "balanced")
    assert "cpu0" not in {n.device for n in placed.graph.nodes}
