"""FastT's data-parallel baseline (issue 14, item 7): the ``fastt`` preset's host and TF-slim's deployment.

Everything here is worked by hand: the DGX-1 wiring is typed from ``nvidia-smi topo -m`` (not from the
preset's own table), and the host traffic of ``place{algo=data-parallel variables=cpu}`` is counted
from the tiny MLP's parameter bytes.
"""

from __future__ import annotations

import pytest
from helpers import mlp_training_step

from graphir.cluster import resolve_cluster
from graphir.cluster_presets import fastt_gpus
from graphir.driver import load_builtin_passes
from graphir.errors import PassError
from graphir.links import LinkModel
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import data_parallel_devices, issue_inputs_after_reads
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


def test_fastt_preset_queues_copies_on_tensorflows_streams():
    # FastT runs TensorFlow 1.x: host -> GPU on the GPU's h2d stream, GPU -> GPU on the sender's d2d
    # stream; the host's copies share its memory wire (cpu0 -> hb0), not a port.
    for cluster in (resolve_cluster("fastt"), fastt_gpus(2)):
        assert cluster.topology is not None and cluster.topology.copy_streams
        links = LinkModel.from_cluster(cluster, "topology")
        names = cluster.device_names

        def route(a: str, b: str, links=links, names=names) -> list[str]:
            return [links.resource_names[r] for r in links.routes[names.index(a)][names.index(b)]]

        assert route("cpu0", "gpu0") == ["gpu0.h2d", "cpu0->hb0", "hb0->plx0", "plx0->gpu0"]
        assert route("gpu1", "gpu0") == ["gpu1.d2d", "gpu1->gpu0"]  # NVLink (NV1)
        assert route("gpu0", "cpu0") == ["gpu0.d2h", "gpu0->plx0", "plx0->hb0", "hb0->cpu0"]
    # A GPU pair without NVLink (gpu5 -> gpu0, SYS) is staged through the host's memory: the sender's
    # d2d stream, then its route up to the host and the host's route down to gpu0, so it holds the
    # host's memory wire both ways, which the host's own copies hold too.
    for cluster in (resolve_cluster("fastt"), fastt_gpus(8, host=False)):
        links = LinkModel.from_cluster(cluster, "topology")
        names = cluster.device_names
        staged = [links.resource_names[r] for r in links.routes[names.index("gpu5")][names.index("gpu0")]]
        assert staged == [
            "gpu5.d2d", "gpu5->plx2", "plx2->hb1", "hb1->hb0", "hb0->cpu0", "cpu0->hb0", "hb0->plx0", "plx0->gpu0"
        ]  # fmt: skip
    # Every pair with NVLink keeps its direct route; exactly the 12 SYS pairs (24 ordered) are staged.
    topology = resolve_cluster("fastt").topology
    assert topology is not None
    staged_pairs = {(p.src, p.dst) for p in topology.paths if "cpu0" in p.route[1:-1]}
    sys_pairs = {
        (f"gpu{a}", f"gpu{b}")
        for a, row in enumerate(TOPO_M.strip().splitlines())
        for b, cell in enumerate(row.split()[1:])
        if cell == "SYS"
    }
    assert staged_pairs == sys_pairs and len(sys_pairs) == 24


def _tf_slim(replicas: int):
    module = mlp_training_step(8)
    module.cluster_spec = "fastt"
    Profile().run(module, PassContext())
    placed = data_parallel(module, replicas, replica=mlp_training_step(8 // replicas)).module
    added = issue_inputs_after_reads(placed)
    Place.of("data-parallel", variables="cpu", sums="first-replica", inputs="cpu").run(placed, PassContext())
    return placed, added


def test_inputs_cpu_puts_each_replicas_batch_on_the_host():
    placed, _ = _tf_slim(2)
    device = {n.name: n.device for n in placed.graph.nodes}
    # TF-slim's inputs_device() is /device:CPU:0: each clone's batch (the placeholder x) is on the host ...
    assert device["replica0/x"] == device["replica1/x"] == "cpu0"
    # ... and the rest of each clone on its GPU.
    assert {device[n] for n in device if n.startswith("replica1/") and n != "replica1/x"} == {"gpu1"}
    with pytest.raises(ValueError, match="inputs must be one of"):
        Place.of("data-parallel", inputs="gpu0")


def test_issue_inputs_after_reads_queues_each_batch_behind_its_weights():
    # The MLP's replica-facing reads are w0/read and w1/read; each replica has one placeholder (x):
    # 2 reads x 1 placeholder x R replicas control edges, none onto a shared node.
    for replicas in (1, 2, 4):
        placed, added = _tf_slim(replicas)
        assert added == 2 * replicas
        for k in range(replicas):
            x = placed.graph.node(f"replica{k}/x")
            assert sorted(n.name for n in x.control_inputs) == ["w0/read", "w1/read"]
    # Simulated: the batch reaches each GPU after both of its weights (the reads ran before it on
    # the host, so their copies were queued first on the host's memory wire and the GPU's h2d stream).
    placed, _ = _tf_slim(2)
    result = simulate(placed, congestion="topology", order="dynamic")
    index = placed.graph.index()
    value = {v.name: k for k, v in enumerate(index.values)}
    position = {name: k for k, name in enumerate(result.device_names)}
    for k in range(2):
        gpu = position[f"gpu{k}"]
        batch = result.arrival[(value[f"replica{k}/x"], gpu)]
        weights = [result.arrival[(value[f"w{j}/read"], gpu)] for j in range(2)]
        # (begin, end): the batch starts once both weights' bytes left, and lands after them.
        assert batch[0] > max(begin for begin, _ in weights) and batch[1] > max(end for _, end in weights)
    # Without the issue order the batch leaves whenever the host's executor reaches its placeholder,
    # a root: with the placeholders first among the host's roots, before either weight (the host
    # runs its roots in ``order`` and each weight's read right after its handle, newest first).
    module = mlp_training_step(8)
    module.cluster_spec = "fastt"
    Profile().run(module, PassContext())
    free = data_parallel(module, 2, replica=mlp_training_step(4)).module
    Place.of("data-parallel", variables="cpu", sums="first-replica", inputs="cpu").run(free, PassContext())
    batches = [free.graph.node(f"replica{k}/x") for k in range(2)]
    for node in free.graph.nodes:
        if node.device == "cpu0" and node not in batches:
            node.order += 2
    for k, node in enumerate(batches):
        node.order = k
    unordered = simulate(free, congestion="topology", order="dynamic")
    index = free.graph.index()
    value = {v.name: k for k, v in enumerate(index.values)}
    gpu0 = unordered.device_names.index("gpu0")
    batch = unordered.arrival[(value["replica0/x"], gpu0)]
    assert batch[0] < min(unordered.arrival[(value[f"w{j}/read"], gpu0)][0] for j in range(2))


def test_issue_inputs_after_reads_needs_a_data_parallel_graph():
    with pytest.raises(PassError, match="not a data-parallel graph"):
        issue_inputs_after_reads(mlp_training_step(8))


def test_staged_gradient_waits_for_the_hosts_weight_copy():
    # Worked by hand: a 1.2 GB weight copy host -> gpu3 is queued at t=0; it holds cpu0->hb0 for
    # 1.2e9 / 12e9 = 0.1 s and arrives at 0.1 s + 10 us. A 1.2 GB gradient gpu5 -> gpu0 (SYS pair,
    # staged through the host) queued at t=0 too needs cpu0->hb0 for its way down, so it begins at
    # 0.1 s and arrives at 0.2 s + 21 us. Before the staging the two shared no wire (gpu5's route went
    # hb1 -> hb0 -> plx0 directly) and both arrived after about 0.1 s.
    cluster = resolve_cluster("fastt")
    links = LinkModel.from_cluster(cluster, "topology")
    names = cluster.device_names
    free = [0.0] * links.num_resources
    begin, arrival, _ = links.book(free, 0.0, 1.2e9, names.index("cpu0"), names.index("gpu3"))
    assert begin == 0.0 and arrival == pytest.approx(0.1 + 10e-6)
    begin, arrival, _ = links.book(free, 0.0, 1.2e9, names.index("gpu5"), names.index("gpu0"))
    assert begin == pytest.approx(0.1) and arrival == pytest.approx(0.2 + 21e-6)
    # A GPU pair with NVLink (gpu4 -> gpu0, NV2 at 50 GB/s) shares nothing with the host: 1.2e9 / 50e9 + 5 us.
    begin, arrival, _ = links.book(free, 0.0, 1.2e9, names.index("gpu4"), names.index("gpu0"))
    assert begin == 0.0 and arrival == pytest.approx(0.024 + 5e-6)
