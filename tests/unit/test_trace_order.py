"""``devtools/trace_order.py``: reading a worker's choices of ready ops from one traced step.

A hand-made step (times in µs) on one worker:
  p: a root, runs 0..10; s = f(p): 10..20; q: a root, 20..30; r: a ``_Recv`` whose tensor
  arrives at 5 (its ``RecvTensor`` record; TF traces no ``_Recv`` kernel); d = f(r): 30..40;
  k: an ``Identity`` of p (cheap, never a candidate), 10..10.
Decisions (two or more expensive ops ready and not started when one starts):
  at 0, p starts: ready are p and q (both roots, at 0): both rules say either.
  at 10, s starts: ready are s (at 10, made by p), q (at 0) and d (at 5, arrived): first-ready-first
    says q, newest first says s (the newest local one) -> the rules differ, newest first is right;
    s was made ready by the op just ended; local work ran before an arrival.
  at 20, q starts: ready are q (at 0, local) and d (at 5, arrived): both rules say q; a choice
    between local work and an arrival, local first.
  at 30 only d is left: no decision.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")

from tensorflow.core.protobuf import config_pb2  # noqa: E402

from devtools.trace_order import decisions, summarise  # noqa: E402

WORKER = "/job:worker/replica:0/task:0/device:CPU:0"
PEER = "/job:worker/replica:0/task:1/device:CPU:0"


def step() -> config_pb2.RunMetadata:
    metadata = config_pb2.RunMetadata()
    stats = metadata.step_stats.dev_stats.add(device=WORKER)
    for name, begin, end in [("p", 0, 10), ("k", 10, 10), ("s", 10, 20), ("q", 20, 30), ("d", 30, 40)]:
        stats.node_stats.add(
            node_name=name, all_start_micros=begin, op_start_rel_micros=0, op_end_rel_micros=end - begin
        )
    label = f"[4B] [1Mb/s] edge_7_x from {PEER} to {WORKER}"
    stats.node_stats.add(node_name="RecvTensor", timeline_label=label, all_start_micros=1, all_end_rel_micros=4)
    graph = metadata.partition_graphs.add()
    for name, op, inputs in [
        ("p", "Relu", []),
        ("k", "Identity", ["p"]),
        ("s", "MatMul", ["p:0"]),
        ("q", "Relu", []),
        ("r", "_Recv", []),
        ("d", "Relu", ["r"]),
    ]:
        node = graph.node.add(name=name, op=op, device=WORKER, input=inputs)
        if op == "_Recv":
            node.attr["tensor_name"].s = b"edge_7_x"
    return metadata


def test_the_choices_of_a_hand_made_step():
    rows = decisions(step())
    assert [(row["chosen"], row["candidates"]) for row in rows] == [("p", 2), ("s", 3), ("q", 2)]
    roots, first, second = rows
    assert roots["same"] and roots["fifo"] and roots["lifo"]
    assert not first["same"] and first["lifo"] and not first["fifo"] and not first["popped"] and first["mixed"]
    assert second["same"] and second["mixed"] and not second["remote"]
    assert summarise(rows) == {
        "decisions": 3,
        "differ": 1,
        "fifo": 0,
        "lifo": 1,
        "agree_both": 2,
        "popped_differ": 0,
        "popped_fifo": 0,
        "popped_lifo": 0,
        "mixed": 2,
        "mixed_local_first": 2,
    }


def test_an_untraced_arrival_leaves_its_consumer_out():
    metadata = step()
    del metadata.step_stats.dev_stats[0].node_stats[-1]  # no RecvTensor record: d's readiness is unknown
    rows = decisions(metadata)
    assert [row["chosen"] for row in rows] == ["p", "s"]
