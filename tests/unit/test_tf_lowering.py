"""TensorFlow lowering: ONNX light models and TF graphs on 4 logical CPUs, placement, emitters, errors.

TensorFlow's logical devices must be configured before its runtime starts, and other tests of this
process may have started it: every run that executes TensorFlow happens in a fresh process
(``python -m graphir.driver.check`` or a small script), which prints JSON. Each such process pays
TensorFlow's start-up (5-7 CPU s), so the light models are proven by one ``check`` run
(:func:`fast_results`), and everything else runs in one process (:func:`one_process`): the five small
hand-built ONNX models (a large MatMul weight, constant, variable and filled convolution weights, dilated
pooling) proven as ``check`` proves them (:func:`small_results`) and their lowered graphs inspected
(:func:`small_facts`), squeezenet spread with its order enforced, a TF-imported CNN with split/concat,
and the GraphDef and SavedModel emitters. The process configures its 4 logical CPUs once and runs each
part in turn (its own numpy generator and TF graphs, as in a process of its own); a part that raises
reports its traceback and fails its own tests alone. Each test asserts its own part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest

from graphir.backends.tf import lower
from graphir.errors import BackendError
from graphir.ir import Graph, Module
from graphir.types import DType, TensorType

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
PIPELINE = "profile,fuse{algo=cpd-topo},place{algo=adjusting}"
FAST = ["light_squeezenet.onnx", "light_shufflenet.onnx"]
SLOW = sorted(p.name for p in LIGHT.glob("*.onnx") if p.name not in FAST)
TOLERANCE = 1e-4


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "cache")
    )


def _json_lines(command: list[str], env: dict[str, str]) -> list[dict]:
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def _check(models: list[str], env: dict[str, str], *extra: str) -> dict[str, dict]:
    command = [sys.executable, "-m", "graphir.driver.check", "--cluster=4xcpu", "--devices=4", *extra]
    command += [str(LIGHT / m) for m in models]
    return {r["model"]: r for r in _json_lines(command, env)}


def _assert_proven(result: dict) -> None:
    assert "error" not in result, result
    assert result["values_compared"] >= result["nodes"]  # every node result, against onnxruntime
    assert result["max_rel_error"] <= TOLERANCE, result
    assert result["output_rel_error"] <= TOLERANCE, result
    assert result["ops_checked"] >= result["nodes"], result
    assert result["placement_mismatches"] == [], result


@pytest.fixture(scope="module")
def fast_results(tmp_path_factory) -> dict[str, dict]:
    return _check(FAST, _env(tmp_path_factory.mktemp("tf")), f"--passes={PIPELINE}")


def test_light_models_lower_and_match(fast_results):
    for model in FAST:
        _assert_proven(fast_results[model])


@pytest.mark.slow
@pytest.mark.parametrize("model", SLOW)
def test_light_model_lowers_and_matches(model, tmp_path):
    _assert_proven(_check([model], _env(tmp_path), f"--passes={PIPELINE}")[model])


def test_spread_placement_with_enforced_order(one_process):
    # The adjusting placer keeps the light models on one CPU (transfers cost more than they
    # save); m-topo without fusion spreads squeezenet over three devices.
    (result,) = _part(one_process, "spread")
    assert result["model"] == "light_squeezenet.onnx"
    _assert_proven(result)
    assert len(result["devices"]) >= 3 and result["enforce_order"]


_TF_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np
    import tensorflow as tf
    from graphir.backends.tf.check import placement_mismatches, relative_error, session_run
    from graphir.backends.tf import lower
    from graphir.importers.tf import from_concrete_function
    from graphir.ir import Graph, Module
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.types import DType, TensorType
    from graphir.driver import load_builtin_passes

    load_builtin_passes()
    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.standard_normal((3, 3, 3, 8)).astype(np.float32))
    w2 = tf.constant(rng.standard_normal((8 * 8 * 8, 10)).astype(np.float32))

    @tf.function
    def model(x):
        a = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        b = tf.nn.max_pool2d(a, 2, 2, "VALID")
        c = tf.math.tanh(b) + tf.math.sigmoid(b)
        d = tf.reshape(c, [-1, 8 * 8 * 8])
        return tf.nn.softmax(tf.matmul(d, w2)), tf.reduce_sum(a, axis=[1, 2])

    cf = model.get_concrete_function(tf.TensorSpec([2, 16, 16, 3], tf.float32))
    module = from_concrete_function(cf)
    module.cluster_spec = "4xcpu"
    PassManager(parse_pipeline("profile,place{algo=m-topo}")).run(module)
    lowered = lower(module, enforce_order=True)
    x = rng.standard_normal((2, 16, 16, 3)).astype(np.float32)
    want = [o.numpy() for o in model(x)]
    outs, placed = session_run(lowered, [x], 4)
    checked, problems = placement_mismatches(lowered, placed)
    graph_def = lowered.graph_def()
    report = {
        "tf_error": relative_error(lowered(x), want),
        "tf_session_error": relative_error(outs, want),
        "tf_devices": sorted({n.device for n in module.graph.nodes}),
        "tf_checked": checked,
        "tf_nodes": len(module.graph),
        "tf_problems": problems,
        "tf_unpinned": [n.name for n in graph_def.node if not n.device],
        "tf_order_edges": sum(1 for n in graph_def.node for i in n.input if i.startswith("^")),
    }

    # graphir.split / graphir.concat (FastT operation splitting) in an ONNX-dialect graph.
    f32 = lambda *dims: TensorType(DType.F32, dims)
    graph = Graph()
    inp = graph.add_input("x", f32(2, 6))
    split = graph.add_node("graphir.split", [inp], [f32(2, 2), f32(2, 4)], name="split", params={"axis": 1})
    left = graph.add_node("onnx.Relu", [split.outputs[0]], [f32(2, 2)], name="left")
    right = graph.add_node("onnx.Neg", [split.outputs[1]], [f32(2, 4)], name="right")
    parts = [left.outputs[0], right.outputs[0]]
    cat = graph.add_node("graphir.concat", parts, [f32(2, 6)], name="cat", params={"axis": 1})
    graph.set_outputs(cat.outputs)
    small = Module("split", graph, "4xcpu")
    for k, node in enumerate([split, left, right, cat]):
        node.device = f"cpu{k}"
    data = rng.standard_normal((2, 6)).astype(np.float32)
    expected = np.concatenate([np.maximum(data[:, :2], 0), -data[:, 2:]], axis=1)
    split_lowered = lower(small)
    _, split_placed = session_run(split_lowered, [data], 4)
    report["split_error"] = relative_error(split_lowered(data), [expected])
    report["split_problems"] = placement_mismatches(split_lowered, split_placed)[1]
    print(json.dumps(report))
    """
)


def test_tf_imported_graph_and_split_concat(one_process):
    (report,) = _part(one_process, "tf")
    assert report["tf_error"] <= TOLERANCE and report["tf_session_error"] <= TOLERANCE
    assert len(report["tf_devices"]) >= 2  # m-topo spreads the small CNN
    assert report["tf_problems"] == [] and report["tf_checked"] >= report["tf_nodes"]
    assert report["tf_unpinned"] == []
    assert report["tf_order_edges"] > 0
    assert report["split_error"] <= TOLERANCE and report["split_problems"] == []


_EMIT_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf
    from graphir.backends.tf.check import reference_values, relative_error
    from graphir.driver import run
    model, out = sys.argv[1], sys.argv[2]
    common = [model, "--cluster=4xcpu", "--passes=profile,place{algo=m-topo}"]
    codes = [run([*common, "--emit=tf-graphdef", "-o", out + "/g.pb"]),
             run([*common, "--emit=tf-savedmodel", "-o", out + "/sm"])]
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(open(out + "/g.pb", "rb").read())
    loaded = tf.saved_model.load(out + "/sm")
    serve = loaded.signatures["serving_default"]
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    got = list(serve(tf.constant(x)).values())
    want = reference_values(__import__("pathlib").Path(model), ["softmaxout_1"], {"data_0": x})["softmaxout_1"]
    print(json.dumps({
        "codes": codes,
        "devices": sorted({n.device for n in graph_def.node if n.op not in ("Placeholder", "Identity", "NoOp")}),
        "order_edges": sum(1 for n in graph_def.node for i in n.input if i.startswith("^")),
        "saved_error": relative_error([got[0].numpy()], [want]),
    }))
    """
)


def test_emitters_write_graphdef_and_savedmodel(one_process):
    (report,) = _part(one_process, "emit")
    tmp_path = Path(one_process["emit"]["argv"][1])
    assert report["codes"] == [0, 0]
    assert report["devices"] == ["/device:CPU:0", "/device:CPU:1", "/device:CPU:2"]
    assert report["order_edges"] > 0  # a placed, ordered module is emitted with its orders enforced
    assert report["saved_error"] <= TOLERANCE
    assert "feed %data_0 -> data_0:0" in (tmp_path / "g.pb.txt").read_text()
    assert (tmp_path / "sm" / "saved_model.pb").is_file()


def test_unknown_op_is_a_one_line_backend_error():
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    good = graph.add_node("onnx.Relu", [x], [TensorType(DType.F32, (4,))], name="good")
    bad = graph.add_node("onnx.FancyOp", [good.outputs[0]], [TensorType(DType.F32, (4,))], name="weird")
    graph.set_outputs(bad.outputs)
    with pytest.raises(BackendError) as info:
        lower(Module("m", graph))
    assert info.value.one_line() == (
        "node 'weird': error: 'onnx.FancyOp' op has no TensorFlow lowering (not in the ONNX->TF op table)"
    )


def test_enforce_order_needs_a_placement():
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (4,)))
    relu = graph.add_node("onnx.Relu", [x], [TensorType(DType.F32, (4,))], name="r")
    graph.set_outputs(relu.outputs)
    with pytest.raises(BackendError, match="enforce-order needs a placed module"):
        lower(Module("m", graph), enforce_order=True)


def test_importing_the_backend_does_not_load_tensorflow():
    code = (
        "import sys, graphir, graphir.driver; graphir.driver.load_builtin_emitters(); "
        "import graphir.backends.tf, graphir.backends.tf.onnx_ops; "
        "assert 'tensorflow' not in sys.modules; print(len(graphir.backends.tf.onnx_ops.ONNX_OPS))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 40


LARGE_WEIGHT_BYTES = 768 * 512 * 4
"""The bytes of :func:`_large_weight_model`'s MatMul weight."""


def _large_weight_model(path: Path) -> None:
    """An ONNX model whose MatMul weight (768 x 512 float32, 1.5 MiB) is above the large-weight threshold."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((768, 512)).astype(np.float32)
    bias = rng.standard_normal((512,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes,
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 768])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 512])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    assert weight.nbytes == LARGE_WEIGHT_BYTES


def test_large_weight_stays_out_of_the_graphdef(small_results):
    result = small_results["big.onnx"]
    _assert_proven(result)
    assert result["weights"] == 1  # the bias (2 KiB) stays a graph Const
    assert result["graphdef_bytes"] < LARGE_WEIGHT_BYTES // 100


def _conv_model(path: Path) -> None:
    """Conv (constant 8x3x3x3 weights, padded) -> Relu -> ConvTranspose (constant 8x4x2x2 weights)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "wt"], ["y"], name="deconv", strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 16, 16])],
        [
            numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b"),
            numpy_helper.from_array(rng.standard_normal((8, 4, 2, 2)).astype(np.float32), "wt"),
        ],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))


def test_constant_conv_weights_are_transposed_once_at_lowering(small_results, small_facts):
    """Constant ONNX weights of Conv and ConvTranspose become TF-layout constants, not per-step Transposes.

    The runs keep constant folding off, so ``Transpose(Const)`` would run every step on the
    convolution's device (fidelity-notes.md, resnet50-infer). Of the model's 6 transposes before,
    2 read the constant weights; the 4 that move activations to NHWC and back stay. The numbers
    still match onnxruntime (placed over devices by m-topo).
    """
    _assert_proven(small_results["convs.onnx"])
    assert small_facts["convs.onnx"] == {"transposes": 4, "of_consts": 0}


LARGE_CONV_WEIGHT_BYTES = 256 * 128 * 3 * 3 * 4
"""The bytes of each of :func:`_large_conv_model`'s two weights."""


def _large_conv_model(path: Path) -> None:
    """Conv (256x128x3x3 weights, 1.18 MiB) -> Relu -> ConvTranspose (256x128x3x3, 1.18 MiB), whose
    weights are also summed into a second output.

    Both weights are above the large-weight threshold (1 MiB), so both are held as variables.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    w = (rng.standard_normal((256, 128, 3, 3)) / 30).astype(np.float32)
    wt = (rng.standard_normal((256, 128, 3, 3)) / 30).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "wt"], ["y"], name="deconv"),
        helper.make_node("ReduceSum", ["wt"], ["s"], name="wsum", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "bigconvs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 8, 8])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 10, 10]),
            helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wt, "wt")],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    assert w.nbytes == wt.nbytes == LARGE_CONV_WEIGHT_BYTES


def test_variable_conv_weights_are_held_in_filter_layout(small_results, small_facts):
    """A large weight (a variable) that only convolutions read is stored in TF's filter layout.

    Worked by hand: the lowering transposes activations to NHWC and back around each convolution
    (4 transposes). Before, each variable weight was transposed too, every step (6). Now ``w``, read
    only by the Conv (as input #1, filter permutation [2, 3, 1, 0]), is stored as a 3x3x128x256
    variable and read as is; ``wt`` is also read by ``ReduceSum``, which needs ONNX's layout, so it
    stays 256x128x3x3 and is transposed for the ConvTranspose (1 weight transpose: 5 in all). The
    SavedModel-style GraphDef (weights as handles, filled by ``initialize_weights``) and the embedded
    one both still match onnxruntime.
    """
    assert LARGE_CONV_WEIGHT_BYTES > 1 << 20
    result = small_results["bigconvs.onnx"]
    _assert_proven(result)
    assert result["weights"] == 2
    out = small_facts["bigconvs.onnx"]
    assert out["shapes"] == {"w": [3, 3, 128, 256], "wt": [256, 128, 3, 3]}
    assert len(out["runs"]) == 2  # embedded weights, then weights as variables
    for transposes, *errors in out["runs"]:
        assert transposes == 5
        assert max(errors) <= TOLERANCE


def _filled_conv_model(path: Path) -> None:
    """Conv whose 8x3x3x3 weights are ``ConstantOfShape`` (0.5) -> Relu -> ConvTranspose of 8x4x2x2 filled (0.25).

    The zoo's weightless ONNX models (resnet50, squeezenet, inception_v1) make their weights so.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def fill(name: str, shape: list[int], value: float) -> list:
        return [
            helper.make_node(
                "ConstantOfShape",
                [f"{name}_shape"],
                [name],
                name=f"{name}_fill",
                value=numpy_helper.from_array(np.array([value], dtype=np.float32)),
            ),
        ]

    nodes = [
        *fill("w", [8, 3, 3, 3], 0.5),
        *fill("wt", [8, 4, 2, 2], 0.25),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "wt"], ["y"], name="deconv", strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "filled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 16, 16])],
        [
            numpy_helper.from_array(np.array([8, 3, 3, 3], dtype=np.int64), "w_shape"),
            numpy_helper.from_array(np.array([8, 4, 2, 2], dtype=np.int64), "wt_shape"),
        ],
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))


def test_filled_conv_weights_are_made_in_filter_layout_by_their_producer(small_results, small_facts):
    """``ConstantOfShape`` weights of Conv and ConvTranspose are filled in TF's filter layout, not transposed.

    ``Transpose(Fill(dims, v))`` is ``Fill(dims[perm], v)``: of the 6 transposes the old lowering
    made, 2 read a ``Fill`` (the weights); the 4 that move activations to NHWC and back stay. The
    new fills are charged to the ``ConstantOfShape`` nodes (their name scopes), so a profile puts
    their time on the producer, as the IR has it, and the convolutions own no ``Fill``. The numbers
    still match onnxruntime (placed over devices by m-topo).
    """
    _assert_proven(small_results["filled.onnx"])
    counts = small_facts["filled.onnx"]
    assert counts["transposes"] == 4
    assert counts["of_fills"] == 0
    assert counts["fill_owners"] == ["w_fill", "wt_fill"]


def _dilated_pool_model(path: Path) -> None:
    """MaxPool and AveragePool of kernel 3 x 4, dilations 2 x 3, strides 2 x 2, padded, on a 1x2x16x20 input."""
    from onnx import TensorProto, helper

    attributes = {"kernel_shape": [3, 4], "dilations": [2, 3], "strides": [2, 2], "pads": [1, 2, 1, 2]}
    nodes = [
        helper.make_node("MaxPool", ["x"], ["mx"], name="maxpool", **attributes),
        helper.make_node("AveragePool", ["x"], ["av"], name="avgpool", **attributes),
    ]
    # out = (16 + 2 - 5) // 2 + 1 = 7 rows, (20 + 4 - 10) // 2 + 1 = 8 columns
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 2, 7, 8]) for name in ("mx", "av")]
    graph = helper.make_graph(
        nodes, "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 16, 20])], outputs
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), str(path))


def test_dilated_pooling_takes_one_slice_per_kernel_row_and_column(small_results, small_facts):
    """A dilated pooling window is pooled one axis at a time (graphir.ops.conv_pool._dilated_window).

    Worked by hand: a 3 x 4 kernel is 3 strided slices along the rows, then 4 along the columns,
    7 per pool and 14 for the model's MaxPool and AveragePool (one slice per window offset would be
    12 per pool, 24; a 60 x 80 kernel 140 slices instead of 4,800). Both still match onnxruntime.
    """
    _assert_proven(small_results["dilated.onnx"])
    assert small_facts["dilated.onnx"] == {"strided_slices": 14}


# --------------------------------------------------------------------------- the small models, run once

_SMALL_MODELS = {
    "big.onnx": _large_weight_model,
    "convs.onnx": _conv_model,
    "bigconvs.onnx": _large_conv_model,
    "filled.onnx": _filled_conv_model,
    "dilated.onnx": _dilated_pool_model,
}


@pytest.fixture(scope="module")
def small_models(tmp_path_factory) -> dict[str, Path]:
    """The hand-built models, written to one folder (model name -> path)."""
    folder = tmp_path_factory.mktemp("small")
    for name, build in _SMALL_MODELS.items():
        build(folder / name)
    return {name: folder / name for name in _SMALL_MODELS}


@pytest.fixture(scope="module")
def small_results(one_process) -> dict[str, dict]:
    """The small models proven as ``check`` proves them, under ``profile,place{algo=m-topo}`` (name -> report)."""
    return {r["model"]: r for r in _part(one_process, "small")}


_FACTS_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import onnxruntime
    import tensorflow as tf
    from graphir.backends.tf import lower
    from graphir.importers import load_module

    def all_nodes(graph_def):
        nodes = list(graph_def.node)
        for function in graph_def.library.function:
            nodes += list(function.node_def)
        return nodes

    folder = Path(sys.argv[1])

    # convs.onnx: constant weights; which transposes remain and what they read
    nodes = all_nodes(lower(load_module(str(folder / "convs.onnx"))).graph_def())
    kind = {node.name: node.op for node in nodes}
    transposes = [node for node in nodes if node.op == "Transpose"]
    print(json.dumps({"model": "convs.onnx", "facts": {
        "transposes": len(transposes),
        "of_consts": sum(kind.get(node.input[0].split(":")[0]) == "Const" for node in transposes),
    }}))

    # bigconvs.onnx: variable weights; their stored shapes, and both GraphDef forms run against onnxruntime
    model = str(folder / "bigconvs.onnx")
    lowered = lower(load_module(model))
    shapes = {w.value: list(w.variable.shape) for w in lowered.weights.values()}
    x = np.random.default_rng(3).standard_normal((1, 128, 8, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(model).run(None, {"x": x})
    errors = []
    for embed in (True, False):
        graph_def = lowered.graph_def(embed_weights=embed)
        transposes = sum(node.op == "Transpose" for node in all_nodes(graph_def))
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(graph_def, name="")
            with tf.compat.v1.Session(graph=graph) as session:
                if not embed:
                    lowered.initialize_weights(session)
                got = session.run(list(lowered.fetches), {lowered.feeds[0]: x})
        errors.append([transposes] + [
            float(np.max(np.abs(g - w)) / max(1e-6, float(np.max(np.abs(w))))) for g, w in zip(got, want)
        ])
    print(json.dumps({"model": "bigconvs.onnx", "facts": {"shapes": shapes, "runs": errors}}))

    # filled.onnx: ConstantOfShape weights; transposes, and which IR node owns each Fill
    lowered = lower(load_module(str(folder / "filled.onnx")))
    nodes = all_nodes(lowered.graph_def())
    kind = {node.name: node.op for node in nodes}
    transposes = [node for node in nodes if node.op == "Transpose"]
    owner = {op: node for node, ops in lowered.node_ops.items() for op in ops}
    fills = sorted((node.name.split("/")[0], owner.get(node.name, "")) for node in nodes if node.op == "Fill")
    print(json.dumps({"model": "filled.onnx", "facts": {
        "transposes": len(transposes),
        "of_fills": sum(kind.get(node.input[0].split(":")[0]) == "Fill" for node in transposes),
        "fill_owners": sorted({o for _, o in fills}),
    }}))

    # dilated.onnx: dilated pooling; the strided slices that take the windows apart
    nodes = all_nodes(lower(load_module(str(folder / "dilated.onnx"))).graph_def())
    print(json.dumps({"model": "dilated.onnx", "facts": {
        "strided_slices": sum(node.op == "StridedSlice" for node in nodes),
    }}))
    """
)


@pytest.fixture(scope="module")
def small_facts(one_process) -> dict[str, dict]:
    """The small models lowered, their graphs' facts (model name -> facts)."""
    return {line["model"]: line["facts"] for line in _part(one_process, "facts")}


# `python -m graphir.driver.check`'s loop (the command line itself is run by fast_results): every model
# proven by check_onnx_model, a GraphIRError reported as the model's error.
_CHECK_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from graphir.backends.tf import check
    from graphir.errors import GraphIRError
    from graphir.driver import load_builtin_passes

    load_builtin_passes()
    passes, enforce = sys.argv[1], sys.argv[2] == "--enforce-order"
    for model in map(Path, sys.argv[3:]):
        try:
            result = check.check_onnx_model(model, "4xcpu", passes, enforce, 4, 0)
        except GraphIRError as exc:
            result = {"model": model.name, "error": exc.one_line()}
        print(json.dumps(result), flush=True)
    """
)

# Runs each part (name, script, argv) in this one process: 4 logical CPUs configured first, then each
# script with its own sys.argv, its printed JSON lines collected; a part that raises keeps its traceback.
_RUNNER = textwrap.dedent(
    """
    import contextlib, io, json, sys, traceback
    from graphir.backends.tf.check import configure_logical_cpus

    configure_logical_cpus(4)
    parts = json.loads(sys.stdin.read())
    reports = {}
    for name, script, argv in parts:
        sys.argv = ["-c", *argv]
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(script, f"<part {name}>", "exec"), {"__name__": "__main__"})
            lines = [json.loads(line) for line in printed.getvalue().splitlines() if line.startswith("{")]
            reports[name] = {"argv": argv, "lines": lines}
        except BaseException:
            reports[name] = {"argv": argv, "error": traceback.format_exc()}
    print(json.dumps(reports))
    """
)


@pytest.fixture(scope="module")
def one_process(small_models, tmp_path_factory) -> dict[str, dict]:
    """Every part but the light models' ``check`` run, in one process (see the module docstring)."""
    tmp = tmp_path_factory.mktemp("tf_parts")
    (tmp / "emit").mkdir()
    squeezenet = str(LIGHT / "light_squeezenet.onnx")
    m_topo = "profile,place{algo=m-topo}"
    parts = [
        ("small", _CHECK_SCRIPT, [m_topo, "", *map(str, small_models.values())]),
        ("spread", _CHECK_SCRIPT, [m_topo, "--enforce-order", squeezenet]),
        ("tf", _TF_SCRIPT, []),
        ("emit", _EMIT_SCRIPT, [squeezenet, str(tmp / "emit")]),
        ("facts", _FACTS_SCRIPT, [str(small_models["convs.onnx"].parent)]),
    ]
    result = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(parts),
        capture_output=True,
        text=True,
        env=_env(tmp),
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


def _part(reports: dict[str, dict], name: str) -> list[dict]:
    """The JSON lines part ``name`` printed (its traceback fails the test)."""
    assert "error" not in reports[name], reports[name]["error"]
    return reports[name]["lines"]
