"""The one constraint kernel (passes/place/constraints.py) and the one fine-to-coarse device mapping."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import heterogeneous_fork, random_module
from hypothesis import given, settings
from hypothesis import strategies as st

from graphir.passes.place.common import ListScheduler
from graphir.passes.place.constraints import Constraints
from graphir.passes.place.problem import PlacementProblem, coarse_devices


def fork_problem() -> PlacementProblem:
    return PlacementProblem.from_module(heterogeneous_fork())


def test_a_colocation_class_needs_room_for_all_its_members_then_follows_its_pin() -> None:
    problem = fork_problem()
    problem.colocation[:] = [0, 0, -1]
    kernel = Constraints(problem)
    whole = problem.memory[0] + problem.memory[1]
    assert kernel.need[0] == kernel.need[1] == whole
    assert kernel.need[2] == problem.memory[2]
    kernel.used[1] = problem.capacity[1] - whole + 1  # one byte short for the class
    assert not kernel.fits(0, 1)
    assert kernel.fits(0, 0)
    kernel.place(0, 0)
    assert kernel.pinned(1) == 0 and kernel.used[0] == problem.memory[0]
    kernel.used[0] = problem.capacity[0] + 1  # full: the pinned member still goes there
    assert kernel.fits(1, 0) and not kernel.fits(1, 1)
    assert kernel.fallback_device(1) == 0


def test_limit_affinity_fallback_and_release() -> None:
    problem = fork_problem()
    problem.allowed[2, 0] = False
    kernel = Constraints(problem)
    assert not kernel.fits(2, 0)  # affinity, whatever the memory
    limit = np.full(problem.num_devices, problem.memory[0] - 1)
    assert kernel.fits(0, 1) and not kernel.fits(0, 1, limit)
    kernel.used[:] = problem.capacity - np.array([5.0, 9.0, 9.0, 1.0])
    assert kernel.free_memory() == [5.0, 9.0, 9.0, 1.0]
    assert kernel.fallback_device(2) == 1  # most free among allowed, ties to the lowest number
    kernel.place(2, 3)
    kernel.release(3, problem.memory[2])
    assert kernel.free_memory()[3] == 1.0
    assert kernel.pinned(2) == 3


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000))
def test_feasible_matrix_agrees_with_fits(seed: int) -> None:
    module = random_module(seed, 30, "4xV100", colocate_fraction=0.2, affinity_fraction=0.2, heavy_fraction=0.5)
    problem = PlacementProblem.from_module(module)
    kernel = Constraints(problem)
    rng = np.random.default_rng(seed)
    for v in rng.permutation(problem.num_nodes)[: problem.num_nodes // 2].tolist():
        kernel.place(v, kernel.fallback_device(v))
    nodes = np.arange(problem.num_nodes)
    matrix = kernel.feasible(nodes)
    for v in nodes.tolist():
        assert matrix[v].tolist() == [kernel.fits(v, d) for d in range(problem.num_devices)]


def test_list_scheduler_books_through_the_kernel() -> None:
    problem = fork_problem()
    scheduler = ListScheduler(problem)
    scheduler.commit(0, 2, 0.0)
    assert scheduler.constraints.used[2] == problem.memory[0]
    scheduler.constraints.used[:] = problem.capacity + 1  # every device full, one byte over
    assert scheduler.book_min_eft(1) == 0  # best effort: the most free memory, ties to the lowest number
    assert scheduler.constraints.best_effort == 1
    assert scheduler.constraints.used[0] == problem.capacity[0] + 1 + problem.memory[1]


def test_coarse_devices_takes_the_first_member_and_reports_the_first_conflict() -> None:
    node_group = np.array([0, 1, 0, 2, 1])
    device, conflict = coarse_devices(node_group, 4, np.array([3, -1, 3, 1, 2]))
    assert device.tolist() == [3, 2, 1, -1] and conflict == -1  # group 3 has no member
    device, conflict = coarse_devices(node_group, 4, np.array([3, 0, 1, 1, 2]))
    assert device.tolist() == [3, 0, 1, -1] and conflict == 2  # node 2 is not with node 0


@pytest.mark.parametrize("hints", [{"a": "gpu1"}, {"a": "gpu1", "b": "gpu0", "c": "gpu3"}])
def test_hints_become_preferred_devices(hints: dict[str, str]) -> None:
    problem = PlacementProblem.from_module(heterogeneous_fork(), hints)
    names = problem.fine.node_names
    for u, name in enumerate(names):
        want = problem.device_names.index(hints[name]) if name in hints else -1
        assert problem.preferred[problem.node_group[u]] == want
