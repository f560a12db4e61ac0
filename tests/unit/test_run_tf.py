"""``--run-tf=STEPS`` / ``tools/run_tf.py``: timed steps of the lowered graph next to the simulated makespan.

Runs that execute TensorFlow happen in a fresh process (logical devices are configured before
TensorFlow initialises): the command line's and the tool's run share one (:func:`tf_runs`); the helpers
that do not need TensorFlow are tested in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import module_on_cluster

from graphir.backends.tf.run import (
    RUN_TF_LINE,
    RunReport,
    local_cpu_count,
    random_inputs,
    random_variables,
    run_module,
    simulated_makespan,
    tasks_used,
)
from graphir.backends.tf.tf_graphdef import colocate_resource_users, variable_values
from graphir.cluster import resolve_cluster
from graphir.driver import run
from graphir.errors import BackendError
from graphir.ir import Graph, Module
from graphir.types import DType, TensorType

MODEL = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
PIPELINE = "profile,place{algo=m-topo},simulate"


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))


# Both runs in one process (one TensorFlow start-up): graphir-opt's entry (graphir.driver.run) on 4xcpu first,
# then tools/run_tf's main on 2xcpu, which finds TensorFlow initialised with 4 logical CPUs (at least the 2 it
# needs); each one's exit status, stdout and stderr captured.
_RUNS = """
import contextlib, io, json, sys
from graphir.driver import run
from graphir.tools.run_tf import main as run_tf
results = []
for tool, argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = {"graphir-opt": run, "run_tf": run_tf}[tool](argv)
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """``tool -> (status, stdout, stderr)`` of the two runs of :data:`_RUNS`."""
    runs = [
        ("graphir-opt", [str(MODEL), "--cluster=4xcpu", f"--passes={PIPELINE}", "--run-tf=3", "--emit=summary"]),
        (
            "run_tf",
            [str(MODEL), "--steps=2", "--warmup=1", "--json", "--cluster=2xcpu", "--passes=profile,place{algo=single}"],
        ),
    ]
    env = _env(tmp_path_factory.mktemp("run_tf"))
    command = [sys.executable, "-c", _RUNS, json.dumps(runs)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    outcomes = json.loads(result.stdout.splitlines()[-1])
    return {tool: tuple(outcome) for (tool, _), outcome in zip(runs, outcomes, strict=True)}


def test_driver_run_tf_reports_measured_and_simulated_times(tf_runs):
    status, stdout, stderr = tf_runs["graphir-opt"]
    assert status == 0, stderr[-2000:]
    (line,) = [line for line in stderr.splitlines() if line.startswith("run-tf:")]
    match = RUN_TF_LINE.match(line)
    assert match is not None and float(match["measured"]) > 0 and float(match["simulated"]) > 0, line
    assert line.endswith("(3 step(s) after 2 warm-up, 3 device(s))"), line
    assert stdout  # the emitter still runs after the measurement


def test_run_tf_tool_json(tf_runs):
    status, stdout, stderr = tf_runs["run_tf"]
    assert status == 0, stderr[-2000:]
    report = json.loads(stdout.splitlines()[-1])
    assert len(report["times_s"]) == 2 and report["median_s"] > 0
    assert report["simulated_s"] > 0  # no simulate in the pipeline: the placed, ordered module is simulated
    assert report["devices"] == ["/device:CPU:0"] and report["tasks"] == []


def test_run_tf_flag_validates_steps(capsys):
    assert run([str(MODEL), "--run-tf=0"]) == 1
    assert "invalid step count '0': expected an integer >= 1" in capsys.readouterr().err


def test_run_tf_line_is_a_stable_format():
    report = RunReport(5, 2, 0.0123456789, [0.0123456789] * 5, 0.01, ["/job:worker/task:0/device:CPU:0"], ["t0"])
    line = report.line()
    assert line.startswith("run-tf: measured median 0.0123457 s, simulated 0.01 s ("), line
    assert "\n" not in line
    match = RUN_TF_LINE.match(line)
    assert match is not None and (match["measured"], match["simulated"]) == ("0.0123457", "0.01")
    unsimulated = RunReport(1, 0, 2.5, [2.5], None, [], []).line()
    assert unsimulated.startswith("run-tf: measured median 2.5 s, simulated n/a (")
    match = RUN_TF_LINE.match(unsimulated)
    assert match is not None and match["simulated"] is None


def test_simulated_step_adds_the_clusters_step_overhead(tmp_path):
    # Two 1 ms nodes in a chain on one device: makespan 2 ms. The cluster file says a step costs
    # 0.5 ms beyond its graph, which the measured wall time includes, so the prediction the
    # run-tf line prints is 2.5 ms (the fidelity benchmark's prediction too); annotated finish
    # times (a simulate pass ran) get the same 0.5 ms.
    cluster = tmp_path / "c.toml"
    cluster.write_text(
        '[overheads]\nstep = 5e-4\n[default_link]\nlatency = 0.0\nbandwidth = 1e9\n[[device]]\nname = "g0"\n'
    )
    body = (
        '    %a = onnx.Relu(%x) : (f32[4]) -> f32[4] [cost = 1ms, device = "g0", order = 0]\n'
        '    %b = onnx.Relu(%a) : (f32[4]) -> f32[4] [cost = 1ms, device = "g0", order = 1]\n'
        "    return %b"
    )
    module = module_on_cluster(tmp_path, cluster.read_text(), body, "%x : f32[4]")
    assert simulated_makespan(module) == pytest.approx(2.5e-3)
    for node, finish in zip(module.graph.nodes, (1e-3, 2e-3), strict=True):
        node.finish = finish
    assert simulated_makespan(module) == pytest.approx(2.5e-3)


def test_run_module_needs_a_step():
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (2,)))
    graph.set_outputs([x])
    with pytest.raises(BackendError, match="at least one step"):
        run_module(Module("m", graph), 0)


def _training_like_module() -> Module:
    """A VarHandleOp read by one node and updated by another, plus a feed."""
    graph = Graph()
    resource = TensorType(DType.RESOURCE, ())
    handle = graph.add_node(
        "tf.VarHandleOp", [], [resource], name="w", params={"dtype": "f32", "shape": (2, 3), "shared_name": "dense/w"}
    )
    feed = graph.add_node("tf.Placeholder", [], [TensorType(DType.I32, (4,))], name="tokens", params={"dtype": "i32"})
    read = graph.add_node("tf.ReadVariableOp", [handle.outputs[0]], [TensorType(DType.F32, (2, 3))], name="read")
    update = graph.add_node("tf.AssignAddVariableOp", [handle.outputs[0], read.outputs[0]], [], name="update")
    update.colocate = "update_group"
    graph.set_outputs([read.outputs[0], feed.outputs[0]])
    return Module("train", graph, "4xcpu")


def test_colocate_resource_users_and_variable_values():
    module = _training_like_module()
    assert colocate_resource_users(module) == 2  # 'update' was in its class already
    assert {n.name: n.colocate for n in module.graph.nodes if n.colocate} == {
        "w": "update_group",
        "read": "update_group",
        "update": "update_group",
    }
    assert colocate_resource_users(module) == 0  # idempotent
    values = variable_values(module, {"dense/w": np.ones((2, 3), np.float64)})
    ((node, array),) = values.items()
    assert node.name == "w" and array.dtype == np.float32
    with pytest.raises(BackendError, match="'dense/b' is neither a variable's shared_name nor a VarHandleOp node"):
        variable_values(module, {"dense/b": np.ones(3)})
    with pytest.raises(BackendError, match=r"has shape \[3\], the variable f32\[2,3\]"):
        variable_values(module, {"w": np.ones(3)})


def test_seeded_inputs_and_variables():
    module = _training_like_module()
    first = random_inputs(module, ["tokens"], seed=3)
    assert first[0].dtype == np.int32 and set(first[0].tolist()) <= {0, 1}
    assert np.array_equal(first[0], random_inputs(module, ["tokens"], seed=3)[0])
    variables = random_variables(module, seed=3)
    assert variables["w"].shape == (2, 3) and variables["w"].dtype == np.float32
    assert random_variables(module, seed=3, skip={"w"}) == {}


def test_device_helpers():
    module = _training_like_module()
    module.set_cluster(resolve_cluster("4xcpu"))
    assert local_cpu_count(module) == 4
    placed = {"a": "/job:worker/replica:0/task:1/device:CPU:0", "b": "/job:localhost/replica:0/task:0/device:CPU:2"}
    assert tasks_used(placed) == {"/job:worker/task:1", "/job:localhost/task:0"}


def test_variable_initialisation_is_fed_in_bounded_batches(monkeypatch):
    """A remote session serialises its feeds into one gRPC message: big training states go in several runs."""
    import graphir.backends.tf.session as session_source

    monkeypatch.setattr(session_source, "INIT_BATCH_BYTES", 1000)
    targets = [f"graphir_init/{name}/graphir_assign" for name in "abc"]
    feeds = {
        "graphir_init/a/graphir_value:0": np.zeros(600, np.uint8),
        "graphir_init/b/graphir_value:0": np.zeros(1500, np.uint8),  # alone: larger than a batch
        "graphir_init/c/graphir_value:0": np.zeros(10, np.uint8),
    }
    batches = session_source._init_batches(targets, feeds)
    assert [batch_targets for batch_targets, _ in batches] == [[targets[0]], [targets[1]], [targets[2]]]
    feeds["graphir_init/b/graphir_value:0"] = np.zeros(450, np.uint8)
    batches = session_source._init_batches(targets, feeds)
    assert [batch_targets for batch_targets, _ in batches] == [targets[:1], targets[1:]]
    assert sorted(key for _, batch in batches for key in batch) == sorted(feeds)
