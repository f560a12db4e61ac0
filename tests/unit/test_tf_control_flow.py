"""TensorFlow functional control flow (``While``/``If`` of a ``tf.function``) imported as regions, lowered, run.

The model is a real ``tf.function`` (autograph off, so TF2's functional ops are what ``tf.while_loop`` and
``tf.cond`` trace to): a recurrence ``h <- tanh(h W + x)`` in a ``tf.while_loop`` whose body holds a
``tf.cond`` (nested regions), then a ``tf.cond`` on the result. Its GraphDef (function library included)
is imported; the lowering rebuilds the library functions from the regions, and the result must match TF's
own run of the function. The multi-device run happens in a fresh process (logical CPUs are configured
before TensorFlow starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

MODEL = textwrap.dedent(
    """
    import tensorflow as tf

    @tf.function(
        input_signature=[tf.TensorSpec([4, 8], tf.float32), tf.TensorSpec([8, 8], tf.float32)], autograph=False
    )
    def step(x, w):
        def cond(i, h):
            return i < 5

        def body(i, h):
            h = tf.tanh(tf.matmul(h, w) + x)
            h = tf.cond(tf.reduce_sum(h) > 0.0, lambda: h * 0.5, lambda: h - 0.25)  # nested region
            return i + 1, h

        _, h = tf.while_loop(cond, body, (tf.constant(0), x))
        return tf.cond(tf.reduce_max(h) > 0.0, lambda: h * 2.0, lambda: tf.nn.relu(h - w[:4]))
    """
)


def _model():
    scope: dict = {}
    exec(MODEL, scope)  # noqa: S102 - the test's own model source, shared with the subprocess
    return scope["step"]


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((4, 8)).astype(np.float32), (0.4 * rng.standard_normal((8, 8))).astype(np.float32)


@pytest.fixture(scope="module")
def imported():
    from graphir.importers.tf import concrete_function_graphdef, import_graphdef

    step = _model()
    graph_def = concrete_function_graphdef(step.get_concrete_function())
    return step, import_graphdef(graph_def, name="loop", source="loop.pb")


def test_while_and_if_are_imported_as_regions(imported):
    from graphir.parser import parse_module
    from graphir.printer import print_module
    from graphir.regions import node_regions, walk_nodes
    from graphir.verifier import verify

    _, module = imported
    holders = {node.op: node for node in module.graph.nodes if node_regions(node)}
    assert sorted(holders) == ["tf.StatelessIf", "tf.StatelessWhile"]
    loop = holders["tf.StatelessWhile"]
    regions = dict(node_regions(loop))
    assert sorted(regions) == ["body", "cond"]
    body = regions["body"].graph
    # The body takes and returns every loop variable (counter, limit, i, h, and the captured w and x).
    assert len(body.inputs) == len(body.outputs) == len(loop.inputs) == 6
    assert [v.type for v in body.inputs] == [v.type for v in loop.inputs]
    ops = [node.op for node in walk_nodes(body)]
    assert "tf.MatMul" in ops and "tf.Tanh" in ops and "tf.StatelessIf" in ops  # the nested cond, a region too
    assert dict(node_regions(holders["tf.StatelessIf"])).keys() == {"then_branch", "else_branch"}
    assert "tf_library" not in module.metadata  # nothing left opaque
    verify(module)
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def test_profile_charges_the_loop_its_body(imported):
    from graphir.ops.control_flow import DEFAULT_TRIPS, region_work
    from graphir.ops.work import estimate_node
    from graphir.regions import node_regions

    _, module = imported
    loop = next(node for node in module.graph.nodes if node.op == "tf.StatelessWhile")
    work = sum(region_work(region.graph)[0] for _, region in node_regions(loop))
    assert work >= 2 * 4 * 8 * 8  # the body's 4x8x8 MatMul (and its nested cond's branches)
    # TF's loops carry no trip count: DEFAULT_TRIPS x (cond + body)
    assert estimate_node(loop)[0] == pytest.approx(DEFAULT_TRIPS * work)


def test_lowering_rebuilds_the_functions_and_matches_tf(imported):
    from graphir.backends.tf import lower

    step, module = imported
    x, w = _inputs()
    lowered = lower(module)
    (got,) = lowered(x, w)
    np.testing.assert_allclose(np.asarray(got), step(x, w).numpy(), rtol=1e-6, atol=1e-6)
    library = lowered.graph_def().library
    names = sorted(f.signature.name for f in library.function)
    # One function per region, nested ones included (the original library is not carried).
    assert len(names) == 6 and all(n.startswith("graphir_") for n in names), names


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from graphir.backends.tf.check import configure_logical_cpus, placement_mismatches, session_run
    import graphir.driver  # resolves host clusters such as 4xcpu
    tf = configure_logical_cpus(4)
    scope = {}
    exec(sys.argv[1], scope)
    step = scope["step"]
    from graphir.backends.tf import lower
    from graphir.importers.tf import concrete_function_graphdef, import_graphdef
    module = import_graphdef(concrete_function_graphdef(step.get_concrete_function()), name="loop")
    module.cluster_spec = "4xcpu"
    devices = {"tf.StatelessWhile": "cpu1", "tf.StatelessIf": "cpu2", "tf.Placeholder": "cpu0"}
    for node in module.graph.nodes:
        node.device = devices.get(node.op, "cpu3")
    lowered = lower(module)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = (0.4 * rng.standard_normal((8, 8))).astype(np.float32)
    (got,), placed = session_run(lowered, [x, w], 4)
    checked, problems = placement_mismatches(lowered, placed)
    loop = next(n.name for n in module.graph.nodes if n.op == "tf.StatelessWhile")
    ops = {n.name for n in lowered.graph_def().node}
    print(json.dumps({
        "error": float(np.max(np.abs(got - step(x, w).numpy()))),
        "checked": checked,
        "problems": problems[:10],
        "loop_parts_on_cpu1": sorted({d for k, d in placed.items() if k.startswith(loop + "/") and k not in ops}),
    }))
    """
)


def test_placed_on_four_cpus_runs_where_placed(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    command = [sys.executable, "-c", _SCRIPT, MODEL]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (report,) = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert report["error"] <= 1e-5, report
    assert report["problems"] == [], report
    assert report["loop_parts_on_cpu1"] == ["/job:localhost/replica:0/task:0/device:CPU:1"], report
    assert report["checked"] > 30, report  # the loop's and the conds' lowered parts, not just their names


def test_region_import_errors_name_the_function():
    from graphir.errors import ImportError_
    from graphir.importers.tf import concrete_function_graphdef
    from graphir.importers.tf_convert import _convert_region
    from graphir.importers.tf_regions import function_region
    from graphir.types import DType, TensorType

    graph_def = concrete_function_graphdef(_model().get_concrete_function())
    loop = next(node for node in graph_def.node if node.op == "StatelessWhile")
    scalar = TensorType(DType.I32, ())
    with pytest.raises(ImportError_, match="'body' names function 'missing', which is not in the library"):
        function_region(graph_def.library, "missing", "body", [scalar], "m.pb", "while", _convert_region)
    with pytest.raises(ImportError_, match="takes 6 arguments, the op passes 1"):
        function_region(
            graph_def.library, loop.attr["body"].func.name, "body", [scalar], "m.pb", "while", _convert_region
        )
