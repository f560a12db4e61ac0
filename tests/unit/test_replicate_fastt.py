"""``python -m devtools.replicate.fastt --quick``: the FastT replication table on VGG-19, 2 GPUs.

The quick run uses the zoo's ``vgg19_train`` at a global batch of twice its own, so each replica is the
zoo graph itself (nothing is re-traced). The table's data-parallel (DP) rate is checked against bounds
computed here from the graph's shapes and the ``fastt`` preset's cited figures (a V100's 15.7 TFLOP/s,
PCIe's 12 GB/s), not by rerunning the tool's chain: the step can be no shorter than GPU 0's
multiply-adds at peak or the weights' two reads through GPU 0/1's shared PCIe uplink, and no longer
than every op and every transfer one after another. The entry is built first when missing (a clean clone).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devtools.replicate import fastt
from graphir.cluster_presets import fastt_gpus
from graphir.driver import load_builtin_passes
from graphir.ir import Module, Node
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import DataParallel
from graphir.simulator import simulate
from graphir.tools import zoo

V100_PEAK = 15.7e12  # FLOP/s, FP32 (NVIDIA V100 datasheet; the preset's catalogue figure)
PCIE_BANDWIDTH = 12e9  # bytes/s, one PCIe 3.0 x16 hop (graphir.cluster_presets.PCIE_HOP, Pesto [42])
# VGG-19 (Simonyan and Zisserman 2015, configuration E): 143,667,240 weights and biases, f32.
VGG19_PARAMS = 143_667_240
# VGG-19 at 224x224: 19.6 G multiply-adds per image (the paper's "19.6 billion FLOPs"), so one
# replica's forward at batch 128 is 2 * 19.6e9 * 128 = 5.02e12 FLOP.
VGG19_FORWARD_MACS = 19.6e9


@pytest.fixture(scope="module", autouse=True)
def vgg19_train_built() -> None:
    """Build the zoo entry on a clean clone (TensorFlow, about half a minute); a no-op once built."""
    zoo.build_entry("vgg19_train", quiet=True)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The quick run's written table."""
    out = tmp_path_factory.mktemp("fastt")
    assert fastt.main(["--quick", "--quiet", "--out", str(out)]) == 0
    return (out / "replicate_fastt.md").read_text()


@pytest.fixture(scope="module")
def dp_module() -> tuple[Module, dict[str, int]]:
    """VGG-19 data-parallel over GPUs 0-1, placed as TF-slim deploys it (the table's DP column)."""
    load_builtin_passes()
    module = zoo.load_entry("vgg19_train")
    module.set_cluster(fastt_gpus(2))  # the fastt preset's GPUs 0-1 and its host
    ctx = PassContext()
    stats = DataParallel(replicas=2, batch=256, inputs="after-reads").run(module, ctx).stats
    Profile().run(module, ctx)
    # TF-slim's deployment: variables, updates and each clone's batch on the host, sums on GPU 0
    Place.of("data-parallel", variables="cpu", sums="first-replica", inputs="cpu").run(module, ctx)
    return module, stats


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _rates(text: str) -> list[float]:
    """Samples/s of the DP, DPOS and OS-DPOS cells of the Table 1 row."""
    return [float(re.match(r"[0-9.]+", cell).group()) for cell in _row(text, "VGG-19 (256)")[2:5]]  # type: ignore[union-attr]


def _product(shape: tuple[int | str, ...]) -> int:
    total = 1
    for dim in shape:
        assert isinstance(dim, int)
        total *= dim
    return total


def _matmul_flops(node: Node) -> int:
    """2 M N K: the output's elements times the contracted dimension, twice (a multiply and an add)."""
    a = node.inputs[0].type.shape
    contracted = a[0] if node.params.get("transpose_a") else a[1]
    assert isinstance(contracted, int)
    return 2 * _product(node.outputs[0].type.shape) * contracted


def _conv_flops(node: Node) -> int:
    """2 N Ho Wo Co Kh Kw Ci for a convolution and for both its gradients (the same multiply-adds).

    Conv2D(input, filter) -> [N,Ho,Wo,Co]; Conv2DBackpropInput(sizes, filter, grad[N,Ho,Wo,Co]);
    Conv2DBackpropFilter(input, sizes, grad[N,Ho,Wo,Co]) -> filter; the filter is [Kh,Kw,Ci,Co].
    """
    if node.op == "tf.Conv2D":
        out, kernel = node.outputs[0].type.shape, node.inputs[1].type.shape
    elif node.op == "tf.Conv2DBackpropInput":
        out, kernel = node.inputs[2].type.shape, node.inputs[1].type.shape
    else:
        out, kernel = node.inputs[2].type.shape, node.outputs[0].type.shape
    return 2 * _product(out) * _product(kernel[:3])


CONVS = ("tf.Conv2D", "tf.Conv2DBackpropInput", "tf.Conv2DBackpropFilter")


def test_quick_run_writes_the_table(table: str, dp_module: tuple[Module, dict[str, int]]) -> None:
    assert table.startswith("# FastT replication")
    for heading in ("Table 1 DP columns", "Table 1 analogue", "Table 6 analogue", "Where and why these numbers differ"):
        assert heading in table
    table1 = _row(table, "VGG-19 (256)")
    # model, 1 GPU (not measured in --quick), DP, DPOS, OS-DPOS, FastT speed-up
    assert table1[1] == "-"
    rates = _rates(table)
    assert all(rate > 0 for rate in rates)
    best = max(rates[0], rates[2])
    assert table1[5] == f"{(best / rates[0] - 1) * 100:+.1f}%"
    module, stats = dp_module
    assert stats["replica-batch"] == 128 and stats["aggregated-values"] == 39  # 38 variables + the loss
    assert f"{256 / simulate(module, congestion='topology', order='dynamic').makespan:.1f}" == f"{rates[0]:.1f}"
    detail = _row(table, "VGG-19 | 2")
    assert detail[2] == f"{stats['nodes']} ({stats['replicated-nodes']} / {stats['shared-nodes']})"


def test_the_deployment_is_tf_slims(dp_module: tuple[Module, dict[str, int]]) -> None:
    """Clone i's convolutions and matmuls on GPU i, every variable on the host (what the bounds assume)."""
    module, _ = dp_module
    nodes = list(module.graph.nodes)
    variables = [n for n in nodes if n.op == "tf.VarHandleOp"]
    assert variables and all(n.device == "cpu0" for n in variables)
    heavy = [n for n in nodes if n.op in (*CONVS, "tf.MatMul")]
    assert len(heavy) == 2 * (16 * 3 + 3 * 3)  # per clone: 16 convolutions and 3 matmuls, each with two gradients
    for node in heavy:
        replica = re.match(r"replica(\d)/", node.name)
        assert replica is not None, node.name  # every heavy op belongs to one clone
        assert node.device == f"gpu{replica.group(1)}", node.name


def test_dp_rate_is_within_hand_computed_bounds(table: str, dp_module: tuple[Module, dict[str, int]]) -> None:
    """The table's DP samples/s against the step's lower and upper bounds computed from first principles."""
    module, _ = dp_module
    nodes = list(module.graph.nodes)
    cluster = module.cluster
    assert cluster is not None

    # The weights: VGG-19's published parameter count (the Adam slots m and v stay on the host).
    weights = [n for n in nodes if n.op == "tf.VarHandleOp" and not str(n.params["shared_name"]).startswith("adam/")]
    weight_bytes = sum(4 * _product(tuple(n.params["shape"])) for n in weights)
    assert len(weights) == 38 and weight_bytes == 4 * VGG19_PARAMS

    # Lower bound 1, compute: GPU 0 runs clone 0's forward and both gradients of every convolution
    # and matmul; no op is faster than its multiply-adds at the V100's peak.
    gpu0 = [n for n in nodes if n.device == "gpu0"]
    forward = sum(
        _conv_flops(n) if n.op == "tf.Conv2D" else _matmul_flops(n)
        for n in gpu0
        if n.op in ("tf.Conv2D", "tf.MatMul") and not n.name.startswith("replica0/gradient_tape")
    )
    assert forward == pytest.approx(2 * VGG19_FORWARD_MACS * 128, rel=0.01)  # the graph is VGG-19 at 224x224, batch 128
    flops = sum(_conv_flops(n) if n.op in CONVS else _matmul_flops(n) for n in gpu0 if n.op in (*CONVS, "tf.MatMul"))
    # forward + the two gradients of every layer (each the layer's own multiply-adds): 3x forward
    assert flops == 3 * forward
    compute_bound = flops / V100_PEAK  # about 15.0e12 / 15.7e12 = 0.96 s
    # Lower bound 2, traffic: both clones read every weight from the host, and GPUs 0 and 1 sit behind
    # one PCIe switch whose single uplink (12 GB/s) carries both reads: 2 x 574.7 MB / 12 GB/s = 96 ms.
    traffic_bound = 2 * weight_bytes / PCIE_BANDWIDTH

    # Upper bound: every op and every transfer one after another. A transfer of b bytes takes at most
    # the latencies of all the wires plus the runtime's overhead plus b over the slowest wire.
    topology = cluster.topology
    assert topology is not None
    slowest = min(wire.bandwidth for wire in topology.wires)
    assert slowest == PCIE_BANDWIDTH
    latency = sum(wire.latency for wire in topology.wires) + cluster.transfer_overhead
    kinds = {d.name: d.kind for d in cluster.devices}
    serial = 0.0
    sent: set[tuple[int, str]] = set()
    for node in nodes:
        seconds = node.cost.time(kinds[node.device]) if node.cost is not None else None
        assert seconds is not None
        serial += seconds
        for value in node.inputs:
            producer = value.producer
            if producer is not None and producer.device != node.device and (id(value), node.device) not in sent:
                sent.add((id(value), node.device))
                serial += latency + value.nbytes / slowest

    dp_rate = _rates(table)[0]
    assert compute_bound > traffic_bound
    # TF-slim's issue order: each clone's batch leaves the host after every weight read (both
    # clones' copies share the host's memory wire, 96 ms), so a clone computes only after them.
    assert dp_rate <= 256 / (traffic_bound + compute_bound)
    # 256 samples / step: at most 256 / 0.96 s = 267 samples/s
    assert 256 / serial <= dp_rate <= 256 / compute_bound
    assert 256 / (2 * compute_bound) < dp_rate  # and the two clones do overlap: better than one GPU's serial work


def test_bad_out_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert fastt.main(["--quick", "--out", str(target)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "not a directory" in err[0]
    assert fastt.main(["--bogus"]) == 1


def test_strategies_option_runs_only_the_named_placements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fastt.parse_strategies("dp-gpu") == ("data-parallel", "dp-gpu")  # DP always runs
    assert fastt.main(["--quick", "--quiet", "--out", str(tmp_path), "--strategies=dp-gpu"]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert "--strategies=data-parallel,dp-gpu" in text.splitlines()[2]
    table1 = _row(text, "VGG-19 (256)")
    assert re.fullmatch(r"[0-9.]+", table1[2]) and table1[3:6] == ["not run", "not run", "-"]
    detail = _row(text, "VGG-19 | 2")
    assert re.fullmatch(r"[0-9.]+", detail[6]) and detail[7:9] == ["-", "-"]  # DP-GPU ran, DPOS did not
    assert "Not run: this run's `--strategies` left out DPOS or OS-DPOS." in text
    assert fastt.main(["--quick", "--strategies=dp,nope"]) == 1
    assert "unknown strategy 'dp'" in capsys.readouterr().err


def test_rows_run_smallest_first_and_a_stopped_run_names_what_is_left() -> None:
    # Rows by device count, then VGG-19 (299 nodes per replica), Inception-v3 (7,690), ResNet-200
    # (18,625): ResNet-200 x 8 (157,950 nodes, the slowest to place) is last.
    order = [(m.label, n) for m, n in fastt.row_order(fastt.MODELS, fastt.DEVICES)]
    assert order[0] == ("VGG-19", 2) and order[-1] == ("ResNet-200", 8)
    assert order.index(("Inception-v3", 8)) < order.index(("ResNet-200", 8))
    assert sorted(order) == sorted((m.label, n) for m in fastt.MODELS for n in fastt.DEVICES)
    # A report written with rows pending says so, and keeps every model's row in the Table 1 analogue.
    text = fastt.render([], {}, {}, "cmd", 1.0, False, ["ResNet-200 x 8"], fastt.MODELS)
    assert "**Incomplete:**" in text and "ResNet-200 x 8" in text
    assert "| ResNet-200 (32) | - | - |" in text
    assert "**Incomplete:**" not in fastt.render([], {}, {}, "cmd", 1.0, False)
    assert "What this run is.** No row measured yet." in text


def test_max_nodes_leaves_fastts_placers_out_on_larger_graphs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The quick row's data-parallel graph (VGG-19 x 2) has 964 nodes: a budget of 963 leaves DPOS and
    # OS-DPOS out of it (not run), DP and DP-GPU still run; the command line records the budget.
    assert fastt.main(["--quick", "--quiet", "--out", str(tmp_path), "--max-nodes=963"]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert "--max-nodes=963" in text.splitlines()[2]
    assert "not every strategy on VGG-19 x 2 (`--strategies` or `--max-nodes`)" in text  # the run note says so
    table1 = _row(text, "VGG-19 (256)")
    assert re.fullmatch(r"[0-9.]+", table1[2]) and table1[3:5] == ["not run", "not run"]
    detail = _row(text, "VGG-19 | 2")
    assert detail[2].startswith("964 ") and re.fullmatch(r"[0-9.]+", detail[6])
    assert fastt.main(["--quick", "--max-nodes=lots"]) == 1
    assert "--max-nodes wants a whole number" in capsys.readouterr().err


def test_models_and_gpus_options_pick_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One cell alone: the names are zoo entries without `_train`, the counts those of the table.
    assert fastt.parse_models("resnet200") == ("resnet200",)
    assert fastt.parse_models("inception_v3, vgg19") == ("vgg19", "inception_v3")  # table order
    assert fastt.parse_gpus("8") == (8,) and fastt.parse_gpus("8,2") == (2, 8)
    models, devices = fastt.select_rows(False, ("resnet200",), (8,))
    assert [m.label for m in models] == ["ResNet-200"] and devices == (8,)
    models, devices = fastt.select_rows(False)
    assert models == fastt.MODELS and devices == fastt.DEVICES
    # The quick run's one row (VGG-19 x 2) is selected by its own names; the command line records them.
    assert fastt.main(["--quick", "--quiet", "--out", str(tmp_path), "--models=vgg19", "--gpus=2"]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert "--models=vgg19 --gpus=2" in text.splitlines()[2]
    assert re.fullmatch(r"[0-9.]+", _row(text, "VGG-19 (256)")[2])
    assert "Every row listed, with all four strategies." in text and "1-minute load average " in text
    # A filter that leaves no row of the run, an unknown model or count: one line, exit 1.
    assert fastt.main(["--quick", "--gpus=8"]) == 1
    assert "select no row of this run" in capsys.readouterr().err
    assert fastt.main(["--models=resnet"]) == 1
    assert "unknown model 'resnet'" in capsys.readouterr().err
    assert fastt.main(["--gpus=3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown GPU count '3'" in err[0]


def test_kernel_dispatch_option_sets_every_gpu_and_only_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --kernel-dispatch=10e-6: every GPU of every cell's cluster gets 10 us, the host CPU keeps 0.
    assert fastt.parse_dispatch("10e-6") == 10e-6 and fastt.parse_dispatch("0") == 0.0
    cluster = fastt.cluster_for(4, dispatch=10e-6)
    assert {d.name: d.kernel_dispatch for d in cluster.devices} == {
        "gpu0": 10e-6,
        "gpu1": 10e-6,
        "gpu2": 10e-6,
        "gpu3": 10e-6,
        "cpu0": 0.0,
    }
    assert [d.kernel_dispatch for d in fastt.cluster_for(2, host=False, dispatch=10e-6).devices] == [10e-6, 10e-6]
    assert all(d.kernel_dispatch == 0.0 for d in fastt.cluster_for(8).devices)  # the preset's: off
    # The option reaches every cell: a 10 ms dispatch per kernel (far above most of VGG-19's kernels at 128
    # samples per GPU) slows the quick row's DP cell to well under half its speed (measured 221.5 -> 87.3
    # samples/s); the command line records it.
    args = ["--quick", "--quiet", "--out", str(tmp_path), "--strategies=data-parallel"]
    assert fastt.main(args) == 0
    plain = float(_row((tmp_path / "replicate_fastt.md").read_text(), "VGG-19 (256)")[2])
    assert fastt.main([*args, "--kernel-dispatch=1e-2"]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert "--kernel-dispatch=0.01" in text.splitlines()[2]
    assert float(_row(text, "VGG-19 (256)")[2]) < 0.5 * plain
    assert fastt.main(["--kernel-dispatch=-1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kernel-dispatch wants seconds" in err[0]
