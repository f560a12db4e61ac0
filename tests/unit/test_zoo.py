"""The model zoo: entry registry, deterministic builds, `zoo:<name>` in the driver, and (slow) every entry.

The slow tests build the real models (minutes of TensorFlow time); they run with ``make test-all``
(``pytest -m slow``) and reuse what ``make zoo`` built in ``zoo/``.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import tensorflow as tf  # noqa: E402  (installed by make: the tf extra)

from graphir.attributes import INLINE_ELEMENTS  # noqa: E402
from graphir.driver import run  # noqa: E402
from graphir.importers import load_module  # noqa: E402
from graphir.importers.tf import CALL_OPS, import_graphdef  # noqa: E402
from graphir.parser import parse_module  # noqa: E402
from graphir.printer import print_module  # noqa: E402
from graphir.tools import zoo  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TRAIN_ENTRIES = sorted(name for name, entry in zoo.ENTRIES.items() if entry.mode == "train")
INFER_ENTRIES = sorted(name for name, entry in zoo.ENTRIES.items() if entry.mode == "infer")


def flat_ops(graph_def) -> list:
    """The ops of a GraphDef after function inlining, computed independently of the importer."""
    library = {f.signature.name: f for f in graph_def.library.function}

    def expand(nodes) -> list:
        out = []
        for node in nodes:
            callee = node.attr["f"].func.name if node.op in CALL_OPS else node.op
            out.extend(expand(library[callee].node_def) if callee in library else [node])
        return out

    return expand(graph_def.node)


def is_large_const(node) -> bool:
    """The importer's one exception to "one TF op, one IR node": a Const of more than INLINE_ELEMENTS
    elements becomes a graph constant (a weight), not a node."""
    if node.op != "Const":
        return False
    return int(np.prod([d.size for d in node.attr["value"].tensor.tensor_shape.dim])) > INLINE_ELEMENTS


def test_entry_names():
    expected_models = {
        "inception_v3",
        "resnet50",
        "vgg19",
        "nasnet_mobile",
        "nasnet_large",
        "transformer",
        "bert_large",
        "gpt",
    }
    for model in expected_models:
        assert f"{model}_infer" in zoo.ENTRIES and f"{model}_train" in zoo.ENTRIES
    assert "lstm_train" in zoo.ENTRIES
    assert zoo.ENTRIES["inception_v3_train"].path().name == "inception_v3_train.pb"
    assert zoo.ENTRIES["resnet50_infer"].path().name == "resnet50_infer.onnx"


def test_unknown_entry_is_a_one_line_error(capsys):
    assert run(["zoo:no_such_model"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown zoo entry 'no_such_model' (known: ")


def test_small_training_graph_build_is_deterministic():
    config = (("layers", 1), ("d_model", 16), ("heads", 2), ("d_ff", 32), ("vocab", 40), ("seq", 4))
    first, _ = zoo.build_train_graphdef("transformer", 2, config)
    second, _ = zoo.build_train_graphdef("transformer", 2, config)
    assert first.SerializeToString(deterministic=True) == second.SerializeToString(deterministic=True)
    text = print_module(import_graphdef(first, name="t"))
    assert text == print_module(import_graphdef(second, name="t"))
    assert print_module(parse_module(text)) == text
    for op in ("tf.ResourceApplyAdam", "tf.BatchMatMulV2", "tf.Softmax"):
        assert f" {op}(" in text or f" {op} @" in text


def test_zoo_entry_through_the_driver(tmp_path, monkeypatch, capsys):
    """`graphir-opt zoo:<name>` imports an already built entry (building is tested in the slow tests)."""
    config = (("layers", 1), ("units", 8), ("vocab", 16), ("seq", 3))
    graph_def, _ = zoo.build_train_graphdef("lstm", 2, config)
    monkeypatch.setenv(zoo.ZOO_DIR_ENV, str(tmp_path))
    (tmp_path / "lstm_train.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    assert run(["zoo:lstm_train", "--emit=summary"]) == 0
    out = capsys.readouterr().out
    assert "lstm_train" in out


TINY_GPT = (("layers", 1), ("d_model", 16), ("heads", 2), ("d_ff", 32), ("vocab", 40), ("seq", 4))


def test_external_weight_conversion_matches_the_frozen_one(tmp_path):
    """The big inference entries keep their weights as external data, converted unfrozen: same
    numbers as tf2onnx's frozen conversion, files 0644, weight-only ops folded. (Byte-identical
    rebuilds need a fresh process each: see the slow determinism test.)"""
    import onnx
    import onnxruntime as ort

    zoo.build_infer_onnx_external("gpt", 2, TINY_GPT, tmp_path / "a" / "gpt.onnx")
    zoo.build_infer_onnx("gpt", 2, TINY_GPT, tmp_path / "frozen.onnx")
    for suffix in (".onnx", ".onnx.data"):
        assert stat.S_IMODE((tmp_path / "a" / f"gpt{suffix}").stat().st_mode) == zoo.FILE_MODE
    assert stat.S_IMODE((tmp_path / "frozen.onnx").stat().st_mode) == zoo.FILE_MODE
    external = onnx.load_model(str(tmp_path / "a" / "gpt.onnx"), load_external_data=False)
    assert [i.name for i in external.graph.input] == ["input_0"]
    initializers = {t.name for t in external.graph.initializer}
    assert {"emb_tok/embeddings", "l0_ff1/bias"} <= initializers
    assert not any(node.input and all(name in initializers for name in node.input) for node in external.graph.node)
    tokens = np.random.default_rng(0).integers(0, 40, size=(2, 4)).astype(np.int32)
    run_model = lambda path: ort.InferenceSession(str(path)).run(None, {"input_0": tokens})[0]  # noqa: E731
    np.testing.assert_allclose(run_model(tmp_path / "a" / "gpt.onnx"), run_model(tmp_path / "frozen.onnx"), atol=1e-6)
    module = load_module(tmp_path / "a" / "gpt.onnx")
    assert len(module.graph) == len(external.graph.node)


# --------------------------------------------------------------------------------- slow: the real zoo


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAIN_ENTRIES)
def test_training_entry_imports_every_op_and_roundtrips(name):
    path = zoo.build_entry(name)
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    module = load_module(f"zoo:{name}")
    graph = module.graph
    ops = flat_ops(graph_def)
    large_consts = [op.name for op in ops if is_large_const(op)]
    assert len(graph) == len(ops) - len(large_consts)
    assert sorted(value.name for value in graph.constants) == sorted(large_consts)
    assert not any(node.op in ("tf.PartitionedCall", "tf.StatefulPartitionedCall") for node in graph.nodes)
    assert any(node.op == "tf.ResourceApplyAdam" for node in graph.nodes)
    # The function's one output (the loss), recorded in the .pb, not every sink.
    assert len(graph.outputs) == 1 and graph.outputs[0].producer.op == "tf.Identity"
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    if name == "inception_v3_train":
        assert len(graph) >= 3000
    if name == "transformer_train":
        assert len(graph) >= 20000


@pytest.mark.slow
@pytest.mark.parametrize("name", INFER_ENTRIES)
def test_inference_entry_imports_and_roundtrips(name):
    import onnx

    path = zoo.build_entry(name)
    model = onnx.load_model(str(path), load_external_data=False)
    module = load_module(f"zoo:{name}")
    # VGG19: 46 nodes; a recurrent model is a short chain of layer ops (a GRU layer's body is a region,
    # gru_lm_infer has one GRU op per layer)
    recurrent = name in ("lstm_seq_infer", "gru_seq_infer", "gru_lm_infer")
    assert len(module.graph) == len(model.graph.node) > (12 if recurrent else 40)
    if name == "gru_lm_infer":
        assert sum(node.op == "onnx.GRU" for node in module.graph.nodes) == 4
    assert stat.S_IMODE(path.stat().st_mode) == zoo.FILE_MODE
    text = print_module(module)
    assert print_module(parse_module(text)) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm_train", "resnet50_infer", "gpt_infer"])
def test_building_an_entry_twice_is_byte_identical(name, tmp_path, capsys):
    first = zoo.build_entry(name, tmp_path / "a")
    second = zoo.build_entry(name, tmp_path / "b")
    assert "zoo: building" in capsys.readouterr().err
    for a, b in zip(zoo.ENTRIES[name].files(tmp_path / "a"), zoo.ENTRIES[name].files(tmp_path / "b"), strict=True):
        assert a.read_bytes() == b.read_bytes()
    assert print_module(load_module(first)) == print_module(load_module(second))


def test_the_size_table_lists_every_entry():
    from pathlib import Path

    table = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "zoo.md"
    rows = [line.split("`")[1] for line in table.read_text().splitlines() if line.startswith("| `")]
    assert rows == sorted(zoo.ENTRIES), "rebuild the missing entries with tools/zoo.py NAME --table ..."


def test_writing_some_rows_keeps_the_others(tmp_path):
    from graphir.tools.zoo_table import write_table

    path = tmp_path / "zoo.md"
    row = {"nodes": 10, "edges": 9, "control": 0, "param_mib": 1.25, "file_mib": 1.5}
    write_table([{"name": "vgg19_infer", **row}, {"name": "gpt_infer", **row}], path, 12.0)
    text = path.read_text().replace(" cores).", " cores),\nand a note.")
    path.write_text(text + "| `gone_entry` | 1 | 1 | 1 | 0 | 0.0 | 0.0 | x |\n")
    write_table(
        [{"name": "resnet50_infer", **row, "nodes": 125}, {"name": "vgg19_infer", **row, "nodes": 46}], path, None
    )
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == ["gpt_infer", "resnet50_infer", "vgg19_infer"]
    assert rows[0].startswith("| `gpt_infer` | 32 | 10 | 9 | 0 | 1.2 | 1.5 |")  # kept from the first run
    assert rows[2].startswith("| `vgg19_infer` | 128 | 46 | 9 |")  # replaced
    assert "Build of the whole zoo from scratch: 12 s" in text and " cores),\nand a note.\n\n" in text  # kept
