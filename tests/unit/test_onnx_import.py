"""Tests of the ONNX importer: real models, errors, every attribute kind, external data, no copies."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphir.attributes import INLINE_ELEMENTS, DenseTensor, Opaque
from graphir.errors import ImportError_
from graphir.importers import load_module
from graphir.importers.onnx import import_onnx
from graphir.ir import ExternalTensor, Module
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.regions import node_regions
from graphir.types import DType, TensorType

LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = sorted(LIGHT_DIR.glob("*.onnx"))
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "squeezenet.onnx"

F32_4 = TensorType(DType.F32, (4,))


def _save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save_model(model, str(path))
    return path


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 17),)) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], producer_name="test")


def _vi(name: str, shape=(4,), elem=TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


# ------------------------------------------------------------------------------ (a) real models


def test_all_nine_light_models_are_found():
    assert len(LIGHT_MODELS) == 9


@pytest.mark.parametrize("path", LIGHT_MODELS, ids=lambda p: p.stem)
def test_light_model_imports_and_round_trips(path: Path):
    module = import_onnx(path)
    model = onnx.load(str(path))
    assert len(module.graph) == len(model.graph.node)
    assert module.name == path.stem
    assert module.metadata == {"producer": "onnx-caffe2", "opset": "ai.onnx:9"}
    initializers = {t.name for t in model.graph.initializer}
    assert [v.name for v in module.graph.constants] == [t.name for t in model.graph.initializer]
    assert [v.name for v in module.graph.inputs] == [i.name for i in model.graph.input if i.name not in initializers]
    assert [v.name for v in module.graph.outputs] == [o.name for o in model.graph.output]
    index = module.graph.index()
    assert index.num_nodes == len(model.graph.node)
    text = print_module(module)
    again = print_module(parse_module(text, str(path)))
    assert again == text


def test_example_is_the_light_squeezenet():
    assert EXAMPLE.read_bytes() == (LIGHT_DIR / "light_squeezenet.onnx").read_bytes()
    module = load_module(EXAMPLE)
    assert module.name == "squeezenet"
    assert len(module.graph) == 105
    data = module.graph.value("data_0")
    assert data.type == TensorType(DType.F32, (1, 3, 224, 224))
    conv = module.graph.node("n0")  # the ONNX node name
    assert conv.op == "onnx.Conv"
    assert [v.name for v in conv.inputs] == ["data_0", "conv1_w_0", "conv1_b_0"]
    assert conv.params == {"strides": (2, 2), "pads": (0, 0, 0, 0), "kernel_shape": (3, 3)}
    assert list(conv.params) == ["strides", "pads", "kernel_shape"]
    assert conv.outputs[0].name == "r0"
    assert conv.outputs[0].type == TensorType(DType.F32, (1, 64, 111, 111))


def test_untyped_values_give_one_warning_line(capsys):
    import_onnx(EXAMPLE)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "warning: 1 value(s) have no inferred shape ('r62')" in err[0]


# ------------------------------------------------------------------------------ (b) errors


def _one_line_error(path: Path) -> str:
    with pytest.raises(ImportError_) as info:
        import_onnx(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_missing_file(tmp_path):
    message = _one_line_error(tmp_path / "nope.onnx")
    assert message.endswith("error: no such file")
    with pytest.raises(ImportError_, match="no such file"):
        load_module(tmp_path / "nope.onnx")


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xff\xff\xff garbage \x00\x01", b"this is not an ONNX model\n", b""],
    ids=["binary", "text", "empty"],
)
def test_corrupt_file(tmp_path, payload):
    path = tmp_path / "bad.onnx"
    path.write_bytes(payload)
    message = _one_line_error(path)
    assert "not" in message and "ONNX model" in message


def test_truncated_model(tmp_path):
    data = EXAMPLE.read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    assert "ONNX model" in _one_line_error(path)


def test_undefined_value_names_the_node(tmp_path):
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    path = _save(_model(nodes, [_vi("x")], [_vi("y")]), tmp_path / "undef.onnx")
    message = _one_line_error(path)
    assert "node 'adder'" in message and "undefined value 'ghost'" in message


def test_duplicate_value_names(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    path = _save(_model(nodes, [_vi("x")], [_vi("y")]), tmp_path / "dup.onnx")
    message = _one_line_error(path)
    assert "value 'y' is defined twice" in message and "node 'a'" in message and "node 'b'" in message


def test_undefined_graph_output(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    path = _save(_model(nodes, [_vi("x")], [_vi("z")]), tmp_path / "out.onnx")
    assert "graph output 'z'" in _one_line_error(path)


# ------------------------------------------------------------------------------ (c) hand-built model


def _attribute_node() -> tuple[onnx.NodeProto, dict[str, object]]:
    """A custom-domain node carrying one attribute of every kind, in a deliberately unsorted order."""
    sub = helper.make_graph([helper.make_node("Identity", ["a"], ["b"])], "sub", [_vi("a")], [_vi("b")])
    tensor = helper.make_tensor("t", TensorProto.INT64, [2], [5, 6])
    tensor2 = helper.make_tensor("t2", TensorProto.FLOAT, [], [1.5])
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sv", TensorProto.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("si", TensorProto.INT64, [2], [0, 3]),
        [4],
    )
    type_proto = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, "n"])
    attributes = [
        ("zi", 3, 3),
        ("f", 0.25, 0.25),
        ("eps", 1e-3, 0.001),
        ("s", b"hello \xc3\xa9", "hello \u00e9"),
        ("ints", [1, -2, 3], (1, -2, 3)),
        ("floats", [0.5, 0.1], (0.5, 0.1)),
        ("strings", [b"a", b"b"], ("a", "b")),
        ("t", tensor, DenseTensor.from_numpy(np.array([5, 6], dtype=np.int64))),
        ("tensors", [tensor, tensor2], (DenseTensor.from_numpy(np.array([5, 6], dtype=np.int64)),
                                        DenseTensor.from_numpy(np.array(1.5, dtype=np.float32)))),
        ("g", sub, Opaque("onnx.GraphProto", sub.SerializeToString())),
        ("graphs", [sub], (Opaque("onnx.GraphProto", sub.SerializeToString()),)),
        ("sp", sparse, Opaque("onnx.SparseTensorProto", sparse.SerializeToString())),
        ("sps", [sparse], (Opaque("onnx.SparseTensorProto", sparse.SerializeToString()),)),
        ("tp", type_proto, Opaque("onnx.TypeProto", type_proto.SerializeToString())),
        ("tps", [type_proto], (Opaque("onnx.TypeProto", type_proto.SerializeToString()),)),
    ]  # fmt: skip
    node = helper.make_node("Everything", ["x"], ["c0", "", "c2", ""], name="every", domain="com.example")
    for name, value, _ in attributes:
        node.attribute.append(helper.make_attribute(name, value))
    expected = {name: converted for name, _, converted in attributes}
    return node, expected


@pytest.fixture
def hand_built(tmp_path) -> tuple[Module, onnx.ModelProto, str]:
    every, _ = _attribute_node()
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["t_out"])], "then", [], [_vi("t_out")]
    )  # reads 'x' and 'bias' from the outer graph
    else_graph = helper.make_graph([helper.make_node("Neg", ["r"], ["e_out"])], "else", [], [_vi("e_out")])
    weight = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Clip", ["r", "", "hi"], ["clipped"], name="clip"),  # interior empty optional input
        helper.make_node("Clip", ["r", "lo", ""], ["clipped2"], name="clip"),  # trailing one; duplicate name
        helper.make_node("LeakyRelu", ["clipped"], ["leaky"], alpha=0.1),
        helper.make_node("If", ["cond"], ["branch"], name="choose", then_branch=then_graph, else_branch=else_graph),
        helper.make_node("MatMul", ["wide", "weight"], ["mm"], name="matmul"),
        every,
    ]
    inputs = [_vi("x"), _vi("cond", (), TensorProto.BOOL), _vi("wide", (2, 6)), _vi("bias")]
    initializers = [
        numpy_helper.from_array(np.float32(0.0), "lo"),
        numpy_helper.from_array(np.float32(6.0), "hi"),
        numpy_helper.from_array(np.array([1, 2, 3, 4], dtype=np.float32), "bias"),  # also a graph input
        numpy_helper.from_array(weight, "weight"),
    ]
    outputs = [_vi("clipped2"), _vi("leaky"), _vi("branch"), _vi("mm", (2, 5)), _vi("c2", ())]
    model = _model(nodes, inputs, outputs, initializers, opsets=(("", 17), ("com.example", 1)))
    path = _save(model, tmp_path / "hand-built.model.onnx")
    module = import_onnx(path)
    return module, model, path.name


def test_hand_built_module_header(hand_built):
    module, _, _ = hand_built
    assert module.name == "hand_built_model"
    assert module.metadata == {"producer": "test", "opset": "ai.onnx:17,com.example:1"}
    assert list(module.metadata) == ["producer", "opset"]


def test_hand_built_inputs_and_constants(hand_built):
    module, _, _ = hand_built
    graph = module.graph
    assert [v.name for v in graph.inputs] == ["x", "cond", "wide"]  # 'bias' is an initializer: a constant
    assert [v.name for v in graph.constants] == ["lo", "hi", "bias", "weight"]
    assert graph.value("lo").const == DenseTensor.from_numpy(np.array(0.0, dtype=np.float32))
    assert graph.value("hi").type == TensorType(DType.F32, ())
    assert graph.value("bias").const == DenseTensor.from_numpy(np.array([1, 2, 3, 4], dtype=np.float32))
    weight = graph.value("weight")
    assert weight.type == TensorType(DType.F32, (6, 5))
    assert 6 * 5 > INLINE_ELEMENTS
    assert isinstance(weight.const, ExternalTensor)
    np.testing.assert_array_equal(weight.const.numpy(), np.arange(30, dtype=np.float32).reshape(6, 5))


def test_hand_built_params_exact(hand_built):
    module, _, _ = hand_built
    graph = module.graph
    _, expected = _attribute_node()
    every = graph.node("every")
    assert every.op == "onnx.com.example.Everything"
    assert list(every.params) == [*expected, "_absent_outputs"]  # stored order, not sorted
    assert every.params == {**expected, "_absent_outputs": (1,)}
    assert [v.name for v in every.outputs] == ["c0", "c2"]  # "" in the middle recorded, trailing "" dropped
    assert graph.node("leaky").params == {"alpha": 0.1}


def test_hand_built_empty_optional_inputs(hand_built):
    module, _, _ = hand_built
    graph = module.graph
    assert graph.get_node("clip") is None  # the ONNX name 'clip' is not unique: both use their output name
    clip = graph.node("clipped")
    assert [v.name for v in clip.inputs] == ["r", "hi"]
    assert clip.params == {"_absent_inputs": (1,)}
    clip2 = graph.node("clipped2")
    assert [v.name for v in clip2.inputs] == ["r", "lo"]
    assert clip2.params == {}
    assert graph.get_node("relu") is graph.value("r").producer  # a unique ONNX name is kept


def test_hand_built_if_holds_regions_with_captures(hand_built):
    module, _, _ = hand_built
    node = module.graph.node("choose")
    assert node.op == "onnx.If"
    assert list(node.params) == ["else_branch", "then_branch", "_captured_inputs"]  # onnx.helper sorts attributes
    assert node.params["_captured_inputs"] == 2
    assert [v.name for v in node.inputs] == ["cond", "r", "x"]  # captures in attribute order
    branches = dict(node_regions(node))
    then_graph, else_graph = branches["then_branch"].graph, branches["else_branch"].graph
    assert [v.name for v in then_graph.inputs] == ["r", "x"] == [v.name for v in else_graph.inputs]
    assert [v.name for v in then_graph.constants] == ["bias"]  # a small initializer is copied in, not captured
    assert [n.op for n in then_graph.nodes] == ["onnx.Add"] and [n.op for n in else_graph.nodes] == ["onnx.Neg"]
    assert node.outputs[0].type == F32_4
    assert node.predecessors == [module.graph.node("relu")]  # the implicit use of 'r' is an edge


def test_hand_built_warnings(tmp_path, capsys):
    every, _ = _attribute_node()
    sub = helper.make_graph([helper.make_node("Identity", ["x"], ["o"])], "b", [], [_vi("o")])
    nodes = [helper.make_node("If", ["c"], ["y"], name="choose", then_branch=sub, else_branch=sub), every]
    model = _model(nodes, [_vi("x"), _vi("c", (), TensorProto.BOOL)], [_vi("y")], opsets=(("", 17), ("com.example", 1)))
    path = _save(model, tmp_path / "warn.onnx")
    import_onnx(path)
    err = capsys.readouterr().err.splitlines()
    # If's branches become regions (no warning); an op of another domain with subgraphs stays opaque.
    assert err[0] == f"{path}:node 'every': warning: 'Everything' has 2 subgraph(s); imported as an opaque node"
    assert err[1].startswith(f"{path}: warning: 2 value(s) have no inferred shape ('c0', 'c2')")
    assert len(err) == 2


def test_hand_built_types_and_round_trip(hand_built):
    module, _, name = hand_built
    graph = module.graph
    assert graph.value("mm").type == TensorType(DType.F32, (2, 5))
    assert graph.value("c0").type == TensorType(DType.F32, None)  # custom op: nothing inferred
    assert graph.value("c2").type == TensorType(DType.F32, ())  # declared graph output type
    graph.index()
    text = print_module(module)
    assert print_module(parse_module(text, name)) == text
    assert "_absent_inputs = [1]" in text


def test_symbolic_dims_and_node_names(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="y"), helper.make_node("Neg", ["y"], ["z"], name="y2")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq len", 3])]
    outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)]
    module = import_onnx(_save(_model(nodes, inputs, outputs), tmp_path / "sym.onnx"))
    graph = module.graph
    assert graph.value("x").type == TensorType(DType.F32, ("batch", "seq_len", 3))
    assert graph.value("z").type == TensorType(DType.F32, ("batch", "seq_len", 3))
    assert graph.node("y2").outputs[0].name == "z"
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def test_nodes_out_of_topological_order(tmp_path):
    nodes = [helper.make_node("Neg", ["y"], ["z"]), helper.make_node("Relu", ["x"], ["y"])]
    module = import_onnx(_save(_model(nodes, [_vi("x")], [_vi("z")]), tmp_path / "unsorted.onnx"))
    assert [n.name for n in module.graph.index().nodes] == ["y", "z"]


# ------------------------------------------------------------------------------ (d) external data


def _external_model(tmp_path: Path) -> tuple[Path, np.ndarray]:
    weight = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model(nodes, [_vi("x", (1, 32))], [_vi("y", (1, 32))], [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size == weight.nbytes
    return path, weight


def test_external_data_loads_lazily(tmp_path):
    path, weight = _external_model(tmp_path)
    module = import_onnx(path)
    const = module.graph.value("w").const
    assert isinstance(const, ExternalTensor)
    assert const.type == TensorType(DType.F32, (32, 32))
    assert module.graph.value("y").type == TensorType(DType.F32, (1, 32))
    np.testing.assert_array_equal(const.numpy(), weight)
    # The bytes are read when the loader runs, not at import: rewrite the file and read again.
    (tmp_path / "weights.bin").write_bytes((weight * 2).tobytes())
    np.testing.assert_array_equal(const.numpy(), weight * 2)


def test_missing_external_data_file(tmp_path):
    path, _ = _external_model(tmp_path)
    (tmp_path / "weights.bin").unlink()
    message = _one_line_error(path)
    assert "initializer 'w'" in message and "'weights.bin' not found" in message


def test_short_external_data_file(tmp_path):
    path, _ = _external_model(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"\x00" * 16)
    assert "has 16 bytes" in _one_line_error(path)


# ------------------------------------------------------------------------------ (e) no weight copies


def test_importer_does_not_copy_weights(tmp_path):
    weight = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)  # 1 MiB
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = _model(nodes, [_vi("x", (1, 512))], [_vi("y", (1, 512))], [numpy_helper.from_array(weight, "w")])
    path = _save(model, tmp_path / "big.onnx")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        module = import_onnx(path)
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert retained < weight.nbytes // 4, f"import keeps {retained} bytes of Python objects"
    const = module.graph.value("w").const
    assert isinstance(const, ExternalTensor)
    first = const.numpy()
    np.testing.assert_array_equal(first, weight)
    np.testing.assert_array_equal(const.numpy(), weight)
    assert "external" in print_module(module).split("const %w")[1].splitlines()[0]


# ------------------------------------------------------------------------------ less common constructs


def test_uncommon_types_sparse_and_small_external_tensors(tmp_path, capsys):
    bf16 = helper.make_tensor("bf", TensorProto.BFLOAT16, [2], [1.0, 2.5])
    fnuz = helper.make_tensor("f8", TensorProto.FLOAT8E4M3FNUZ, [2], [1.0, 2.0])
    shape = numpy_helper.from_array(np.array([2, -1], dtype=np.int64), "shape")
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("sp", TensorProto.FLOAT, [2], [1.0, 2.0]),
        helper.make_tensor("sp_idx", TensorProto.INT64, [2], [0, 5]),
        [2, 3],
    )
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
        helper.make_node("SequenceConstruct", ["x", "x"], ["seq"]),
        helper.make_node("SequenceAt", ["seq", "i"], ["z"]),
        helper.make_node("Add", ["sp", "sp"], ["s2"]),
        helper.make_node("Cast", ["bf"], ["bfc"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("x", (4, "N")), _vi("i", (), TensorProto.INT64)],
        [_vi("y", None), _vi("z", None), _vi("s2", None), _vi("bfc", None)],
        initializer=[bf16, fnuz, shape],
        sparse_initializer=[sparse],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    path = tmp_path / "uncommon.onnx"
    # Every tensor external, even the 2-element shape that shape inference must read.
    onnx.save_model(model, str(path), save_as_external_data=True, location="data.bin", size_threshold=0)
    module = import_onnx(path)
    err = capsys.readouterr().err.splitlines()
    warning = "warning: ONNX element type FLOAT8E4M3FNUZ has no graphir dtype; imported as u8 (same size)"
    assert err == [f"{path}: {warning}"]
    graph = module.graph
    assert graph.value("bf").const == DenseTensor(TensorType(DType.BF16, (2,)), b"\x80\x3f\x20\x40")
    assert graph.value("f8").type == TensorType(DType.U8, (2,))
    assert graph.value("shape").const == DenseTensor.from_numpy(np.array([2, -1], dtype=np.int64))
    assert graph.value("y").type.shape[0] == 2  # inference read the external shape tensor
    assert graph.value("seq").type == TensorType(DType.VARIANT, None)
    assert graph.value("z").type == TensorType(DType.F32, (4, "N"))
    assert graph.value("bfc").type == TensorType(DType.F32, (2,))
    sp = graph.value("sp")
    assert sp.type == TensorType(DType.F32, (2, 3))
    np.testing.assert_array_equal(sp.const.numpy(), np.array([[1, 0, 0], [0, 0, 2]], dtype=np.float32))
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def test_duplicate_outputs_of_one_node(tmp_path):
    nodes = [helper.make_node("Split", ["x"], ["y", "y"], name="split", num_outputs=2)]
    path = _save(_model(nodes, [_vi("x")], [_vi("y", (2,))], opsets=(("", 18),)), tmp_path / "dup2.onnx")
    assert "value 'y' is defined twice" in _one_line_error(path)


def test_node_output_shadowing_an_initializer(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["w"], name="relu")]
    init = [numpy_helper.from_array(np.zeros(4, np.float32), "w")]
    path = _save(_model(nodes, [_vi("x")], [_vi("w")], init), tmp_path / "shadow.onnx")
    message = _one_line_error(path)
    assert "value 'w' is defined twice: by initializer 'w' and by node 'relu'" in message


def test_failed_shape_inference_falls_back_to_declared_types(tmp_path, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("inference\nexploded")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])]
    model = _model(nodes, [_vi("x", (2,))], [_vi("z", (2,))])
    model.graph.value_info.append(_vi("y", (2,)))
    path = _save(model, tmp_path / "noinfer.onnx")
    module = import_onnx(path)
    assert module.graph.value("y").type == TensorType(DType.F32, (2,))
    assert module.graph.value("z").type == TensorType(DType.F32, (2,))
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{path}: warning: shape inference failed, using the declared value_info (RuntimeError: inference exploded)"
    ]


def test_synthetic_layered_model(tmp_path, capsys):
    from devtools.synth_onnx import make_layered_onnx

    model = make_layered_onnx(500, seed=3)
    assert model.SerializeToString() == make_layered_onnx(500, seed=3).SerializeToString()
    assert model.SerializeToString() != make_layered_onnx(500, seed=4).SerializeToString()
    assert len(model.graph.node) == 500
    module = import_onnx(_save(model, tmp_path / "synth.onnx"))
    assert capsys.readouterr().err == ""  # every value typed by shape inference
    assert len(module.graph) == 500
    assert {v.type for v in module.graph.index().values} == {TensorType(DType.F32, (1, 64))}
