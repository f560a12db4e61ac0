"""The fidelity rig: pinned local TF workers, step statistics, ``profile{mode=tf-run}``, rig calibration fits.

The parsing and fitting tests use hand-built step statistics and calibration samples (no
TensorFlow); one test starts a real 2-worker rig in a subprocess on a tiny graph.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import rig_calibration

from graphir.backends.host import cpu_workers_cluster, rig_cache_path
from graphir.backends.tf.rig import normalise_device, parse_step_stats, rig_cores
from graphir.cluster import load_cluster_toml, resolve_cluster
from graphir.cluster_model import ClusterError
from graphir.passes.profile.calibrate_comm import fit_rig

W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def _stat(
    name: str, start_us: int, op_start_ns: int, op_end_ns: int, label: str = "", end_us: int = 0
) -> SimpleNamespace:
    return SimpleNamespace(
        node_name=name,
        all_start_micros=start_us,
        all_start_nanos=start_us * 1000,
        op_start_rel_nanos=op_start_ns,
        op_end_rel_nanos=op_end_ns,
        op_start_rel_micros=op_start_ns // 1000,
        op_end_rel_micros=op_end_ns // 1000,
        all_end_rel_micros=end_us,
        timeline_label=label,
        output=[
            SimpleNamespace(
                tensor_description=SimpleNamespace(allocation_description=SimpleNamespace(requested_bytes=4096))
            )
        ],
    )


def _node(name: str, op: str, inputs: list[str], **attrs: str) -> SimpleNamespace:
    attr = {key: SimpleNamespace(s=value.encode()) for key, value in attrs.items()}
    return SimpleNamespace(name=name, op=op, input=inputs, attr=attr)


def test_parse_step_stats_times_kernels_and_transfers():
    """Transfer time = producer kernel end -> RecvTensor end, on the same wall clock."""
    metadata = SimpleNamespace(
        step_stats=SimpleNamespace(
            dev_stats=[
                SimpleNamespace(device=W0, node_stats=[_stat("b", 1_000, 0, 2_000_000)]),  # b: 1.000 .. 1.002 s (us)
                SimpleNamespace(
                    device=W1,
                    node_stats=[
                        _stat("RecvTensor", 3_100, 0, 0, f"[4.0KB] [1Gb/s] edge_3_b from {W0} to {W1}", end_us=400),
                        _stat("c", 3_600, 0, 500_000),
                    ],
                ),
            ]
        ),
        partition_graphs=[
            SimpleNamespace(
                node=[_node("b_S0", "_Send", ["b"], tensor_name="edge_3_b", send_device=W0, recv_device=W1)]
            ),
            SimpleNamespace(node=[_node("b_S1", "_Recv", [], tensor_name="edge_3_b", send_device=W0, recv_device=W1)]),
        ],
    )
    trace = parse_step_stats(metadata)
    assert set(trace.ops) == {"b", "c"}
    assert trace.ops["b"].device == "/job:worker/task:0/device:CPU:0"
    assert trace.ops["b"].seconds == pytest.approx(2e-3)
    assert trace.ops["c"].seconds == pytest.approx(0.5e-3)
    (transfer,) = trace.transfers
    assert (transfer.producer, transfer.output, transfer.nbytes) == ("b", 0, 4096)
    assert transfer.src.endswith("task:0/device:CPU:0") and transfer.dst.endswith("task:1/device:CPU:0")
    # b ends at 1_000 us + 2_000 us = 3_000 us; the receive ends at 3_100 + 400 = 3_500 us
    assert transfer.seconds == pytest.approx(500e-6)


def test_device_names_and_cores():
    assert normalise_device(W1) == "/job:worker/task:1/device:CPU:0"
    cores = rig_cores(3)
    assert len(cores) == 3 and set(cores) <= os.sched_getaffinity(0)


def test_fit_rig_recovers_overheads_and_links(tmp_path):
    fitted = fit_rig(rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=4e-6, step=600e-6))
    assert fitted.transfer_overhead == pytest.approx(300e-6, rel=1e-6)
    assert {(f.src, f.dst): f.latency for f in fitted.links}[("worker1", "worker0")] == pytest.approx(600e-6, rel=1e-6)
    assert all(f.bandwidth == pytest.approx(2e9, rel=1e-6) for f in fitted.links)
    assert fitted.op_overhead["worker0"] == pytest.approx(4e-6, rel=1e-6)
    assert fitted.step_overhead["worker1"] == pytest.approx(600e-6, rel=1e-6)
    assert fitted.peak_flops["worker0"] == pytest.approx(40e9)
    path = tmp_path / "rig.toml"
    path.write_text(fitted.toml(cpu_workers_cluster(2)))
    cluster = load_cluster_toml(path)
    assert cluster.transfer_overhead == pytest.approx(300e-6)
    assert cluster.step_overhead == pytest.approx(600e-6)  # [overheads] step: the chain fits' intercept
    assert [d.op_overhead for d in cluster.devices] == [pytest.approx(4e-6)] * 2
    assert [d.peak_flops for d in cluster.devices] == [pytest.approx(40e9)] * 2
    links = {(link.src, link.dst): link for link in cluster.links}
    assert links[("worker0", "worker1")].latency == pytest.approx(0.0, abs=1e-9)  # all of it is the overhead
    assert links[("worker1", "worker0")].latency == pytest.approx(300e-6, rel=1e-3)


def test_workers_shorthand_reads_the_calibrated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("GRAPHIR_MEASURE_CPU", "1")
    default = resolve_cluster("2xcpu-workers")
    assert [d.tf_device for d in default.devices] == [f"/job:worker/task:{k}/device:CPU:0" for k in range(2)]
    assert default.transfer_overhead == 0.0
    fitted = fit_rig(rig_calibration(latency=250e-6, bandwidth=1e9, kernel=1e-6, gap=2e-6, step=500e-6))
    rig_cache_path(2).write_text(fitted.toml(default))
    calibrated = resolve_cluster("2xcpu-workers")
    assert calibrated.spec == "2xcpu-workers" and calibrated.transfer_overhead == pytest.approx(250e-6)
    monkeypatch.setenv("GRAPHIR_MEASURE_CPU", "0")  # deterministic outputs: the cache is ignored
    assert resolve_cluster("2xcpu-workers").transfer_overhead == 0.0
    with pytest.raises(ClusterError, match="between 1 and 64 workers"):
        resolve_cluster("0xcpu-workers")


_RIG_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from graphir.backends.tf.rig import rig, run_on_rig
    from graphir.driver import load_builtin_passes
    from graphir.driver.clusters import resolve_cluster
    from graphir.ir import Graph, Module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.types import DType, TensorType

    def held_input_module(cluster):
        # A TF step: a placeholder on task 1 (doubled there), a chain of 30 MatMuls on task 0.
        import numpy as np
        import tensorflow as tf
        from graphir.backends.tf import lower
        from graphir.importers.tf import import_graphdef

        tf_graph = tf.Graph()
        with tf_graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [64, 64], name="x")
            z = tf.identity(x * 2.0, name="z")
            a = tf.constant(np.eye(256, dtype=np.float32), name="a")
            y = a
            for k in range(30):
                y = tf.matmul(y, a, name=f"chain{k}")
            tf.identity(tf.reduce_sum(y) + tf.reduce_sum(z), name="out")
        held = import_graphdef(tf_graph.as_graph_def(), name="held", source="<held>")
        held.set_cluster(cluster)
        for node in held.graph.nodes:
            node.device = "worker1" if node.name in ("x", "mul", "mul/y", "z") else "worker0"
        return held, lower(held, enforce_order=False)

    def held_input_starts(held, lowered, servers):
        # When task 1's first op starts, from the end of task 0's chain, with its input fed and held.
        import numpy as np
        from graphir.backends.tf.rig import parse_step_stats
        from graphir.backends.tf.run import SessionRunner, remote_feeds

        value = np.ones((64, 64), np.float32)
        remote = remote_feeds(lowered, servers.master_task)
        out = {"remote": list(remote)}
        for mode, kept, inputs in (("fed", {}, [value]), ("held", {f: value for f in remote}, [])):
            with SessionRunner(held, lowered, servers.target, held_inputs=kept, timeout_s=60) as runner:
                runner.run(inputs)
                traces = [parse_step_stats(runner.run_metadata(inputs)) for _ in range(2)]
                out[mode + "_output"] = float(runner.run(inputs)[0])
            out[mode] = [
                (t.ops["mul"].start - t.ops["chain29"].end) / (t.ops["chain29"].end - t.ops["chain0"].start)
                for t in traces
            ]
        return out

    load_builtin_passes()
    t = TensorType(DType.F32, (128, 256))
    graph = Graph()
    x = graph.add_input("x", t)
    w = graph.add_input("w", TensorType(DType.F32, (256, 256)))
    a = graph.add_node("onnx.MatMul", [x, w], [t], name="a")
    b = graph.add_node("onnx.Relu", [a.outputs[0]], [t], name="b")
    c = graph.add_node("onnx.MatMul", [x, w], [t], name="c")
    d = graph.add_node("onnx.Relu", [c.outputs[0]], [t], name="d")
    e = graph.add_node("onnx.Add", [b.outputs[0], d.outputs[0]], [t], name="e")
    graph.set_outputs([e.outputs[0]])
    module = Module("tiny", graph)
    module.set_cluster(resolve_cluster("2xcpu-workers"))
    result = PassManager(parse_pipeline("profile{mode=tf-run iterations=2 warmup=1}")).run(module, PassContext(seed=0))
    costs = {n.name: n.cost.time("cpu") for n in graph.nodes}
    unplaced = all(n.device is None for n in graph.nodes)
    placement = [(a, "worker0"), (b, "worker0"), (c, "worker1"), (d, "worker1"), (e, "worker0")]
    for order, (node, device) in enumerate(placement):
        node.device, node.order = device, order
    held_module, held_lowered = held_input_module(module.cluster)
    with rig(module.cluster, timeout_s=60) as servers:
        pids = [p.pid for p in servers.processes.values()]
        environments = [open(f"/proc/{pid}/environ", "rb").read().split(b"\\0") for pid in pids]
        sessions = [os.getsid(pid) == pid for pid in pids]
        held_starts = held_input_starts(held_module, held_lowered, servers)
        run = run_on_rig(module, servers, steps=2, warmup=1, trace_steps=2, timeout_s=60)
        # min_seconds: timed steps continue until they add up to it, bounded by max_steps
        longer = run_on_rig(
            module, servers, steps=2, warmup=0, trace_steps=0, min_seconds=1.0, max_steps=5000, timeout_s=60
        )
        capped = run_on_rig(
            module, servers, steps=2, warmup=0, trace_steps=0, min_seconds=60, max_steps=4, timeout_s=60
        )
    alive = [p.poll() is None for p in servers.processes.values()]
    print(json.dumps({
        "costs": costs, "unplaced": unplaced, "stats": result[0].result.stats,
        "devices": run.node_devices, "transfers": run.transfers, "times": run.times_s, "alive": alive,
        "longer": longer.times_s, "capped": capped.times_s,
        "bfc": [b"TF_CPU_ALLOCATOR_USE_BFC=true" in environment for environment in environments],
        "held": held_starts,
        "sessions": sessions,
    }))
    """
)


def test_two_worker_rig_measures_nodes_and_transfers(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    # Three TF processes start (the script and two workers): minutes when other jobs share the cores.
    result = subprocess.run(
        [sys.executable, "-c", _RIG_SCRIPT], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["unplaced"], "profile{mode=tf-run} restores an unplaced module"
    assert report["costs"]["a"] > 0 and report["costs"]["c"] > 0  # measured MatMul kernels
    assert report["devices"] == {
        "a": "/job:worker/task:0/device:CPU:0",
        "b": "/job:worker/task:0/device:CPU:0",
        "c": "/job:worker/task:1/device:CPU:0",
        "d": "/job:worker/task:1/device:CPU:0",
        "e": "/job:worker/task:0/device:CPU:0",
    }
    sent = {
        (value, src[-12:], dst[-12:]): (nbytes, seconds) for value, src, dst, nbytes, seconds in report["transfers"]
    }
    nbytes, seconds = sent[("d", "task:1/device:CPU:0"[-12:], "task:0/device:CPU:0"[-12:])]
    assert nbytes == 128 * 256 * 4 and 0 < seconds < 1.0
    assert len(report["times"]) == 2 and all(t > 0 for t in report["times"])
    # a step of this graph takes milliseconds (tens under load): two are far from 1 s, so more were timed
    assert len(report["longer"]) > 2 and sum(report["longer"]) >= 1.0
    assert sum(report["longer"][:-1]) < 1.0, "timing stops at the first step that reaches min_seconds"
    assert len(report["capped"]) == 4
    assert report["alive"] == [False, False], "the workers stop when the rig closes"
    assert report["bfc"] == [True, True], "every worker allocates through TF's BFC allocator"
    assert report["sessions"] == [True, True], "every worker leads its own session: its own autogroup"
    # An input placed on task 1 and fed waits for task 0's one compute thread to run out of work (the
    # feed enters by task 0); held on task 1 (run_on_rig's remote_feeds), task 1 starts at once.
    # Times are (task 1's first op start - the end of task 0's chain) / the chain's duration.
    held = report["held"]
    assert held["remote"] == ["x:0"]
    assert held["fed_output"] == held["held_output"] == 64 * 64 * 2 + 256
    assert statistics.median(held["fed"]) > -0.1, "fed: task 1 waits for task 0's chain"
    assert statistics.median(held["held"]) < -0.5, "held: task 1 runs while task 0's chain runs"


def test_remote_feeds_are_the_inputs_placed_off_the_master_task():
    from graphir.backends.tf.run import remote_feeds
    from graphir.errors import BackendError

    lowered = SimpleNamespace(
        feeds=("r0/x:0", "r1/x:0", "r1/labels:0", "free:0"),
        node_ops={"r0/x": ("r0/x",), "r1/x": ("r1/x",), "r1/labels": ("r1/labels",), "free": ("free",)},
        node_devices={"r0/x": W0, "r1/x": "/job:worker/task:1/device:CPU:0", "r1/labels": W1, "free": ""},
    )
    assert remote_feeds(lowered, "/job:worker/task:0") == ("r1/x:0", "r1/labels:0")
    assert remote_feeds(lowered, "/job:worker/task:1") == ("r0/x:0",)
    with pytest.raises(BackendError, match="names no task"):
        remote_feeds(lowered, "grpc://127.0.0.1:1")


def test_tf_run_refuses_a_cluster_without_workers():
    from graphir.errors import PassError
    from graphir.ir import Graph, Module
    from graphir.pass_infra import PassContext
    from graphir.passes.profile import Profile

    module = Module("m", Graph())
    module.set_cluster(resolve_cluster("2xcpu"))
    with pytest.raises(PassError, match="needs /job:worker/task:k devices"):
        Profile(mode="tf-run").run(module, PassContext())


def test_fidelity_fine_placement_deals_colocation_classes():
    from devtools.bench_fidelity import fine_placement
    from graphir.ir import Graph, Module
    from graphir.types import DType, TensorType

    t = TensorType(DType.F32, (2,))
    graph = Graph()
    x = graph.add_input("x", t)
    nodes = []
    value = x
    for k in range(5):
        node = graph.add_node("onnx.Relu", [value], [t], name=f"n{k}")
        value = node.outputs[0]
        nodes.append(node)
    nodes[3].colocate = nodes[1].colocate = "pair"
    graph.set_outputs([value])
    module = Module("m", graph)
    module.set_cluster(cpu_workers_cluster(2))
    mapping = fine_placement(module)
    assert mapping == {"n0": "worker0", "n1": "worker1", "n2": "worker0", "n3": "worker1", "n4": "worker1"}
    assert Path(rig_cache_path(2)).name == "cluster-2xcpu-workers.toml"


def test_fidelity_resized_training_steps_are_smaller_zoo_configurations():
    """gpt-train and lstm-train: every option of the zoo entry's builder given, none larger than the zoo's."""
    from devtools.bench_fidelity import MODELS
    from graphir.tools.zoo_entries import ENTRIES

    resized = {name: source for name, source in MODELS.items() if source.startswith("zoo-config:")}
    assert set(resized) == {"gpt-train", "lstm-train"}
    for source in resized.values():
        _, model, options = source.split(":")
        config = {key: int(value) for key, value in (item.split("=") for item in options.split(","))}
        zoo = dict(ENTRIES[f"{model}_train"].config)
        assert set(config) == set(zoo), model
        assert all(config[key] <= zoo[key] for key in zoo) and config != zoo, model


def test_fit_rig_takes_the_op_overhead_from_whole_models():
    """Step minus kernel sum over several models: slope in kernels = per-op gap, intercept = step cost."""
    measured = rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=0.5e-6, step=600e-6)
    measured.graphs = [(ops, 0.1 + 700e-6 + ops * 5e-6, 0.1) for ops in (200, 2000, 6000)]
    fitted = fit_rig(measured)
    assert fitted.op_overhead == {"worker0": pytest.approx(5e-6), "worker1": pytest.approx(5e-6)}
    assert fitted.step_overhead["worker0"] == pytest.approx(700e-6)
    measured.graphs = measured.graphs[:1]  # one model cannot give a slope: the scalar chain decides
    assert fit_rig(measured).op_overhead["worker0"] == pytest.approx(0.5e-6, rel=1e-6)


def test_tf_run_scales_traced_kernels_to_the_untraced_step():
    """Tracing inflates kernel times: a one-device run is scaled down to its untraced step, never up."""
    from graphir.backends.tf.rig import RigRun
    from graphir.passes.profile.tf_run import _trace_scale

    one = "/job:worker/task:0/device:CPU:0"
    run = RigRun([0.1], 0.1, 1, {"a": 0.06, "b": 0.06}, {"a": one, "b": one}, [], 1, ops=3, op_seconds=0.125)
    assert _trace_scale(run) == pytest.approx(0.8)
    # The step's fixed cost (20 ms) is part of the untraced step, not of its kernels: (0.1 - 0.02) / 0.125.
    assert _trace_scale(run, 0.02) == pytest.approx(0.64)
    assert _trace_scale(run, 0.1) == pytest.approx(0.8)  # an overhead as long as the step: ignored
    run.op_seconds = 0.05  # the step is longer than its kernels: executor gaps are op_overhead's business
    assert _trace_scale(run) == 1.0
    assert _trace_scale(run, 0.02) == 1.0
    run.node_devices["b"] = "/job:worker/task:1/device:CPU:0"
    run.op_seconds = 0.125
    assert _trace_scale(run) == 1.0  # several devices: no single ratio


def test_fit_rig_recovers_the_cpu_a_transfer_costs_each_worker(tmp_path):
    """Per step: a + K·(c0 + c1·bytes) on each worker; the fit returns c0, c1 (a is the step's), into the TOML."""
    measured = rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=4e-6, step=600e-6)
    measured.transfer_cpu = [
        (nbytes, count, 40e-6 + count * (60e-6 + 0.5e-9 * nbytes), 90e-6 + count * (30e-6 + 0.75e-9 * nbytes))
        for nbytes in (4 << 10, 1 << 20, 4 << 20)
        for count in (1, 8)
    ]
    fitted = fit_rig(measured)
    assert fitted.transfer_cpu is not None
    assert (fitted.transfer_cpu.send, fitted.transfer_cpu.send_per_byte) == (
        pytest.approx(60e-6, rel=1e-6),
        pytest.approx(0.5e-9, rel=1e-6),
    )
    assert (fitted.transfer_cpu.recv, fitted.transfer_cpu.recv_per_byte) == (
        pytest.approx(30e-6, rel=1e-6),
        pytest.approx(0.75e-9, rel=1e-6),
    )
    path = tmp_path / "rig.toml"
    path.write_text(fitted.toml(cpu_workers_cluster(2)))
    cluster = load_cluster_toml(path)
    assert cluster.transfer_cpu is not None
    assert cluster.transfer_cpu.recv_seconds(1e6) == pytest.approx(30e-6 + 0.75e-3, rel=1e-3)
    # Not measured (an older calibration): no charge, and no keys in the file.
    assert (
        fit_rig(rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=4e-6, step=600e-6)).transfer_cpu is None
    )


def _fidelity_row(placement: str, order: str, measured: float, simulated: float):
    """A bench_fidelity row of model ``m`` (10 nodes on 2 devices, 3 transfers of 1 MiB) measured once."""
    from devtools.bench_fidelity import Row

    return Row("m", placement, order, 10, 2, 3, 1 << 20, measured, simulated, [measured], 1.0)


def test_fidelity_page_summarises_each_execution_order(tmp_path):
    from devtools.bench_fidelity import write_markdown

    rows = [
        _fidelity_row("fine", "enforced", 1.0, 1.1),
        _fidelity_row("fine", "enforced", 1.0, 0.8),
        _fidelity_row("fine", "dynamic", 2.0, 2.1),
    ]
    path = tmp_path / "fidelity.md"
    write_markdown(rows, path, "cmd", "", [])
    text = path.read_text()
    assert "**3 pairs: median |error| 10.0%, worst 20.0%**" in text
    assert "- `enforced` only: 2 pairs, median |error| 15.0%, worst 20.0%." in text
    assert "- `dynamic` only: 1 pairs, median |error| 5.0%, worst 5.0%." in text
    assert "| m | fine | dynamic | 10 | 2 | 3 / 0 |" in text


def test_fidelity_page_reports_held_out_placements_apart(tmp_path):
    # The bar is over the scored placements only; held-out pairs (topo, metis) get their own line and
    # their rows in the table. Scored errors 10 % and 20 % (median 15 %); held out 40 % and 0 %.
    from devtools.bench_fidelity import HELD_OUT, _summary_text, write_markdown

    assert HELD_OUT == ("topo", "metis", "pipeline", "allreduce")
    rows = [
        _fidelity_row(p, "enforced", 1.0, sim)
        for p, sim in (("balanced", 1.1), ("fine", 0.8), ("topo", 1.4), ("metis", 1.0))
    ]
    path = tmp_path / "fidelity.md"
    write_markdown(rows, path, "cmd", "", [])
    text = path.read_text()
    assert "**2 pairs: median |error| 15.0%, worst 20.0%**" in text
    assert "- `enforced` only: 2 pairs, median |error| 15.0%, worst 20.0%." in text
    assert "**2 pairs, median |error| 20.0%, worst 40.0%**" in text
    assert "| m | topo | enforced |" in text and "| m | metis | enforced |" in text
    assert _summary_text(rows) == (
        "2 pairs: median |error| 15.0%, worst 20.0%; held out: 2 pairs: median |error| 20.0%, worst 40.0%"
    )
    assert _summary_text(rows[:2]) == "2 pairs: median |error| 15.0%, worst 20.0%"


def test_fidelity_refuses_a_missing_notes_file_before_touching_the_rig(tmp_path, capsys):
    from devtools.bench_fidelity import main

    assert main(["--notes-file", str(tmp_path / "absent.md")]) == 1
    assert capsys.readouterr().err == f"bench-fidelity: no notes file '{tmp_path / 'absent.md'}'\n"


def test_fidelity_render_rewrites_the_page_from_the_runs_json(tmp_path):
    from devtools.bench_fidelity import Row, main, read_json, write_json, write_markdown

    rows = [
        Row("m", "single", "enforced", 10, 1, 0, 0, 1.0, 1.1, [1.0, 1.0], 0.5),
        Row("m", "fine", "dynamic", 10, 2, 3, 1 << 20, 2.0, 1.5, [2.0], 0.7, [(1024, 0.001, 0.0005)], {"pair": 1.4}),
    ]
    out = tmp_path / "fidelity.md"
    write_json(rows, out.with_suffix(".json"), "python -m devtools.bench_fidelity --calibrate", "[overheads]\n")
    again, command, cluster_text, rule = read_json(out.with_suffix(".json"))
    assert [r.error for r in again] == [r.error for r in rows] and again[1].simulated_by_rule == {"pair": 1.4}
    assert (command, cluster_text, rule) == (
        "python -m devtools.bench_fidelity --calibrate",
        "[overheads]\n",
        "topology",
    )
    assert main(["--render", "--out", str(out), "--note", "Findings."]) == 0
    expected = tmp_path / "expected" / "fidelity.md"  # the same name: the page links its own plot, fidelity.png
    expected.parent.mkdir()
    write_markdown(rows, expected, command, cluster_text, ["Findings."])
    assert "![simulated vs measured](fidelity.png)" in expected.read_text()
    assert (
        out.read_text() == expected.read_text() and "**2 pairs: median |error| 17.5%, worst 25.0%**" in out.read_text()
    )
    assert out.with_suffix(".png").stat().st_size > 0
    assert main(["--render", "--out", str(tmp_path / "none.md")]) == 1


def test_merged_calibrations_take_each_point_s_median_and_pool_the_fitted_samples():
    """Three calibrations of one rig merge point by point; the fit of the merge ignores the slow run.

    Runs 1 and 3 are the rig of ``rig_calibration(300 us, 2 GB/s, ...)``; run 2 had a slow moment: every
    worker0 -> worker1 transfer took twice as long. Per size the median of (t, 2t, t) is t, so the
    merged fit gives back 300 us and 2 GB/s, where run 2 alone fits 1 GB/s. The MatMul seconds
    0.05 / 0.08 / 0.05 -> 0.05 (40 GFLOP/s); the kernel of a chain op 1 / 3 / 2 us -> 2 us. Least-squares
    samples are pooled: 2 + 1 + 0 CPU samples -> 3, 1 + 0 + 1 whole-model gaps -> 2.
    """
    from graphir.passes.profile.calibrate_comm import merge_calibrations

    runs = [rig_calibration(latency=300e-6, bandwidth=2e9, kernel=k, gap=4e-6, step=600e-6) for k in (1e-6, 3e-6, 2e-6)]
    slow = runs[1]
    slow.transfers[("worker0", "worker1")] = [(s, 2 * t) for s, t in slow.transfers[("worker0", "worker1")]]
    slow.matmul["worker0"] = (2e9, 0.08)
    assert fit_rig(slow).links[0].bandwidth == pytest.approx(1e9, rel=1e-6)
    runs[0].transfer_cpu = [(4096, 1, 1e-4, 1e-4), (4096, 8, 8e-4, 8e-4)]
    runs[1].transfer_cpu = [(1 << 20, 1, 5e-4, 6e-4)]
    runs[0].graphs = [(100, 0.01, 0.009)]
    runs[2].graphs = [(400, 0.04, 0.036)]
    merged = merge_calibrations(runs)
    assert merged.transfers[("worker0", "worker1")] == runs[0].transfers[("worker0", "worker1")]
    assert merged.matmul["worker0"] == (2e9, 0.05)
    assert merged.chain_kernel_s["worker1"] == pytest.approx(2e-6)
    assert len(merged.transfer_cpu) == 3 and len(merged.graphs) == 2
    fitted = fit_rig(merged)
    assert {(f.src, f.dst): f.bandwidth for f in fitted.links}[("worker0", "worker1")] == pytest.approx(2e9, rel=1e-6)
    assert fitted.transfer_overhead == pytest.approx(300e-6, rel=1e-6)
    assert fitted.peak_flops["worker0"] == pytest.approx(40e9)
