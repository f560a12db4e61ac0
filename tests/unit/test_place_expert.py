"""The Expert baseline (place{algo=expert}): balanced contiguous split, memory, constraints, properties."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    add_memory_pressure,
    assert_fits,
    build,
    chain_with_weights,
    check_placer,
    placed,
    random_case,
    random_module,
    run,
)
from hypothesis import given

from graphir.ir import Module
from graphir.passes.place.expert import balanced_split


def test_balanced_split_minimises_the_bottleneck() -> None:
    times = np.array([1.0, 2.0, 3.0, 1.0, 1.0, 4.0])[:, None].repeat(2, axis=1)
    part = balanced_split(times, np.zeros(6), np.full(2, np.inf))
    assert part.tolist() == [0, 0, 0, 1, 1, 1]  # 6 | 6
    part = balanced_split(
        np.array([1.0, 2.0, 3.0, 1.0, 1.0, 4.0])[:, None].repeat(4, axis=1), np.zeros(6), np.full(4, 1.0)
    )
    loads = np.bincount(part, weights=[1.0, 2.0, 3.0, 1.0, 1.0, 4.0], minlength=4)
    assert loads.max() == 4.0 and (np.diff(part) >= 0).all()  # contiguous, optimal bottleneck 4


def test_balanced_split_uses_each_devices_own_times() -> None:
    # Device 1 is twice as slow: the best split gives it a third of the work.
    times = np.stack([np.ones(6), 2 * np.ones(6)], axis=1)
    part = balanced_split(times, np.zeros(6), np.full(2, np.inf))
    assert part.tolist() == [0, 0, 0, 0, 1, 1]


def test_balanced_split_respects_memory_and_marks_the_rest() -> None:
    part = balanced_split(np.ones((4, 2)), np.array([3.0, 3.0, 3.0, 3.0]), np.array([4.0, 7.0]))
    assert part.tolist() == [0, 1, 1, -1]


def test_expert_memory_fallback() -> None:
    module = chain_with_weights([12, 12, 12])
    stats = run(module, "expert")
    assert placed(module) == {"n0": "gpu0", "n1": "gpu1", "n2": "gpu0"}  # equal free memory: gpu0
    assert stats["best-effort-nodes"] == 1


def test_expert_honours_affinity() -> None:
    module = build({"a": [], "b": ["a"], "c": ["b"], "d": ["c"]}, dict.fromkeys("abcd", 1e-3), "pesto")
    nodes = {node.name: node for node in module.graph.nodes}
    nodes["a"].affinity = ("cpu",)
    check_placer(module, "expert")
    assert nodes["a"].device == "cpu0"
    assert nodes["b"].device == "gpu0"  # split over 3 devices: a, b | c | d; a moves to cpu0


def test_expert_colocation_follows_the_first_member() -> None:
    module = chain_with_weights([0, 0, 0, 0])
    nodes = module.graph.index().nodes
    nodes[0].colocate = "k"
    nodes[3].colocate = "k"
    check_placer(module, "expert")
    assert nodes[0].device == nodes[3].device == "gpu0"
    assert nodes[2].device == "gpu1"


@given(random_case())
def test_expert_property(case: tuple[Module, str, bool]) -> None:
    module, _, pressure = case
    check_placer(module, "expert", fits=pressure)


@pytest.mark.parametrize("seed", [0, 1])
def test_expert_deterministic(seed: int) -> None:
    first, second = random_module(seed, 40, "4xV100"), random_module(seed, 40, "4xV100")
    assert add_memory_pressure(first, seed) and add_memory_pressure(second, seed)
    run(first, "expert")
    run(second, "expert")
    assert [(n.device, n.order) for n in first.graph.nodes] == [(n.device, n.order) for n in second.graph.nodes]
    assert_fits(first, "expert")  # no device holds the persistent bytes alone; a spread placement fits
