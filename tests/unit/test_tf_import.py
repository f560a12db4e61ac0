"""The TensorFlow importer: GraphDef files, SavedModels, concrete functions, inlining, colocation, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402  (installed by make: the tf extra)

from graphir.driver import run  # noqa: E402
from graphir.importers import load_module  # noqa: E402
from graphir.importers.tf import (  # noqa: E402
    CALL_OPS,
    colocate_resource_users,
    concrete_function_graphdef,
    from_concrete_function,
    import_graphdef,
    persistent_bytes,
    tf_tensor_name,
    variable_type,
)
from graphir.parser import parse_module  # noqa: E402
from graphir.printer import print_module  # noqa: E402
from graphir.types import DType, TensorType  # noqa: E402
from graphir.verifier import verify  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def flat_op_count(graph_def) -> int:
    """Ops after inlining, counted independently of the importer: calls replaced by their bodies."""
    library = {f.signature.name: f for f in graph_def.library.function}

    def count(nodes) -> int:
        total = 0
        for node in nodes:
            name = node.attr["f"].func.name if node.op in CALL_OPS else node.op
            if name in library:
                total += count(library[name].node_def)
            else:
                total += 1
        return total

    return count(graph_def.node)


def large_consts(module_or_graph_def) -> int:
    return len(module_or_graph_def.graph.constants)


def roundtrip(module) -> str:
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    return text


# --------------------------------------------------------------------------------- small graphs


@pytest.fixture
def nested_function():
    variable = tf.Variable(tf.ones([3]), name="weights")

    @tf.function
    def inner(x, v):
        return tf.nn.relu(x) * v.read_value(), x + 1.0

    @tf.function
    def middle(x, v):
        a, b = inner(x, v)
        return a - b

    @tf.function
    def outer(x):
        with tf.control_dependencies([variable.assign_add(x)]):
            y = middle(x, variable)
        return y * 2.0

    concrete = outer.get_concrete_function(tf.TensorSpec([3], tf.float32, name="x"))
    concrete.keepalive = variable
    return concrete


def test_nested_functions_are_inlined(nested_function):
    module = from_concrete_function(nested_function)
    graph = module.graph
    ops = {node.op for node in graph.nodes}
    assert not ops & {"tf.StatefulPartitionedCall", "tf.PartitionedCall"}
    graph_def = concrete_function_graphdef(nested_function)
    assert len(graph) == flat_op_count(graph_def) - len(graph.constants)
    # Inlined names are scoped by the call nodes, two levels deep.
    relu = next(node for node in graph.nodes if node.op == "tf.Relu")
    assert relu.name.count("/") == 2 and relu.name.endswith("/Relu")
    verify(module)
    roundtrip(module)


def test_control_inputs_are_kept_and_propagated_into_bodies(nested_function):
    graph = from_concrete_function(nested_function).graph
    assign = graph.node("AssignAddVariableOp")
    relu = next(node for node in graph.nodes if node.op == "tf.Relu")
    # The call's control input reaches the body nodes that have no producer inside the body.
    assert assign in relu.control_inputs
    index = graph.index()
    assert index.edge_control.sum() >= 1
    assert (index.edge_bytes[index.edge_control] == 0).all()
    assert "ctrl(@AssignAddVariableOp)" in print_module(from_concrete_function(nested_function))


def test_variables_are_resource_values_with_dtype_and_shape(nested_function):
    graph = from_concrete_function(nested_function).graph
    handles = [node for node in graph.nodes if node.op == "tf.VarHandleOp"]
    assert len(handles) == 1
    handle = handles[0]
    assert handle.outputs[0].type == TensorType(DType.RESOURCE, ())
    assert handle.params["dtype"] == "f32" and handle.params["shape"] == (3,)
    assert handle.params["shared_name"] == "weights"
    assert variable_type(handle) == TensorType(DType.F32, (3,))
    assert persistent_bytes(handle) == 12
    read = next(node for node in graph.nodes if node.op == "tf.ReadVariableOp")
    assert read.outputs[0].type == TensorType(DType.F32, (3,))


def test_value_names_map_back_to_tf_tensor_names():
    @tf.function
    def split(x):
        a, b = tf.split(x, 2, name="halves")
        return a + b

    graph = from_concrete_function(split.get_concrete_function(tf.TensorSpec([4], tf.float32))).graph
    node = graph.node("halves")
    assert [v.name for v in node.outputs] == ["halves", "halves#1"]
    assert [tf_tensor_name(v) for v in node.outputs] == ["halves:0", "halves:1"]
    assert "%halves#1" in print_module(from_concrete_function(split.get_concrete_function(tf.TensorSpec([4]))))


def test_colocation_groups_become_colocate_annotations(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
        anchor = tf.identity(x, name="anchor")
        with tf.compat.v1.colocate_with(anchor):
            member1 = tf.negative(anchor, name="member1")
            member2 = tf.square(member1, name="member2")
        tf.add(member2, x, name="outside")
    path = tmp_path / "coloc.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    module = load_module(path)
    colocated = {node.name: node.colocate for node in module.graph.nodes if node.colocate is not None}
    assert colocated == {"anchor": "anchor", "member1": "anchor", "member2": "anchor"}
    assert "_class" not in module.graph.node("member1").params
    text = roundtrip(module)
    assert text.count('colocate = "anchor"') == 3


def test_resource_users_share_a_colocate_class_with_the_variable():
    """TensorFlow runs a handle's users where the resource lives: the importer records that as ``colocate``."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        w = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[3], shared_name="w", name="w")
        v = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[3], shared_name="v", name="v")
        alias = tf.identity(w, name="alias")  # a handle passed on: its users run where 'w' lives
        read = tf.raw_ops.ReadVariableOp(resource=alias, dtype=tf.float32, name="read")
        product = tf.multiply(read, x, name="product")
        with tf.compat.v1.colocate_with(product):  # an existing `_class` group, merged through 'bump'
            tf.raw_ops.AssignAddVariableOp(resource=w, value=product, name="bump")
        tf.raw_ops.AssignVariableOp(resource=v, value=x, name="set_v")
        tf.negative(x, name="free")
    module = import_graphdef(graph.as_graph_def(), name="vars")
    colocated = {node.name: node.colocate for node in module.graph.nodes if node.colocate is not None}
    # {w, alias, read, bump} meet {product, bump} (a loc:@ class, whose name wins); v's class is named after v.
    assert colocated == {
        "w": "product",
        "alias": "product",
        "read": "product",
        "bump": "product",
        "product": "product",
        "v": "v",
        "set_v": "v",
    }
    assert colocate_resource_users(module.graph) == 0  # idempotent: nothing left to merge
    text = roundtrip(module)
    assert text.count('colocate = "product"') == 5


def test_large_consts_become_external_constants_and_devices_are_recorded(tmp_path):
    graph = tf.Graph()
    with graph.as_default(), tf.device("/device:CPU:0"):
        x = tf.compat.v1.placeholder(tf.float32, [1, 64], name="x")
        weights = tf.constant([[0.5] * 32] * 64, name="w")
        bias = tf.constant([1.0, 2.0], name="b")
        y = tf.matmul(x, weights, name="mm")
        tf.reduce_sum(y, name="total") + tf.reduce_sum(bias)
    path = tmp_path / "frozen.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    module = load_module(path)
    const = module.graph.value("w")
    assert const.producer is None and const.type == TensorType(DType.F32, (64, 32))
    assert const.const.numpy().shape == (64, 32)
    assert module.graph.node("b").op == "tf.Const"
    assert module.graph.node("mm").params["_device"] == "/device:CPU:0"
    assert len(module.graph) == len(graph.as_graph_def().node) - 1
    assert "const %w : f32[64,32] = external" in roundtrip(module)


def test_saved_model_signature_is_imported_without_restoring(tmp_path):
    class Scale(tf.Module):
        def __init__(self):
            self.weights = tf.Variable(tf.fill([4, 4], 2.0), name="weights")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.matmul(x, self.weights)}

    module_obj = Scale()
    tf.saved_model.save(module_obj, str(tmp_path / "sm"), signatures=module_obj.__call__)
    module = load_module(tmp_path / "sm")
    ops = [node.op for node in module.graph.nodes]
    assert "tf.MatMul" in ops and "tf.VarHandleOp" in ops
    assert not set(ops) & {"tf.StatefulPartitionedCall", "tf.PartitionedCall", "tf.SaveV2", "tf.RestoreV2"}
    assert module.metadata["signature"] == "serving_default"
    (output,) = module.graph.outputs
    assert output.type == TensorType(DType.F32, (None, 4))
    verify(module)
    roundtrip(module)


# --------------------------------------------------------------------------------- a real training graph


@pytest.fixture(scope="module")
def small_training_step():
    from graphir.tools.zoo import build_train_graphdef

    config = (("layers", 2), ("units", 32), ("vocab", 64), ("seq", 6))
    graph_def, concrete = build_train_graphdef("lstm", 8, config)
    return graph_def, concrete


def test_training_step_imports_every_op(small_training_step, tmp_path):
    graph_def, concrete = small_training_step
    module = from_concrete_function(concrete, name="lstm_step")
    graph = module.graph
    assert len(graph) == flat_op_count(graph_def) - len(graph.constants)
    ops = {node.op for node in graph.nodes}
    assert {"tf.ResourceApplyAdam", "tf.MatMul", "tf.SigmoidGrad", "tf.VarHandleOp"} <= ops
    variables = [node for node in graph.nodes if variable_type(node) is not None]
    assert sum(persistent_bytes(node) for node in variables) > 0
    assert all(node.outputs[0].type.dtype is DType.RESOURCE for node in variables)
    verify(module)
    # The .pb written by the zoo records the function's outputs: it imports to the same module.
    path = tmp_path / "step.pb"
    path.write_bytes(graph_def.SerializeToString(deterministic=True))
    from_file = load_module(path)
    assert [v.name for v in from_file.graph.outputs] == [v.name for v in graph.outputs]
    assert len(graph.outputs) == 1 and graph.outputs[0].producer.op == "tf.Identity"
    from_file.name = module.name
    assert roundtrip(from_file) == roundtrip(module)


def test_training_step_driver_roundtrip(small_training_step, tmp_path, capsys):
    graph_def, _ = small_training_step
    path = tmp_path / "step.pb"
    path.write_bytes(graph_def.SerializeToString(deterministic=True))
    out = tmp_path / "step.gir"
    assert run([str(path), "-o", str(out)]) == 0
    again = tmp_path / "again.gir"
    assert run([str(out), "-o", str(again)]) == 0
    assert out.read_bytes() == again.read_bytes()


# --------------------------------------------------------------------------------- errors


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_pb_that_is_not_a_graphdef(tmp_path, capsys):
    path = tmp_path / "bad.pb"
    path.write_bytes(b"this is not a protobuf \xff\xfe\x00\x01")
    assert run([str(path)]) == 1
    line = one_error(capsys)
    assert line.startswith(f"{path}: error: not a") and "GraphDef" in line


def test_empty_pb(tmp_path, capsys):
    path = tmp_path / "empty.pb"
    path.write_bytes(b"")
    assert run([str(path)]) == 1
    assert one_error(capsys) == f"{path}: error: not a TensorFlow GraphDef (it has no nodes)"


def test_saved_model_without_signatures(tmp_path, capsys):
    class Plain(tf.Module):
        def __init__(self):
            self.v = tf.Variable(1.0)

    tf.saved_model.save(Plain(), str(tmp_path / "nosig"))
    assert run([str(tmp_path / "nosig")]) == 1
    assert "error: SavedModel has no signatures" in one_error(capsys)


def test_missing_directory_and_non_saved_model_directory(tmp_path, capsys):
    assert run([str(tmp_path / "missing_dir") + "/"]) == 1
    assert one_error(capsys).endswith("no such file or directory")
    assert run([str(tmp_path)]) == 1
    assert (
        one_error(capsys) == f"{tmp_path}: error: not a SavedModel directory (no saved_model.pb or saved_model.pbtxt)"
    )


def test_undefined_input_names_the_node(tmp_path, capsys):
    graph_def = tf.compat.v1.GraphDef()
    node = graph_def.node.add(name="y", op="Identity")
    node.input.append("nowhere:0")
    node.attr["T"].type = tf.float32.as_datatype_enum
    path = tmp_path / "undefined.pb"
    path.write_bytes(graph_def.SerializeToString())
    assert run([str(path)]) == 1
    assert one_error(capsys) == f"{path}:node 'y': error: uses undefined value 'nowhere'"


def test_import_graphdef_api_names_the_module(nested_function):
    module = import_graphdef(concrete_function_graphdef(nested_function), name="outer_fn", source="<test>")
    assert module.name == "outer_fn"
    assert Path(module.graph.node("AssignAddVariableOp").loc.file) == Path("<test>")
