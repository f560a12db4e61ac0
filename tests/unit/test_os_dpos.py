"""FastT OS-DPOS: the ``os-dpos`` pass (FastT §5.2, Algorithm 2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import f32

from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.os_dpos import OsDpos, simulated_critical_path
from graphir.passes.profile import Profile
from graphir.printer import print_module
from graphir.simulator import simulate
from graphir.verifier import verify

REPO = Path(__file__).resolve().parents[2]


def conv_chain(batch: int, channels: int, cluster: str = "2xV100-nvlink") -> Module:
    """x -> conv (3x3, channels -> 2·channels, 7x7 maps) -> relu: one compute-heavy op."""
    graph = Graph("g")
    x = graph.add_input("x", f32(batch, channels, 7, 7))
    w = graph.add_constant("w", f32(2 * channels, channels, 3, 3))
    conv = graph.add_node(
        "onnx.Conv",
        [x, w],
        [f32(batch, 2 * channels, 7, 7)],
        name="conv",
        params={"kernel_shape": (3, 3), "pads": (1,) * 4},
    )
    relu = graph.add_node("onnx.Relu", [conv.outputs[0]], [conv.outputs[0].type], name="relu")
    graph.set_outputs([relu.outputs[0]])
    module = Module("chain", graph, cluster)
    Profile().run(module, PassContext())
    return module


def test_heavy_conv_is_split_and_the_makespan_drops() -> None:
    module = conv_chain(64, 256)
    stats = OsDpos().run(module, PassContext()).stats
    assert stats["splits"] == 1 and stats["split-list"] in ("conv:batch:2", "conv:channel:2")
    assert stats["makespan-after-s"] < stats["makespan-before-s"]
    verify(module)
    assert simulate(module).makespan == pytest.approx(stats["makespan-after-s"], rel=1e-12)
    ops = [n.op for n in module.graph.index().nodes]
    assert ops.count("onnx.Conv") == 2 and "graphir.concat" in ops
    assert {n.device for n in module.graph.nodes if n.op == "onnx.Conv"} == {"gpu0", "gpu1"}
    assert stats["coarse-nodes"] == len(ops)  # place expanded the new problem


def test_nothing_pays_off_leaves_the_dpos_placement() -> None:
    module = conv_chain(1, 4)  # launch-overhead bound: splitting only adds split/concat nodes
    reference = conv_chain(1, 4)
    stats = OsDpos().run(module, PassContext()).stats
    Place(algo="dpos").run(reference, PassContext())
    assert stats["splits"] == 0 and stats["split-trials"] >= 1
    assert stats["makespan-after-s"] == stats["makespan-before-s"]
    assert print_module(module) == print_module(reference)


def test_critical_path_follows_the_schedule() -> None:
    module = conv_chain(64, 256)
    Place(algo="dpos").run(module, PassContext())
    path = simulated_critical_path(module, simulate(module))
    assert [n.name for n in path] == ["conv", "relu"]


def test_deterministic() -> None:
    texts = []
    for _ in range(2):
        module = conv_chain(64, 256, "4xV100-nvlink")
        OsDpos().run(module, PassContext())
        texts.append(print_module(module))
    assert texts[0] == texts[1]


@pytest.mark.slow  # builds the zoo entry on first use (TensorFlow + tf2onnx, about a minute)
def test_zoo_inception_v3_splits_a_convolution() -> None:
    from graphir.importers import load_module

    module = load_module("zoo:inception_v3_infer")
    module.cluster_spec = "fastt"
    Profile().run(module, PassContext())
    stats = OsDpos().run(module, PassContext()).stats
    assert stats["splits"] >= 1
    assert stats["makespan-after-s"] < stats["makespan-before-s"]
    first = str(stats["split-list"]).split(",")[0].rsplit(":", 2)[0]
    assert module.graph.node(f"{first}.part0").op == "onnx.Conv"
    verify(module)
    assert np.isclose(simulate(module).makespan, stats["makespan-after-s"])
