"""``parallelize`` (passes/parallelize.py) on the hand-built MLP training step of test_place_pipeline."""

from __future__ import annotations

import io

import pytest
from helpers import mlp_train

from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.parallelize import Parallelize
from graphir.passes.profile import Profile
from graphir.simulator import simulate


def profiled(text: str):
    module = parse_module(text)
    Profile().run(module, PassContext())
    return module


def test_parallelize_beats_op_placement_and_lists_every_candidate() -> None:
    # 8 layers of 2048 x 2048 at batch 1024 on 4 GPUs: one replica fits, so data parallelism and
    # pipelines compete with op placement; the chosen plan is the fastest simulated one.
    module = profiled(mlp_train(layers=8, batch=1024, width=2048))
    result = Parallelize(finalists=3).run(module, PassContext())
    stats = result.stats
    candidates = {k: v for k, v in stats.items() if k.startswith("cand.")}
    assert "cand.auto" in candidates and "cand.D4xS1xM1.allreduce" in candidates
    assert any(k.startswith("cand.D1xS4xM") for k in candidates)
    judged = {k: v for k, v in candidates.items() if "sim " in str(v)}
    assert len(judged) >= 3
    simulated = {k: float(str(v).split("sim ")[1].split(" ms")[0]) for k, v in judged.items()}
    assert stats["chosen"] == min(simulated, key=simulated.__getitem__).removeprefix("cand.")
    # The module is the winner: rewritten (when it has copies), placed, and fits.
    sim = simulate(module)
    assert not sim.oom_devices
    assert abs(sim.makespan * 1e3 - float(stats["makespan-ms"])) < 1e-3
    assert sim.makespan * 1e3 < simulated["cand.auto"] or stats["chosen"] == "auto"


def test_parallelize_is_deterministic() -> None:
    from graphir.printer import print_module

    texts = []
    for _ in range(2):
        module = profiled(mlp_train(layers=4, batch=512, width=1024))
        Parallelize(finalists=2).run(module, PassContext(seed=3))
        texts.append(print_module(module))
    assert texts[0] == texts[1]


def test_parallelize_on_an_inference_graph_falls_back_to_auto_and_says_so() -> None:
    text = mlp_train()
    module = profiled(text.split("    %gradient_tape/shape")[0] + "    return %loss/Sum\n  }\n}\n")
    stream = io.StringIO()
    result = Parallelize().run(module, PassContext(log_stream=stream))
    assert result.stats["chosen"] == "auto"
    assert "is not a training graph: placed by place{algo=auto}" in stream.getvalue()
    assert all(node.device is not None for node in module.graph.nodes)


def test_a_winning_ring_is_judged_again_with_each_bucket_size() -> None:
    # 2 layers of 1024 x 1024 at batch 8192 on 4 GPUs: the 4-replica ring wins. Its two 4 MiB
    # gradients (and the loss, averaged too) fill one 25 MiB bucket, one ring after the whole backward
    # pass; with 1 MiB buckets the first bucket closes at d1's gradient and its ring starts while d0's
    # backward runs, and d0's gradient has a ring of its own.
    module = profiled(mlp_train(layers=2, batch=8192, width=1024, cluster="4xV100"))
    stats = Parallelize(finalists=2, buckets=(25, 1)).run(module, PassContext()).stats
    one, small = str(stats["cand.D4xS1xM1.allreduce"]), str(stats["cand.D4xS1xM1.allreduce.b1"])
    assert "sim " in one and "sim " in small
    ms = {label: float(text.split("sim ")[1].split(" ms")[0]) for label, text in (("b25", one), ("b1", small))}
    assert ms["b1"] < ms["b25"] and stats["chosen"] == "D4xS1xM1.allreduce.b1"
    assert abs(simulate(module).makespan * 1e3 - ms["b1"]) < 1e-3
    rings = {n.name.split("/")[3] for n in module.graph.nodes if n.name.startswith("mirror0/dp/ring/")}
    assert rings == {"bucket0", "gradient_tape"}  # d0's ring is named after its gradient


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="schedules must be among"):
        Parallelize(schedules=("zigzag",))
    with pytest.raises(ValueError, match="max-microbatches must be >= 1"):
        Parallelize(max_microbatches=0)
    with pytest.raises(ValueError, match="buckets must be sizes in MiB >= 0, got '25,-1'"):
        Parallelize(buckets=(25, -1))
    assert PassError  # the pass's own errors are PassErrors (see test_place_pipeline)


def test_place_that_finds_nothing_fitting_names_parallelize() -> None:
    from graphir.passes.place import Place

    # Two layers of 40000 x 40000 weights with Adam's slots: 19.2 GB a layer on two 16 GiB GPUs.
    module = profiled(mlp_train(layers=2, batch=8, width=40000, cluster="2xV100"))
    stream = io.StringIO()
    result = Place().run(module, PassContext(log_stream=stream))
    assert result.stats["auto.fits"] is False
    assert "fits memory; a training step that does not fit one device" in stream.getvalue()
    assert "--passes=parallelize" in stream.getvalue()
    fitting = profiled(mlp_train(layers=2, batch=8, width=64, cluster="2xV100"))
    stream = io.StringIO()
    Place().run(fitting, PassContext(log_stream=stream))
    assert "parallelize" not in stream.getvalue()
