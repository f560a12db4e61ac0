"""``place{algo=pipeline}`` (passes/place/pipeline.py) on hand-built training steps worked by hand.

The graph is tests/unit/training_graphs.py's L-layer MLP training step: every layer has the same
shapes, so the same compute: a split into stages balances layers.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import mlp_train

from graphir.errors import PassError
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.pipeline import partition_layers, pipeline_plan, training_layout
from graphir.passes.profile import Profile
from graphir.simulator import simulate


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


def passes_in_order(names: list[str]) -> list[str]:
    """The sequence of (phase, micro-batch) passes a device runs: ``F0 F1 B0 ...`` (runs of one pass merged)."""
    out: list[str] = []
    for name in names:
        head, _, rest = name.partition("/")
        if not head.startswith("mb") or not head[2:].isdigit() or layer_of(rest) < 0:
            continue
        label = ("B" if rest.startswith("gradient_tape/") else "F") + head[2:]
        if not out or out[-1] != label:
            out.append(label)
    return out


@pytest.mark.parametrize(
    ("schedule", "first", "second"),
    [
        # S = 2, M = 3 (pipeline_schedule's golden orders): stage 0 warms up with one forward.
        ("1f1b", "F0 F1 B0 F2 B1 B2", "F0 B0 F1 B1 F2 B2"),
        ("gpipe", "F0 F1 F2 B0 B1 B2", "F0 F1 F2 B0 B1 B2"),
    ],
)
def test_microbatched_stages_run_the_schedule(schedule: str, first: str, second: str) -> None:
    from graphir.passes.transform.microbatch import Microbatch

    module = profiled(mlp_train(batch=384))
    Microbatch(n=3).run(module, PassContext())
    Place.of("pipeline", stages=2, schedule=schedule).run(module, PassContext())
    order = sequences(module)
    assert " ".join(passes_in_order(order["gpu0"])) == first
    assert " ".join(passes_in_order(order["gpu1"])) == second
    # Every copy of a layer on its stage's device; the sums and the update with the variable.
    devices = {node.name: node.device for node in module.graph.nodes}
    for m in range(3):
        for k in range(4):
            assert devices[f"mb{m}/d{k}/MatMul"] == ("gpu0" if k < 2 else "gpu1")
            assert devices[f"mb{m}/gradient_tape/d{k}/MatMul/MatMul_1"] == ("gpu0" if k < 2 else "gpu1")
    for k in range(4):
        assert devices[f"d{k}/adam"] == devices[f"d{k}/w"] == ("gpu0" if k < 2 else "gpu1")
    # A layer's update runs after its last gradient, before the stage's remaining passes end.
    result = simulate(module)
    assert not result.oom_devices


def test_microbatches_beat_the_stage_placement() -> None:
    # Four equal stages: one batch runs them one after the other; 8 micro-batches pipeline them.
    from graphir.passes.transform.microbatch import Microbatch

    plain = profiled(mlp_train(layers=8, batch=1024, width=2048))
    piped = profiled(mlp_train(layers=8, batch=1024, width=2048))
    Place.of("pipeline", stages=4).run(plain, PassContext())
    Microbatch(n=8).run(piped, PassContext())
    Place.of("pipeline", stages=4).run(piped, PassContext())
    one, many = simulate(plain).makespan, simulate(piped).makespan
    assert many < 0.6 * one
