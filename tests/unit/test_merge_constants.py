"""``merge-constants`` on a rewritten training step: one constant per value and device, and a shorter step.

The structure on a hand-made graph is the golden test tests/filecheck/transform/merge-constants.gir;
TensorFlow running a merged step to the same variables is test_microbatch.py's all-reduce proof.
"""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import mlp_training_step

from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.place import Place
from graphir.passes.transform.merge_constants import merge_constants
from graphir.pipeline import parse_pipeline
from graphir.simulator import simulate
from graphir.verifier import verify


def _consts(module) -> Counter:
    return Counter((n.device, n.params["value"]) for n in module.graph.nodes if n.op == "tf.Const")


def test_two_replicas_of_two_microbatches_keep_one_constant_per_value_and_device():
    module = mlp_training_step(8)
    module.cluster_spec = "4xV100"
    PassManager(parse_pipeline("profile,data-parallel{replicas=2 microbatches=2 sync=allreduce}")).run(
        module, PassContext()
    )
    Place.of("pipeline", stages=1).run(module, PassContext())
    before = _consts(module)
    assert max(before.values()) >= 2  # each micro-batch copy carries its own copy of a value
    nodes, step = len(module.graph), simulate(module).makespan
    removed, kept = merge_constants(module.graph)
    verify(module)
    after = _consts(module)
    assert set(after) == set(before) and set(after.values()) == {1}
    # and each micro-batch copy's loss seed, Fill(shape, 1.0) of two constants, is one per device
    fills = Counter(n.device for n in module.graph.nodes if n.op == "tf.Fill")
    assert fills == {"gpu0": 1, "gpu1": 1}
    assert removed == sum(before.values()) - len(before) + 2 and removed == nodes - len(module.graph)
    assert kept == sum(1 for count in before.values() if count > 1) + 2
    # every merged node was a device's op of the step: the step is shorter by at least one of them
    assert simulate(module).makespan < step
    assert merge_constants(module.graph) == (0, 0)


def test_the_copy_its_device_runs_first_is_kept():
    """``late`` comes first in the text but second on gpu0: ``early`` is kept, or ``b`` (order 1) would wait
    for ``late`` (order 3) under the enforced order: a deadlock."""
    text = """module @m {cluster = "2xV100"} {
  graph @main(%x : f32[2, 2]) {
    %late = tf.Const() {value = dense<i32[1] = [4]>} : () -> i32[1] [cost = 5us, device = "gpu0", order = 2]
    %early = tf.Const() {value = dense<i32[1] = [4]>} : () -> i32[1] [cost = 5us, device = "gpu0", order = 0]
    %b = tf.Reshape(%x, %early) : (f32[2, 2], i32[1]) -> f32[4] [cost = 5us, device = "gpu0", order = 1]
    %a = tf.Reshape(%x, %late) : (f32[2, 2], i32[1]) -> f32[4] [cost = 5us, device = "gpu0", order = 3]
    return %a, %b
  }
}"""
    module = parse_module(text)
    assert merge_constants(module.graph) == (1, 1)
    verify(module)
    order = {n.name: n.order for n in module.graph.nodes}
    assert order == {"early": 0, "b": 1, "a": 2}
    assert module.graph.node("a").inputs[1] is module.graph.node("early").outputs[0]
    assert simulate(module).makespan == pytest.approx(15e-6)


def test_constant_subexpressions_merge_and_random_draws_do_not():
    """Two ``BroadcastGradientArgs`` of equal shape constants are one; two draws of ``RandomUniform`` with one
    shape are two (and so their shape constants' merge is all that happens to them)."""
    text = """module @m {
  graph @main(%x : f32[2, 3]) {
    %s1 = tf.Const() {value = dense<i32[2] = [2, 3]>} : () -> i32[2]
    %t1 = tf.Const() {value = dense<i32[2] = [1, 3]>} : () -> i32[2]
    %s2 = tf.Const() {value = dense<i32[2] = [2, 3]>} : () -> i32[2]
    %t2 = tf.Const() {value = dense<i32[2] = [1, 3]>} : () -> i32[2]
    %r1a, %r1b = tf.BroadcastGradientArgs(%s1, %t1) : (i32[2], i32[2]) -> (i32[?], i32[?])
    %r2a, %r2b = tf.BroadcastGradientArgs(%s2, %t2) : (i32[2], i32[2]) -> (i32[?], i32[?])
    %u1 = tf.RandomUniform(%s1) {dtype = "f32"} : (i32[2]) -> f32[2, 3]
    %u2 = tf.RandomUniform(%s2) {dtype = "f32"} : (i32[2]) -> f32[2, 3]
    %y1 = tf.Sum(%x, %r1a) : (f32[2, 3], i32[?]) -> f32[?]
    %y2 = tf.Sum(%u2, %r2b) : (f32[2, 3], i32[?]) -> f32[?]
    %y3 = tf.AddV2(%u1, %x) : (f32[2, 3], f32[2, 3]) -> f32[2, 3]
    return %y1, %y2, %y3
  }
}"""
    module = parse_module(text)
    assert merge_constants(module.graph) == (3, 3)  # s2, t2 and the second BroadcastGradientArgs
    verify(module)
    names = [n.name for n in module.graph.nodes]
    assert names == ["s1", "t1", "r1a", "u1", "u2", "y1", "y2", "y3"]
    graph = module.graph
    assert graph.node("u2").inputs[0] is graph.node("s1").outputs[0]
    assert graph.node("y2").inputs[1] is graph.node("r1a").outputs[1]
