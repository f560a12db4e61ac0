"""The Python API (issue #40): ``graphir.load``, ``place``, ``parallelize``, ``compare`` and ``Plan``.

The API and ``graphir-opt`` share one path (:func:`graphir.driver.api.run_pipeline`), so each test
runs the command line on the same model and checks that both give the same placement, makespan and
report (the command line's two runs, ``--emit=placement`` and ``--emit=report``, in one subprocess:
:data:`_RUN_ALL`; the tf.function's and the Keras model's four runs share one: :func:`tf_models`).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import graphir
from graphir.driver import api
from graphir.errors import GraphIRError, ImportError_, PassOptionError
from graphir.ir import Module

REPO = Path(__file__).resolve().parents[2]
SQUEEZENET = REPO / "examples" / "squeezenet.onnx"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphir.driver", *args], capture_output=True, text=True, timeout=600, cwd=REPO
    )


# Several command lines in one process: graphir.driver.run (what graphir-opt's main runs) per argv,
# its stdout and stderr captured; one interpreter and one TensorFlow import for a GraphDef input.
_RUN_ALL = """
import contextlib, io, json, sys
from graphir.driver import run
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(argv)
    results.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(results))
"""


def cli_placements(runs: list[tuple[Path, str, str]], tmp_path: Path) -> list[tuple[dict[str, str], str]]:
    """The command line's placement (``--emit=placement``) and report text for each ``(path, cluster, passes)``,
    all in one process."""
    argvs = []
    for k, (path, cluster, passes) in enumerate(runs):
        common = [str(path), f"--cluster={cluster}", f"--passes={passes}"]
        argvs += [[*common, "--emit=placement", "-o", str(tmp_path / f"placement{k}.json")], [*common, "--emit=report"]]
    done = subprocess.run(
        [sys.executable, "-c", _RUN_ALL, json.dumps(argvs)], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    answers = []
    for k in range(len(runs)):
        (placed_code, _, placed_err), (report_code, report, report_err) = results[2 * k : 2 * k + 2]
        assert placed_code == 0, placed_err
        assert report_code == 0, report_err
        answers.append((json.loads((tmp_path / f"placement{k}.json").read_text()), report))
    return answers


def cli_placement(path: Path, cluster: str, passes: str, tmp_path: Path) -> tuple[dict[str, str], str]:
    """The command line's placement (``--emit=placement``) and report text for the same run."""
    (answer,) = cli_placements([(path, cluster, passes)], tmp_path)
    return answer


def by_name(plan: graphir.Plan) -> dict[str, str]:
    return dict(sorted(plan.placement.items()))


def cli_by_name(placement: dict[str, Any], module: Module) -> dict[str, str]:
    """``--emit=placement``'s JSON ({node: device}, possibly keyed by id) as node name -> device."""
    table = placement.get("placement", placement)
    names = {str(k): node.name for k, node in enumerate(module.graph.nodes)}
    return dict(sorted((names.get(str(key), str(key)), str(device)) for key, device in table.items()))


def test_path_gives_the_command_lines_placement_makespan_and_report(tmp_path: Path) -> None:
    plan = graphir.place(str(SQUEEZENET), cluster="celeritas", passes="fuse,place")
    placement, report = cli_placement(SQUEEZENET, "celeritas", "fuse,place", tmp_path)
    assert plan.report() == report
    assert by_name(plan) == cli_by_name(placement, plan.module)
    assert len(set(plan.placement.values())) > 1  # spread: not a one-device answer
    assert f"makespan:   {plan.makespan * 1e6:.3f} us" in report
    assert plan.fits and set(plan.peak_memory) == {"gpu0", "gpu1", "gpu2", "gpu3"}
    assert plan.stats["place.algo"] == "auto"


def test_onnx_model_proto_gives_the_same_plan_as_its_file(tmp_path: Path) -> None:
    import onnx

    from_file = graphir.place(SQUEEZENET, cluster="celeritas", passes="fuse,place")
    from_proto = graphir.place(onnx.load(str(SQUEEZENET)), cluster="celeritas", passes="fuse,place", name="squeezenet")
    assert from_proto.module.name == "squeezenet"
    assert by_name(from_proto) == by_name(from_file)
    assert from_proto.makespan == from_file.makespan
    assert from_proto.peak_memory == from_file.peak_memory
    assert from_proto.report() == from_file.report()


def _mlp_function() -> Any:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    weights = [tf.Variable(rng.standard_normal((64, 64)).astype(np.float32), name=f"w{k}") for k in range(6)]

    @tf.function(input_signature=[tf.TensorSpec((32, 64), tf.float32, name="x")])
    def mlp(x: Any) -> Any:
        left, right = x, x
        for k in range(0, 6, 2):
            left = tf.nn.relu(tf.matmul(left, weights[k]))
            right = tf.nn.relu(tf.matmul(right, weights[k + 1]))
        return left + right

    mlp.graphir_keepalive = weights  # type: ignore[attr-defined]  # the function holds weak references
    return mlp


@pytest.fixture(scope="module")
def tf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, dict[str, str], str]]:
    """The tf.function and the Keras model of the two tests below, each with the command line's placement and
    report for its GraphDef (both command lines in one process: one TensorFlow import)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from graphir.importers.tf import concrete_function_graphdef

    tmp_path = tmp_path_factory.mktemp("api_tf")
    mlp = _mlp_function()
    mlp_path = tmp_path / "mlp.pb"
    mlp_path.write_bytes(concrete_function_graphdef(mlp.get_concrete_function()).SerializeToString())
    model = _keras_model()
    spec = tf.TensorSpec((8, 16), tf.float32, name="input_0")
    concrete = tf.function(lambda x: model(x, training=False), autograph=False).get_concrete_function(spec)
    concrete = convert_variables_to_constants_v2(concrete)  # load() freezes a Keras forward pass
    keras_path = tmp_path / "two_branch.pb"
    keras_path.write_bytes(concrete_function_graphdef(concrete).SerializeToString())
    runs = [(mlp_path, "4xV100", "place{algo=m-etf}"), (keras_path, "4xV100", "place{algo=heft}")]
    (mlp_placement, mlp_report), (keras_placement, keras_report) = cli_placements(runs, tmp_path)
    return {"mlp": (mlp, mlp_placement, mlp_report), "keras": (model, keras_placement, keras_report)}


def test_tf_function_gives_the_command_lines_plan(tf_models) -> None:
    mlp, placement, report = tf_models["mlp"]
    plan = graphir.place(mlp, cluster="4xV100", passes="place{algo=m-etf}")
    assert by_name(plan) == cli_by_name(placement, plan.module)
    assert f"makespan:   {plan.makespan * 1e6:.3f} us" in report
    assert len(set(plan.placement.values())) > 1


def _keras_model() -> Any:
    import keras

    inputs = keras.Input((16,), batch_size=8, name="features")
    left = keras.layers.Dense(32, activation="relu", name="left")(inputs)
    right = keras.layers.Dense(32, activation="tanh", name="right")(inputs)
    joined = keras.layers.Concatenate(name="join")([left, right])
    return keras.Model(inputs, keras.layers.Dense(4, name="head")(joined), name="two_branch")


def test_keras_model_gives_the_command_lines_plan(tf_models) -> None:
    model, placement, report = tf_models["keras"]
    plan = graphir.place(model, cluster="4xV100", passes="place{algo=heft}")
    assert plan.module.name == "two_branch"
    assert by_name(plan) == cli_by_name(placement, plan.module)
    assert f"makespan:   {plan.makespan * 1e6:.3f} us" in report


def test_keras_training_step_parallelizes() -> None:
    import keras

    model = _keras_model()
    module = graphir.load(model, train=True, loss="mean_squared_error", optimizer=keras.optimizers.SGD(0.1))
    ops = {node.op for node in module.graph.nodes}
    assert {"tf.AssignSubVariableOp", "tf.AssignAddVariableOp"} & ops or "tf.ResourceApplyGradientDescent" in ops, ops
    plan = graphir.parallelize(module, cluster="4xV100")
    assert plan.fits and plan.makespan > 0
    assert "parallelize.chosen" in plan.stats


def test_to_tf_matches_onnxruntime_on_squeezenet() -> None:
    import onnxruntime

    plan = graphir.place(SQUEEZENET, cluster="4xcpu", passes="place{algo=m-etf}")
    assert len(set(plan.placement.values())) > 1
    lowered = plan.to_tf()
    session = onnxruntime.InferenceSession(str(SQUEEZENET), providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in feed.shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = session.run(None, {feed.name: x})
    got = lowered(x)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()))


def test_bad_pipeline_raises_the_command_lines_error() -> None:
    with pytest.raises(PassOptionError) as caught:
        graphir.place(SQUEEZENET, passes="place{algo=nope}")
    done = cli(str(SQUEEZENET), "--passes=place{algo=nope}")
    assert done.returncode == 1
    assert caught.value.render().strip() == done.stderr.strip()


def test_errors_are_graphir_errors_not_exits(tmp_path: Path) -> None:
    with pytest.raises(ImportError_, match="no such file"):
        graphir.load(tmp_path / "missing.onnx")
    with pytest.raises(GraphIRError, match="unknown option"):
        graphir.place(SQUEEZENET, colour="red")
    with pytest.raises(ImportError_, match="cannot import a builtins.int"):
        graphir.load(3)
    with pytest.raises(GraphIRError, match="no output format for this suffix"):
        graphir.place(SQUEEZENET, passes="").save(tmp_path / "x.unknown")


def test_save_writes_what_the_command_line_writes(tmp_path: Path) -> None:
    plan = graphir.place(SQUEEZENET, cluster="celeritas", passes="place{algo=m-topo}")
    written = plan.save(tmp_path / "plan.gir")
    done = cli(str(SQUEEZENET), "--cluster=celeritas", "--passes=place{algo=m-topo}", "-o", str(tmp_path / "cli.gir"))
    assert done.returncode == 0, done.stderr
    assert written.read_text() == (tmp_path / "cli.gir").read_text()
    placement = json.loads(plan.save(tmp_path / "placement.json", emit="placement").read_text())
    assert placement
    graph_def = plan.save(tmp_path / "g.pb")  # the binary GraphDef; its manifest beside it, as -o g.pb writes
    from tensorflow.core.framework import graph_pb2

    parsed = graph_pb2.GraphDef.FromString(graph_def.read_bytes())
    assert len(parsed.node) > 60 and "GraphDef" in (tmp_path / "g.pb.txt").read_text()


def test_compare_returns_one_plan_per_placer_as_the_table() -> None:
    results = graphir.compare(SQUEEZENET, cluster="celeritas", placers=["single", "m-etf", "metis"])
    assert [r.row.algo for r in results] == ["single", "m-etf", "metis"]
    for result in results:
        assert result.plan is not None
        assert result.plan.makespan == pytest.approx(result.row.makespan)
    single = results[0].plan
    assert single is not None and len(set(single.placement.values())) == 1
    assert len(set(results[1].plan.placement.values())) > 1  # type: ignore[union-attr]


def test_importing_graphir_loads_only_the_core() -> None:
    code = (
        "import sys, graphir, graphir.ir; "
        "print(any(m.startswith(('graphir.driver', 'graphir.passes')) for m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.stdout.strip() == "False", done.stderr


def test_public_signatures_are_typed_without_any() -> None:
    """Every parameter and return of the public API has a type, and none is ``Any`` (``**options`` aside)."""
    from graphir.backends.tf.lowering import LoweredGraph

    names = {**vars(api), "LoweredGraph": LoweredGraph}
    for name in graphir.API_NAMES:
        target = getattr(graphir, name)
        functions = (
            [target]
            if inspect.isfunction(target)
            else [m for k, m in vars(target).items() if inspect.isfunction(m) and not k.startswith("_")]
        )
        for function in functions:
            hints = typing.get_type_hints(function, names)
            signature = inspect.signature(function)
            for parameter in signature.parameters.values():
                if parameter.name == "self":
                    continue
                assert parameter.name in hints, (name, function.__name__, parameter.name)
                if parameter.kind is not inspect.Parameter.VAR_KEYWORD:
                    assert hints[parameter.name] is not Any, (name, function.__name__, parameter.name)
            assert "return" in hints and hints["return"] is not Any, (name, function.__name__)


def test_tf_graph_and_graph_def_load_as_the_same_module() -> None:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (8, 16), name="x")
        w = tf.constant(np.ones((16, 4), np.float32), name="w")
        tf.nn.relu(tf.matmul(x, w), name="out")
    from_graph = graphir.load(graph, name="tiny")
    from_def = graphir.load(graph.as_graph_def(), name="tiny")
    assert [n.op for n in from_graph.graph.nodes] == [n.op for n in from_def.graph.nodes]
    assert {"tf.MatMul", "tf.Relu"} <= {n.op for n in from_graph.graph.nodes}
    plan = graphir.place(from_def, cluster="4xV100", passes="place{algo=m-topo}")
    assert plan.makespan > 0 and set(plan.placement) == {n.name for n in plan.module.graph.nodes}
