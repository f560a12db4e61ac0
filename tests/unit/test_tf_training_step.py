"""A zoo training step (GradientTape + Adam) lowered onto 4 logical CPUs equals the original ``tf.function``.

The zoo code path (:func:`graphir.tools.zoo.build_train_graphdef`) builds a small LSTM language
model's training step; the test reads the original variables' initial values (the importer keeps
none), places the imported graph so that several devices are used, runs one lowered step in a
session with those values assigned, and compares the loss and every updated variable (weights,
Adam slots, beta powers) with one step of the original function. TensorFlow runs in a fresh process
(logical devices must be configured before it initialises).

No manual step is needed: the importer records TensorFlow's rule that a resource's users run where
the resource lives as ``colocate`` classes, so ``graphir-opt graph.pb --passes=... --run-tf=N`` places
and runs a training graph as imported (the last test, on the GraphDef file the zoo would write).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TOLERANCE = 1e-4

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from graphir.backends.tf.run import configure_cpus
    tf = configure_cpus(4)
    from graphir.backends.tf import lower
    from graphir.backends.tf.check import placement_mismatches, relative_error
    from graphir.backends.tf.run import SessionRunner, random_inputs
    from graphir.backends.tf.tf_graphdef import colocate_resource_users
    from graphir.importers.tf import import_graphdef
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.tools.zoo import build_train_graphdef
    from graphir.driver import load_builtin_passes

    load_builtin_passes()
    config, batch, pipeline = json.loads(sys.argv[1])
    graph_def, step = build_train_graphdef("lstm", batch, [tuple(c) for c in config])
    _, slots, beta1_power, beta2_power = step.graphir_keepalive
    variables = [*step.variables, *(v for pair in slots for v in pair), beta1_power, beta2_power]
    by_handle = {id(v.handle): v for v in variables}
    # VarHandleOp node name (the capture's placeholder) -> the original variable
    handles = {inner.op.name: by_handle[id(outer)] for outer, inner in step.graph.captures if id(outer) in by_handle}
    initial = {name: v.numpy() for name, v in handles.items()}

    module = import_graphdef(graph_def, name="train", source="<lstm_train>")
    module.cluster_spec = "4xcpu"
    colocated = sum(1 for n in module.graph.nodes if n.colocate is not None)  # the importer's classes
    assert colocate_resource_users(module) == 0  # nothing left to do by hand
    PassManager(parse_pipeline(pipeline)).run(module, PassContext(seed=0))
    lowered = lower(module, enforce_order=True)
    inputs = random_inputs(module, lowered.input_names, seed=0)
    with SessionRunner(module, lowered, "", 4, variables=initial, timeout_s=300) as runner:
        (loss,), placed = runner.run_traced(inputs)
        updated = runner.read_variables()
    want_loss = step(*(tf.constant(x) for x in inputs)).numpy()
    want = {name: v.numpy() for name, v in handles.items()}
    checked, problems = placement_mismatches(lowered, placed)
    print(json.dumps({
        "loss_error": relative_error([loss], [want_loss]),
        "var_error": max(relative_error([updated[n]], [want[n]]) for n in want),
        "changed": sum(1 for n in want if (want[n] != initial[n]).any()),
        "variables": len(want),
        "variable_nodes": len(updated),
        "colocated": colocated,
        "devices": sorted({n.device for n in module.graph.nodes if n.device}),
        "checked": checked,
        "misplaced": [p for p in problems if not p.endswith("not run")],
    }))
    """
)


def _run(config: list, batch: int, pipeline: str, tmp_path: Path) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "cache"))
    argument = json.dumps([config, batch, pipeline])
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, argument], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def _assert_equivalent(report: dict) -> None:
    assert report["loss_error"] <= TOLERANCE, report
    assert report["var_error"] <= TOLERANCE, report
    assert report["variables"] == report["variable_nodes"] >= 20  # 6 weights, 12 Adam slots, 2 beta powers
    assert report["changed"] >= report["variables"] - 1, report  # the step really updated them
    assert report["colocated"] > 0
    assert report["misplaced"] == [] and report["checked"] > 100, report


def test_lstm_training_step_on_four_devices_matches_the_original(tmp_path):
    config = [["layers", 1], ["units", 8], ["vocab", 16], ["seq", 3]]
    report = _run(config, 2, "profile,place{algo=m-topo}", tmp_path)
    _assert_equivalent(report)
    assert len(report["devices"]) == 4, report


@pytest.mark.slow
def test_larger_lstm_training_step_after_fusion_matches_the_original(tmp_path):
    config = [["layers", 2], ["units", 32], ["vocab", 64], ["seq", 6]]
    report = _run(config, 8, "profile,fuse{algo=cpd-topo},place{algo=m-topo}", tmp_path)
    _assert_equivalent(report)
    assert len(report["devices"]) >= 2, report


_WRITE_GRAPH = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from graphir.tools.zoo import build_train_graphdef
    graph_def, _ = build_train_graphdef("lstm", 2, [("layers", 1), ("units", 8), ("vocab", 16), ("seq", 3)])
    Path(sys.argv[1]).write_bytes(graph_def.SerializeToString(deterministic=True))
    """
)


@pytest.fixture(scope="module")
def small_training_graph(tmp_path_factory) -> Path:
    """A small LSTM training step (the zoo's code path) as a GraphDef file, written once per module."""
    graph = tmp_path_factory.mktemp("train") / "lstm_train.pb"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", _WRITE_GRAPH, str(graph)], env=env, timeout=300, check=True)
    return graph


@pytest.mark.parametrize(
    "pipeline",
    ["profile,fuse{algo=cpd-topo},place{algo=adjusting}", "profile,place{algo=m-topo}"],
    ids=["adjusting", "m-topo"],
)
def test_graphir_opt_places_and_runs_a_tf_training_graph_as_imported(pipeline, small_training_graph, tmp_path):
    """No manual colocation step: the importer's ``colocate`` classes keep each variable with its users."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    graph = small_training_graph
    placement = tmp_path / "placement.json"
    driver = "import sys; from graphir.driver import run; sys.exit(run(sys.argv[1:]))"
    command = [sys.executable, "-c", driver, str(graph), "--cluster=4xcpu", f"--passes={pipeline}"]
    command += ["--run-tf=2", "--emit=placement", "-o", str(placement)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("run-tf:")]
    used = len(set(json.loads(placement.read_text()).values()))
    assert line.startswith("run-tf: measured median "), line
    assert f"(2 step(s) after 2 warm-up, {used} device(s))" in line, line
    if "m-topo" in pipeline:
        assert used == 4, line  # variables and their users spread over every device, and it runs
