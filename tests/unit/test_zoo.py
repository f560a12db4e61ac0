"""The model zoo: entry registry, deterministic builds, `zoo:<name>` in the driver, and (slow) every entry.

The slow tests build the real models (minutes of TensorFlow time); they run with ``make test-all``
(``pytest -m slow``) and reuse what ``make zoo`` built in ``zoo/``.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

tf = pytest.importorskip("tensorflow")

from graphir.driver import run  # noqa: E402
from graphir.importers import load_module  # noqa: E402
from graphir.importers.tf import CALL_OPS, import_graphdef  # noqa: E402
from graphir.parser import parse_module  # noqa: E402
from graphir.printer import print_module  # noqa: E402
from graphir.tools import zoo  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TRAIN_ENTRIES = sorted(name for name, entry in zoo.ENTRIES.items() if entry.mode == "train")
INFER_ENTRIES = sorted(name for name, entry in zoo.ENTRIES.items() if entry.mode == "infer")


def flat_op_count(graph_def) -> int:
    library = {f.signature.name: f for f in graph_def.library.function}

    def count(nodes) -> int:
        return sum(
            count(library[n.attr["f"].func.name if n.op in CALL_OPS else n.op].node_def)
            if (n.attr["f"].func.name if n.op in CALL_OPS else n.op) in library
            else 1
            for n in nodes
        )

    return count(graph_def.node)


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


# --------------------------------------------------------------------------------- slow: the real zoo


@pytest.mark.slow
@pytest.mark.parametrize("name", TRAIN_ENTRIES)
def test_training_entry_imports_every_op_and_roundtrips(name):
    path = zoo.build_entry(name)
    graph_def = tf.compat.v1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    module = load_module(f"zoo:{name}")
    graph = module.graph
    assert len(graph) == flat_op_count(graph_def) - len(graph.constants)
    assert any(node.op == "tf.ResourceApplyAdam" for node in graph.nodes)
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    if name == "inception_v3_train":
        assert len(graph) >= 3000
    if name == "transformer_train":
        assert len(graph) >= 20000


@pytest.mark.slow
@pytest.mark.parametrize("name", INFER_ENTRIES)
def test_inference_entry_imports_and_roundtrips(name):
    module = load_module(f"zoo:{name}")
    assert len(module.graph) > 50
    text = print_module(module)
    assert print_module(parse_module(text)) == text


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lstm_train", "resnet50_infer"])
def test_building_an_entry_twice_is_byte_identical(name, tmp_path, capsys):
    first = zoo.build_entry(name, tmp_path / "a")
    second = zoo.build_entry(name, tmp_path / "b")
    assert "zoo: building" in capsys.readouterr().err
    assert first.read_bytes() == second.read_bytes()
    assert print_module(load_module(first)) == print_module(load_module(second))
