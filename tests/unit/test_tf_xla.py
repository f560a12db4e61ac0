"""Fused kernels (``kernel`` annotations) lowered to XLA clusters, and proven on TensorFlow.

The lowering marks each set (the nodes of one kernel name on one device) as one XLA cluster
(:mod:`graphir.backends.tf.xla`); ``python -m graphir.driver.check --train`` then runs one training
step as imported and after the pipeline, and reports the sets marked against the ``_XlaRun`` ops
TensorFlow ran. Until ``fuse-kernels`` lands, the sets come from
:func:`helpers.mark_kernel_chains` (maximal chains of elementwise ops, consecutive in their device's
order), wrapped here in a test-only pass that the subprocess registers. TensorFlow runs in fresh
processes (logical devices and ``TF_XLA_FLAGS`` must be set before its runtime starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import TWO_TASKS

from graphir.backends.tf.session import XLA_FLAGS, with_xla_flags
from graphir.backends.tf.xla import KernelSet, absorb_constants, check_convex, cluster_report
from graphir.errors import BackendError

TOLERANCE = 1e-5
HERE = Path(__file__).resolve().parent


# --------------------------------------------------------------------------- the rules, on hand-made GraphDefs


def _graph(*nodes: tuple[str, str, list[str]]) -> SimpleNamespace:
    """A GraphDef look-alike: (name, op, inputs) per node (what the checks read)."""
    made = [SimpleNamespace(name=name, op=op, input=inputs, attr={"value": _Sized(4)}) for name, op, inputs in nodes]
    return SimpleNamespace(node=made)


class _Sized:
    def __init__(self, size: int):
        self.size = size

    def ByteSize(self) -> int:  # noqa: N802  (protobuf's name)
        return self.size


def _set(kernel: str, *ops: str, device: str = "/device:CPU:1") -> KernelSet:
    return KernelSet(kernel, "cpu1", device, f"{kernel}@{device}", ops, ops)


def test_two_convex_sets_that_wait_on_each_other_are_refused():
    # A = {a1, a2} and B = {b1, b2} are each convex (no path from a1 to a2, none from b1 to b2),
    # but a1 -> b1 and b2 -> a2: contracted, A -> B -> A. TensorFlow would split one of them.
    graph = _graph(
        ("x", "Placeholder", []),
        ("a1", "Neg", ["x"]),
        ("b2", "Neg", ["x"]),
        ("b1", "Neg", ["a1"]),
        ("a2", "Neg", ["b2"]),
    )
    node_ops = {name: (name,) for name in ("a1", "a2", "b1", "b2")}
    check_convex(graph, [_set("A", "a1", "a2")], node_ops, False)  # alone, each is fine
    check_convex(graph, [_set("B", "b1", "b2")], node_ops, False)
    pattern = r"error: kernels '(A|B)' on 'cpu1' and '(A|B)' on 'cpu1' wait on each other in the lowered graph: a path"
    with pytest.raises(BackendError, match=pattern):
        check_convex(graph, [_set("A", "a1", "a2"), _set("B", "b1", "b2")], node_ops, False)


def test_a_path_through_a_control_edge_makes_a_set_non_convex():
    # s1 -> (control) y -> s2: only a control dependency leaves and re-enters the set.
    graph = _graph(("s1", "Neg", []), ("y", "NoOp", ["^s1"]), ("s2", "Neg", ["s1", "^y"]))
    node_ops = {"s1": ("s1",), "y": ("y",), "s2": ("s2",)}
    with pytest.raises(
        BackendError, match=r"error: kernel 'k' on 'cpu1' is not convex in the lowered graph.*through 'y'"
    ):
        check_convex(graph, [_set("k", "s1", "s2")], node_ops, True)
    try:
        check_convex(graph, [_set("k", "s1", "s2")], node_ops, True)
    except BackendError as exc:
        assert "\n" not in exc.one_line() and "device orders" in exc.one_line()
        assert exc.loc.node == "s1"  # where the path leaves the set


def test_constants_join_the_one_set_that_reads_them():
    graph = _graph(
        ("c_only", "Const", []),  # read by k's ops only: joins k
        ("c_shared", "Const", []),  # read by k and by an unmarked op: stays out
        ("c_other", "Const", []),  # read by the unmarked op only
        ("a", "Mul", ["c_only", "c_shared"]),
        ("b", "Add", ["a", "c_only"]),
        ("u", "Add", ["c_shared", "c_other"]),
    )
    node_ops = {"a": ("a",), "b": ("b",), "u": ("u",)}
    (kernel,) = absorb_constants(graph, [_set("k", "a", "b")], node_ops)
    assert kernel.ops == ("a", "b", "c_only")
    graph.node[0].attr["value"] = _Sized(2 << 20)  # too large to compile into the cluster
    (kernel,) = absorb_constants(graph, [_set("k", "a", "b")], node_ops)
    assert kernel.ops == ("a", "b")


def test_dead_sets_are_not_expected_to_run():
    from graphir.backends.tf.xla import live_sets

    graph = _graph(("a", "Neg", []), ("b", "Neg", ["a"]), ("dead", "Neg", ["b"]), ("out", "Identity", ["b"]))
    kept, pruned = _set("k", "a", "b"), _set("d", "dead")
    assert live_sets(graph, [kept, pruned], ["out:0"]) == [kept]


def test_cluster_report_counts_runs_per_device():
    def partition(*nodes: tuple[str, str, str]) -> SimpleNamespace:
        return SimpleNamespace(node=[SimpleNamespace(name=n, op=op, device=d) for n, op, d in nodes])

    full = "/job:localhost/replica:0/task:0/device:CPU:1"
    sets = [_set("k0", "a"), _set("k1", "b")]
    ran = [partition(("cluster_0_1/xla_run", "_XlaRun", full), ("cluster_1_1/xla_run", "_XlaRun", full))]
    same = lambda actual, expected: actual.endswith(expected)  # noqa: E731
    assert cluster_report(sets, ran, same) == (2, 2, [])
    split = [partition(("cluster_0_1/xla_run", "_XlaRun", full), ("b", "Neg", full))]
    marked, run, problems = cluster_report(sets, split, same)
    assert (marked, run) == (2, 1)
    assert problems == [
        "/device:CPU:1: 2 kernel set(s) marked, 1 XLA cluster(s) ran",
        "kernel 'k1' on 'cpu1': op 'b' ran outside its cluster",
    ]


def test_a_marked_input_from_another_device_is_bridged():
    # k0 = {p} on CPU:0 feeds k1 = {c, d} on CPU:1 by data and by a control edge; u (unmarked) feeds c too.
    from tensorflow.core.framework import graph_pb2

    from graphir.backends.tf.xla import bridge_cross_device_inputs

    graph = graph_pb2.GraphDef()
    graph.node.add(name="x", op="Placeholder", device="/device:CPU:0").attr["dtype"].type = 1
    for name, op, inputs, device in (
        ("p", "Neg", ["x"], "/device:CPU:0"),
        ("u", "Neg", ["x"], "/device:CPU:0"),
        ("c", "AddV2", ["p", "u", "^p"], "/device:CPU:1"),
        ("d", "Mul", ["c", "p:0"], "/device:CPU:1"),
    ):
        graph.node.add(name=name, op=op, input=inputs, device=device).attr["T"].type = 1
    sets = [_set("k0", "p", device="/device:CPU:0"), _set("k1", "c", "d")]
    assert bridge_cross_device_inputs(graph, sets) == 2  # one Identity for p:0 (read twice), one NoOp
    nodes = {node.name: node for node in graph.node}
    assert list(nodes["c"].input) == ["p/graphir_xla_bridge_0", "u", "^p/graphir_xla_bridge_1"]
    assert list(nodes["d"].input) == ["c", "p/graphir_xla_bridge_0"]
    identity, noop = nodes["p/graphir_xla_bridge_0"], nodes["p/graphir_xla_bridge_1"]
    assert (identity.op, identity.device, list(identity.input), identity.attr["T"].type) == (
        "Identity", "/device:CPU:1", ["p"], 1,
    )  # fmt: skip
    assert (noop.op, noop.device, list(noop.input)) == ("NoOp", "/device:CPU:1", ["^p"])


def test_a_marked_constant_read_from_another_device_is_held_on_its_own():
    # c (marked, in k on CPU:1) is read by k's a, by u on CPU:1 and by w on CPU:0: only w is rerouted.
    from tensorflow.core.framework import graph_pb2

    from graphir.backends.tf.xla import hold_marked_constants

    graph = graph_pb2.GraphDef()
    const = graph.node.add(name="c", op="Const", device="/device:CPU:1")
    const.attr["dtype"].type = 1
    for name, inputs, device in (("a", ["c"], "/device:CPU:1"), ("u", ["c"], "/device:CPU:1"), ("w", ["c", "^c"], "")):
        graph.node.add(name=name, op="Neg", input=inputs, device=device or "/device:CPU:0")
    assert hold_marked_constants(graph, [_set("k", "c", "a")]) == 1
    nodes = {node.name: node for node in graph.node}
    assert [list(nodes[n].input) for n in ("a", "u", "w")] == [["c"], ["c"], ["c/graphir_xla_hold_0", "^c"]]
    hold = nodes["c/graphir_xla_hold_0"]
    assert (hold.op, hold.device, list(hold.input), hold.attr["T"].type) == ("Identity", "/device:CPU:1", ["c"], 1)


def test_xla_flags_keep_the_callers_and_add_ours_once():
    assert with_xla_flags(None) == XLA_FLAGS
    assert with_xla_flags(XLA_FLAGS) == XLA_FLAGS
    mine = "--tf_xla_enable_lazy_compilation=true --tf_xla_clustering_debug"
    assert with_xla_flags(mine) == f"{mine} --tf_xla_disable_constant_folding=true"


# --------------------------------------------------------------------------- TensorFlow: lowering and one step

_REGISTER = textwrap.dedent(
    """
    import dataclasses, json, os, sys
    from typing import ClassVar
    sys.path.insert(0, sys.argv[1])
    from graphir.backends.tf.check import configure_logical_cpus
    configure_logical_cpus(4)
    from graphir.driver import load_builtin_passes
    load_builtin_passes()
    from graphir.pass_infra import Pass, PassResult, register_pass
    from helpers import mark_kernel_chains, mark_kernel_regions

    @register_pass
    @dataclasses.dataclass(frozen=True)
    class KernelChains(Pass):
        '''Test only: every maximal chain of elementwise ops on one device becomes a kernel.'''
        name: ClassVar[str] = "test-kernel-chains"

        def run(self, module, ctx):
            ops = os.environ.get("GRAPHIR_TEST_KERNEL_OPS")  # e.g. ONNX ops; default: TF elementwise ops
            chains = mark_kernel_chains(module, frozenset(ops.split(","))) if ops else mark_kernel_chains(module)
            return PassResult(changed=chains > 0, stats={"chains": chains})

    @register_pass
    @dataclasses.dataclass(frozen=True)
    class KernelRegions(Pass):
        '''Test only: greedy convex regions of up to 24 ops (reductions, reshapes... included) become kernels.'''
        name: ClassVar[str] = "test-kernel-regions"

        def run(self, module, ctx):
            sizes = mark_kernel_regions(module)
            return PassResult(changed=bool(sizes), stats={"regions": len(sizes), "largest": max(sizes, default=0)})
    """
)

_CHECK = _REGISTER + textwrap.dedent(
    """
    from graphir.driver.check import main
    sys.exit(main(sys.argv[2:]))
    """
)

_SAME_BYTES = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import graphir.driver.clusters  # the resolver of host clusters such as 2xcpu
    from graphir.backends.tf.lowering import lower
    from graphir.parser import parse_module

    text = Path(sys.argv[1]).read_text()
    marked, plain = parse_module(text), parse_module(text)
    for node in plain.graph.nodes:
        del node.kernel
    marked_def, plain_def = lower(marked).graph_def(), lower(plain).graph_def()
    stripped = 0
    for node in marked_def.node:
        for key in ("_XlaCompile", "_XlaScope", "_XlaSeparateCompiledGradients"):
            if key in node.attr:
                del node.attr[key]
                stripped += 1
    print(json.dumps({
        "same": marked_def.SerializeToString(deterministic=True) == plain_def.SerializeToString(deterministic=True),
        "stripped": stripped,
        "kernels": len(lower(plain).kernels),
    }))
    """
)


def test_the_marks_are_the_only_difference_and_an_unmarked_module_gets_none(tmp_path):
    """The lit golden's module, with and without its ``kernel`` annotations: same GraphDef but for the marks."""
    gir = HERE.parent / "filecheck" / "tf" / "kernels.gir"
    command = [sys.executable, "-c", _SAME_BYTES, str(gir)]
    result = subprocess.run(command, capture_output=True, text=True, env=_env(tmp_path), timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"same": True, "stripped": 15, "kernels": 0}


_WRITE_GRAPH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from helpers import build_train
    graph_def, _ = build_train(sys.argv[2], int(sys.argv[3]), dropout=False)
    Path(sys.argv[4]).write_bytes(graph_def.SerializeToString(deterministic=True))
    """
)


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))


def _write_step(tmp_path_factory: pytest.TempPathFactory, model: str, batch: int) -> Path:
    """A tiny zoo training step (helpers' config for ``model``, no dropout) written as a GraphDef file."""
    path = tmp_path_factory.mktemp("xla") / f"{model}_train.pb"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-c", _WRITE_GRAPH, str(HERE), model, str(batch), str(path)]
    subprocess.run(command, env=env, timeout=300, check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def lstm_step(tmp_path_factory) -> Path:
    """The tiny zoo LSTM training step (helpers.LSTM_CONFIG, batch 2) as a GraphDef file."""
    return _write_step(tmp_path_factory, "lstm", 2)


def _check(graph: Path, passes: str, tmp_path: Path, *extra: str) -> dict:
    command = [sys.executable, "-c", _CHECK, str(HERE), "--train", str(graph), f"--passes={passes}", *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=_env(tmp_path), timeout=600, check=False)
    report = json.loads(result.stdout.splitlines()[-1]) if result.stdout.strip() else {}
    assert result.returncode == 0, (report, result.stderr[-3000:])
    return report


@pytest.mark.slow
def test_marked_training_step_runs_one_cluster_per_kernel_and_equals_the_original(lstm_step, tmp_path):
    """Four devices, the enforced order, elementwise chains marked: each set one XLA cluster, same step."""
    report = _check(lstm_step, "profile,place{algo=m-topo},test-kernel-chains", tmp_path)
    assert report["enforce_order"] is True and len(report["devices"]) == 4, report
    assert report["xla_clusters_marked"] >= 4, report  # the LSTM cells' gate chains, forward and backward
    assert report["xla_clusters_run"] == report["xla_clusters_matched"] == report["xla_clusters_marked"], report
    assert report["xla_cluster_problems"] == [], report
    assert report["max_rel_error"] <= TOLERANCE and report["loss_rel_error"] <= TOLERANCE, report
    assert report["changed"] == report["variables"] >= 20, report  # the step really trained every variable


@pytest.fixture(scope="module")
def gpt_step(tmp_path_factory) -> Path:
    """The tiny zoo GPT training step (helpers.GPT_CONFIG, batch 4, no dropout) as a GraphDef file."""
    return _write_step(tmp_path_factory, "gpt", 4)


def test_large_kernels_under_the_enforced_order_run_one_cluster_each_and_equal_the_original(gpt_step, tmp_path):
    """Regions of up to 24 ops (LayerNorm, softmax, GELU, their gradients) on 4 devices, the order enforced.

    Worked through on this step (seed 0): 98 regions, 744 of the 1,137 nodes, 4 of them dead (no
    fetched value depends on them); the other 94 run as 94 clusters. Before the constant holds
    (:func:`graphir.backends.tf.xla.hold_marked_constants`) a marked constant read from another
    device was replicated there as a one-op cluster.
    """
    report = _check(gpt_step, "profile,place{algo=m-topo},test-kernel-regions", tmp_path)
    assert report["enforce_order"] is True and len(report["devices"]) == 4, report
    assert report["xla_clusters_marked"] >= 60 and report["xla_cluster_problems"] == [], report
    assert report["xla_clusters_run"] == report["xla_clusters_marked"], report
    assert report["xla_clusters_matched"] >= report["xla_clusters_marked"] - 2, report  # by neighbours: near all
    assert report["max_rel_error"] <= TOLERANCE and report["loss_rel_error"] <= TOLERANCE, report


@pytest.mark.slow
def test_kernels_reading_kernels_of_other_devices_stay_one_cluster_each(gpt_step, tmp_path):
    """GELU's backward chain reads the forward's tanh from another device: bridged, it stays one cluster.

    Without the bridges (:func:`graphir.backends.tf.xla.bridge_cross_device_inputs`) TensorFlow ran
    18 clusters for these 16 sets ("the new cluster will introduce a cross device dependency").
    """
    report = _check(gpt_step, "profile,place{algo=m-topo},test-kernel-chains", tmp_path)
    assert len(report["devices"]) == 4 and report["xla_clusters_marked"] >= 12, report
    assert report["xla_clusters_run"] == report["xla_clusters_marked"] and report["xla_cluster_problems"] == [], report
    assert report["max_rel_error"] <= TOLERANCE and report["loss_rel_error"] <= TOLERANCE, report


@pytest.mark.slow
def test_onnx_lowering_marks_conv_relu_chains_and_matches_onnxruntime(tmp_path):
    """The ONNX path (ops traced into a tf.function, one name scope per node): Conv+Relu chains, every value checked."""
    import onnx

    model = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    passes = "--passes=profile,place{algo=m-topo},test-kernel-chains"
    command = [sys.executable, "-c", _CHECK, str(HERE), str(model), "--cluster=4xcpu", passes, "--enforce-order"]
    env = dict(_env(tmp_path), GRAPHIR_TEST_KERNEL_OPS="onnx.Conv,onnx.Relu,onnx.Add")
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, (result.stdout[-2000:], result.stderr[-3000:])
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["xla_clusters_marked"] >= 10 and report["xla_cluster_problems"] == [], report  # 18 at seed 0
    assert report["xla_clusters_run"] == report["xla_clusters_matched"] == report["xla_clusters_marked"], report
    assert report["max_rel_error"] <= 1e-4 and report["placement_mismatches"] == [], report  # against onnxruntime


# --------------------------------------------------------------------------- the 2-worker rig

_RIG = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from graphir.backends.tf.check import initial_variables, relative_error, xla_clusters
    from graphir.backends.tf.lowering import lower
    from graphir.backends.tf.rig import normalise_device, rig, run_on_rig
    from graphir.backends.tf.run import tasks_used
    from graphir.backends.tf.session import SessionRunner, random_inputs
    from graphir.cluster import load_cluster_toml
    from graphir.driver import load_builtin_passes
    from graphir.errors import BackendError
    from graphir.importers import load_module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from helpers import mark_kernel_chains

    load_builtin_passes()
    graph, cluster = Path(sys.argv[2]), load_cluster_toml(Path(sys.argv[3]))
    TASKS = ("/job:worker/task:0", "/job:worker/task:1")

    def placed():
        module = load_module(graph)
        module.set_cluster(cluster)
        PassManager(parse_pipeline("profile,place{algo=m-topo}")).run(module, PassContext(seed=0))
        return module

    plain, marked = placed(), placed()
    chains = mark_kernel_chains(marked)
    variables = initial_variables(plain, 0)
    report = {"chains": chains}
    with rig(cluster, timeout_s=120) as servers:
        steps = {}
        for name, module in (("plain", plain), ("marked", marked)):
            lowered = lower(module)
            inputs = random_inputs(module, lowered.input_names, seed=0)
            held = dict(zip(lowered.feeds, inputs))  # what run_on_rig does for a marked module
            with SessionRunner(module, lowered, servers.target, variables=variables, held_inputs=held) as runner:
                (loss,), partitions = runner.run_partitioned([])
                steps[name] = (loss, runner.read_variables(), lowered, partitions)
        try:  # fed instead of held: refused in one line
            SessionRunner(marked, lowered, servers.target, variables=variables)
            report["fed"] = "ran"
        except BackendError as exc:
            report["fed"] = exc.one_line()
        measured = run_on_rig(marked, servers, steps=1, warmup=0, trace_steps=1)
    (loss0, vars0, _, _), (loss1, vars1, lowered, partitions) = steps["plain"], steps["marked"]
    runs = [normalise_device(n.device) for p in partitions for n in p.node if n.op == "_XlaRun"]
    report.update(xla_clusters(lowered, partitions))
    report.update({
        "loss_error": relative_error([loss1], [loss0]),
        "var_error": max(relative_error([vars1[n]], [vars0[n]]) for n in vars0),
        "variables": len(vars0),
        "sets_by_task": sorted(tasks_used({k.scope: k.tf_device for k in lowered.kernels.values()})),
        "marked_per_task": {t: sum(1 for k in lowered.kernels.values() if k.tf_device.startswith(t)) for t in TASKS},
        "run_per_task": {t: sum(1 for d in runs if d.startswith(t)) for t in TASKS},
        "rig_xla_clusters": list(measured.xla_clusters),
        "rig_kernel_seconds": len(measured.kernel_seconds),
        "rig_kernel_nodes_timed": sum(n in measured.node_seconds for k in lowered.kernels.values() for n in k.nodes),
    })
    print(json.dumps(report))
    """
)


@pytest.mark.slow
def test_marked_module_runs_on_the_two_worker_rig(lstm_step, tmp_path):
    """Pinned workers, every input held: one cluster per set on the set's task, the same step as unmarked."""
    cluster = tmp_path / "two_tasks.toml"
    cluster.write_text(TWO_TASKS)
    command = [sys.executable, "-c", _RIG, str(HERE), str(lstm_step), str(cluster)]
    result = subprocess.run(command, capture_output=True, text=True, env=_env(tmp_path), timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["chains"] == report["xla_clusters_marked"] >= 4, report
    assert report["xla_clusters_run"] == report["xla_clusters_marked"] and report["xla_cluster_problems"] == [], report
    assert report["run_per_task"] == report["marked_per_task"], report
    assert min(report["marked_per_task"].values()) >= 1, report  # clusters on both tasks
    assert report["loss_error"] <= TOLERANCE and report["var_error"] <= TOLERANCE, report
    assert "splits XLA clusters: hold it" in report["fed"], report
    # run_on_rig (every input held): each kernel's cluster time, matched to its set; none per node
    assert report["rig_xla_clusters"] == [report["chains"]] * 2, report
    assert report["rig_kernel_seconds"] == report["chains"] and report["rig_kernel_nodes_timed"] == 0, report
