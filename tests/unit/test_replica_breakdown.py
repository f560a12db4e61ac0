"""devtools/replica_breakdown.py: one replica's step split by part, and the floor that launches set."""

from __future__ import annotations

import pytest
from helpers import mlp_train

from devtools.replica_breakdown import breakdown
from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.profile import Profile


def _profiled(text: str):
    module = parse_module(text)
    Profile().run(module, PassContext())
    return module


def test_the_parts_add_up_to_the_device_busy_time_and_the_floor_is_below_the_step() -> None:
    # 2 layers of 1024 x 1024 at batch 8192 on 4 V100s, one replica per GPU.
    module = _profiled(mlp_train(layers=2, batch=8192, width=1024, cluster="4xV100"))
    found = breakdown(module, 4, 25 * 2**20)
    assert found.device == "gpu0" and found.replicas == 4
    parts = {part for part, _ in found.parts}
    assert {"forward", "backward", "update", "ring"} <= parts
    total = sum(seconds for _, seconds in found.parts.values())
    assert total == pytest.approx(found.busy[0], rel=1e-9)
    assert found.ops == sum(count for count, _ in found.op_types.values())
    # The ring's adds and bucket copies are on every replica: more ops than one device's step.
    assert found.ops > found.single_ops
    assert found.bound == pytest.approx(found.single / 4)
    expected = (found.single - found.single_ops * found.launch) / 4 + found.ops * found.launch
    assert found.floor == pytest.approx(expected)
    assert found.bound < found.floor <= found.makespan


def test_replicas_that_do_not_divide_the_batch_are_refused() -> None:
    module = _profiled(mlp_train(layers=2, batch=8192, width=1024, cluster="4xV100"))
    with pytest.raises(PassError, match="3 replicas do not divide the batch 8192"):
        breakdown(module, 3, 25 * 2**20)
