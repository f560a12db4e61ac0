"""``place{algo=pipeline}`` (passes/place/pipeline.py) on hand-built training steps worked by hand.

The graph is an L-layer MLP training step written out as TensorFlow's gradient code would write it:
forward ``d<k>/MatMul -> d<k>/Relu``, a ``loss/Sum``, the backward of each layer under
``gradient_tape/d<k>/`` (``ReluGrad``, the weight gradient ``MatMul`` with ``transpose_a``, the input
gradient ``MatMul`` with ``transpose_b``), and one ``ResourceApplyAdam`` per weight with its two
slots. Every layer has the same shapes, so the same compute: a split into stages balances layers.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphir.errors import PassError
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.pipeline import partition_layers, pipeline_plan, training_layout
from graphir.passes.profile import Profile
from graphir.simulator import simulate

APPLY = "(resource[], resource[], resource[], f32[], f32[WxW]) -> ()"


def mlp_train(layers: int = 4, batch: int = 256, width: int = 1024, cluster: str = "4xV100") -> str:
    """The text of an L-layer MLP training step (module docstring)."""
    t = f"f32[{batch},{width}]"
    w = f"f32[{width},{width}]"
    lines = [
        f'module @mlp_train {{cluster = "{cluster}"}} {{',
        "  graph @main() {",
        f'    %x = tf.Placeholder() {{dtype = "f32"}} : () -> {t}',
        '    %adam/lr = tf.Const() {dtype = "f32", value = dense<f32[] = [0.001]>} : () -> f32[]',
    ]
    h = "%x"
    for k in range(layers):
        lines += [
            f'    %d{k}/w = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/m = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/v = tf.VarHandleOp() {{dtype = "f32", shape = [{width}, {width}]}} : () -> resource[]',
            f'    %d{k}/read = tf.ReadVariableOp(%d{k}/w) {{dtype = "f32"}} : (resource[]) -> {w}',
            f"    %d{k}/MatMul = tf.MatMul({h}, %d{k}/read) : ({t}, {w}) -> {t}",
            f"    %d{k}/Relu = tf.Relu(%d{k}/MatMul) : ({t}) -> {t}",
        ]
        h = f"%d{k}/Relu"
    lines += [
        '    %loss/axes = tf.Const() {dtype = "i32", value = dense<i32[2] = [0, 1]>} : () -> i32[2]',
        f"    %loss/Sum = tf.Sum({h}, %loss/axes) : ({t}, i32[2]) -> f32[]",
        f'    %gradient_tape/shape = tf.Const() {{dtype = "i32", value = dense<i32[2] = [{batch}, {width}]>}} '
        ": () -> i32[2]",
        '    %gradient_tape/one = tf.Const() {dtype = "f32", value = dense<f32[] = [1.0]>} : () -> f32[]',
        f"    %gradient_tape/loss/Fill = tf.Fill(%gradient_tape/shape, %gradient_tape/one) : (i32[2], f32[]) -> {t}",
    ]
    g = "%gradient_tape/loss/Fill"
    updates = []
    for k in reversed(range(layers)):
        x = f"%d{k - 1}/Relu" if k else "%x"
        s = f"gradient_tape/d{k}"  # TensorFlow names a gradient under its forward op's name
        lines += [
            f"    %{s}/Relu/ReluGrad = tf.ReluGrad({g}, %d{k}/Relu) : ({t}, {t}) -> {t}",
            f"    %{s}/MatMul/MatMul_1 = tf.MatMul({x}, %{s}/Relu/ReluGrad) {{transpose_a = true}} : ({t}, {t}) -> {w}",
        ]
        if k:  # the input's gradient (none for the first layer: x is data)
            lines.append(
                f"    %{s}/MatMul/MatMul = tf.MatMul(%{s}/Relu/ReluGrad, %d{k}/read) {{transpose_b = true}} "
                f": ({t}, {w}) -> {t}"
            )
        lines.append(
            f"    tf.ResourceApplyAdam @d{k}/adam(%d{k}/w, %d{k}/m, %d{k}/v, %adam/lr, %{s}/MatMul/MatMul_1) "
            f": {APPLY.replace('WxW', f'{width},{width}')}"
        )
        g = f"%{s}/MatMul/MatMul"
        updates.append(f"@d{k}/adam")
    lines += [
        f"    %out = tf.Identity(%loss/Sum) ctrl({', '.join(updates)}) : (f32[]) -> f32[]",
        "    return %out",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def profiled(text: str) -> Module:
    module = parse_module(text)
    Profile().run(module, PassContext())
    return module


def sequences(module: Module) -> dict[str, list[str]]:
    """Node names per device in their recorded order."""
    out: dict[str, list[tuple[int, str]]] = {}
    for node in module.graph.nodes:
        out.setdefault(str(node.device), []).append((int(node.order), node.name))
    return {device: [name for _, name in sorted(pairs)] for device, pairs in out.items()}


def layer_of(name: str) -> int:
    for part in name.split("/"):
        if part[:1] == "d" and part[1:].isdigit():
            return int(part[1:])
    return -1


def test_layers_follow_the_pairing() -> None:
    module = profiled(mlp_train())
    layout = training_layout(module)
    by_name = {node.name: int(layer) for node, layer in zip(layout.nodes, layout.layer, strict=True)}
    # Four dense layers, then the loss: five layers; each gradient in its forward op's layer.
    assert layout.num_layers == 5
    for k in range(4):
        assert by_name[f"d{k}/MatMul"] == k
        assert by_name[f"gradient_tape/d{k}/MatMul/MatMul_1"] == k
        assert by_name[f"gradient_tape/d{k}/Relu/ReluGrad"] == k
        assert by_name[f"d{k}/adam"] == k
        assert by_name[f"d{k}/w"] == k
    assert by_name["loss/Sum"] == 4


def test_stage_placement_keeps_each_layer_whole() -> None:
    # 4 equal layers and a light loss on 2 stages: d0, d1 | d2, d3, loss (the slowest stage is then
    # two layers; any other cut leaves three on one side).
    module = profiled(mlp_train())
    Place.of("pipeline", stages=2).run(module, PassContext())
    devices = {node.name: node.device for node in module.graph.nodes}
    for k in range(4):
        expected = "gpu0" if k < 2 else "gpu1"
        for name in (
            f"d{k}/MatMul",
            f"d{k}/Relu",
            f"gradient_tape/d{k}/Relu/ReluGrad",
            f"gradient_tape/d{k}/MatMul/MatMul_1",
        ):
            assert devices[name] == expected, name
        for name in (f"d{k}/w", f"d{k}/m", f"d{k}/v", f"d{k}/read", f"d{k}/adam"):
            assert devices[name] == expected, name
    assert devices["loss/Sum"] == "gpu1"
    assert {devices[n.name] for n in module.graph.nodes} == {"gpu0", "gpu1"}
    # Forward before backward on each stage; the updates last.
    for device, names in sequences(module).items():
        forward = [k for k, name in enumerate(names) if "/MatMul" in name and not name.startswith("gradient_tape")]
        backward = [k for k, name in enumerate(names) if name.startswith("gradient_tape/d")]
        updates = [k for k, name in enumerate(names) if name.endswith("/adam")]
        assert max(forward) < min(backward), device
        assert max(backward) < min(updates), device
    result = simulate(module)
    assert not result.oom_devices


def test_stage_placement_moves_only_the_boundary() -> None:
    # Between the stages only the boundary activation (d1/Relu forward) and its gradient
    # (gradient_tape/d2/MatMul/MatMul back) cross: 256 x 1024 x 4 bytes each way, plus the 4-byte
    # learning rate (a constant of layer 0, its first user's) that the second stage's updates read.
    module = profiled(mlp_train())
    Place.of("pipeline", stages=2).run(module, PassContext())
    result = simulate(module)
    assert result.link_bytes == {("gpu0", "gpu1"): 256 * 1024 * 4 + 4, ("gpu1", "gpu0"): 256 * 1024 * 4}


def test_partition_respects_memory() -> None:
    module = profiled(mlp_train(layers=4))
    layout = training_layout(module)
    from graphir.passes.place.pipeline import layer_profile

    profile = layer_profile(module, layout, "V100")
    balanced = partition_layers(profile, 2, copies=[1, 1], capacity=[np.inf, np.inf])
    assert balanced == [0, 0, 1, 1, 1]
    # A first device that holds only one layer's weights and slots forces d0 alone on it.
    one_layer = float(profile.persistent[0]) + float(profile.saved[0]) + float(profile.working[0]) + 1
    assert partition_layers(profile, 2, copies=[1, 1], capacity=[one_layer, np.inf]) == [0, 1, 1, 1, 1]
    # Nothing fits: None.
    assert partition_layers(profile, 2, copies=[1, 1], capacity=[1.0, 1.0]) is None


def test_stages_beyond_the_devices_are_refused() -> None:
    module = profiled(mlp_train(cluster="2xV100"))
    with pytest.raises(PassError, match=r"1 replica\(s\) x 3 stages need 3 devices; cluster '2xV100' has 2"):
        pipeline_plan(module, 3)


def test_inference_graph_is_refused() -> None:
    text = mlp_train()
    module = parse_module(text.split("    %gradient_tape/shape")[0] + "    return %loss/Sum\n  }\n}\n")
    Profile().run(module, PassContext())
    with pytest.raises(PassError, match="is not a training graph"):
        pipeline_plan(module, 2)
