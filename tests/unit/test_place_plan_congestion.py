"""``plan-congestion``: the list schedulers plan transfers on the link model's routes (issue 15 item 4).

Worked by hand. Three devices joined by links of latency 0 and 1 MB/s; ``a`` (1 s) produces
f32[250000] = 1,000,000 B (1 s on any link) read by ``b``, ``c`` and ``e`` (3 s each).

Estimates, with ``a`` on g0 [0, 1) and ``b`` booked on g1 (a's value on g0 -> g1 during [1, 2)):
    none (the papers' formula): a's value reaches g2 at 1 + 1 = 2;
    pair (one channel per ordered pair): g0 -> g2 is another channel: 2 as well;
    port (Moirai eq. 8: one send per device at a time): g0.out is busy until 2, so [2, 3): 3.

HEFT (rank ties: node number): a on g0 [0, 1); b: EFT g0 = 4, g1 = 2 + 3 = 5: g0. c: g0 7, g1 5: g1
(transfer g0 -> g1 [1, 2)). e: g0 7, g1 8, g2: none 2 + 3 = 5, port 3 + 3 = 6: g2 either way. The
estimated makespan is 5 s under none, 6 s under port; the simulator under ``port`` serialises
the two sends out of g0 and finds 6 s: the planned estimate is the ruler's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fork

from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.passes.place import Place
from graphir.passes.place.baechi import _etf_schedule
from graphir.passes.place.common import ListScheduler
from graphir.passes.place.problem import PlacementProblem
from graphir.passes.place.transfer_plan import incoming_values
from graphir.simulator import simulate


def _fork(tmp_path: Path) -> Module:
    return fork(tmp_path)


def _numbers(problem: PlacementProblem) -> dict[str, int]:
    return {name: int(problem.node_group[k]) for k, name in enumerate(problem.fine.node_names)}


@pytest.mark.parametrize(("rule", "arrival"), [("none", 2.0), ("pair", 2.0), ("port", 3.0), ("topology", 3.0)])
def test_second_send_out_of_one_device(tmp_path: Path, rule: str, arrival: float) -> None:
    problem = PlacementProblem.from_module(_fork(tmp_path))
    node = _numbers(problem)
    scheduler = ListScheduler(problem, "paper", rule)
    assert scheduler.commit(node["a"], 0, 0.0) == 1.0
    assert scheduler.data_ready(node["b"]) == [1.0, 2.0, 2.0]
    assert scheduler.book(node["b"], 1) == 2.0
    ready = scheduler.data_ready(node["c"])
    assert ready[0] == 1.0 and ready[1] == 2.0  # g1 already holds a's value: no second transfer
    assert ready[2] == arrival


def test_incoming_values_one_per_value() -> None:
    # b reads a's value twice (two operands): one transfer unit.
    module = parse_module(
        'module @m {cluster = "3xV100"} {\n  graph @g(%in : f32[1]) {\n'
        "    %a = t.N(%in) : (f32[1]) -> f32[4] [cost = 1s]\n"
        "    %b = t.N(%a, %a) : (f32[4], f32[4]) -> f32[4] [cost = 1s]\n"
        "    return %b\n  }\n}\n"
    )
    problem = PlacementProblem.from_module(module)
    node = _numbers(problem)
    assert incoming_values(problem)[node["b"]] == [(0, node["a"], 16.0)]  # value 0: a's result


@pytest.mark.parametrize(("rule", "estimate"), [("none", 5.0), ("port", 6.0)])
def test_heft_estimate_meets_the_ruler(tmp_path: Path, rule: str, estimate: float) -> None:
    module = _fork(tmp_path)
    stats = Place.of("heft", plan_congestion=rule).run(module, PassContext()).stats
    assert [node.device for node in module.graph.index().nodes] == ["g0", "g0", "g1", "g2"]
    assert stats["estimated-makespan-s"] == pytest.approx(estimate)
    assert simulate(module, "port").makespan == pytest.approx(6.0)
    assert simulate(module, "pair").makespan == pytest.approx(5.0)


@pytest.mark.parametrize("algo", ["heft", "dpos", "adjusting", "order-place"])
def test_none_is_the_default_and_the_papers_formula(tmp_path: Path, algo: str) -> None:
    assert Place.of(algo).placer.plan_congestion == "none"  # type: ignore[union-attr]
    default, explicit = _fork(tmp_path), _fork(tmp_path)
    Place.of(algo).run(default, PassContext())
    Place.of(algo, plan_congestion="none").run(explicit, PassContext())
    placed = [(n.device, n.order) for n in default.graph.index().nodes]
    assert placed == [(n.device, n.order) for n in explicit.graph.index().nodes]


def test_plan_with_liveness_books_received_copies(tmp_path: Path) -> None:
    # Under liveness the received copies come from the plan: e's copy on g2 is sent [2, 3) under port.
    module = _fork(tmp_path)
    problem = PlacementProblem.from_module(module)
    node = _numbers(problem)
    scheduler = ListScheduler(problem, "liveness", "port")
    scheduler.commit(node["a"], 0, 0.0)
    scheduler.book(node["c"], 1)
    assert scheduler.received(node["e"], 2) == [(0, 2.0, 3.0)]  # value 0: a's result


@pytest.mark.parametrize(("rule", "e_start"), [("none", 2.0), ("pair", 2.0), ("port", 3.0)])
def test_m_etf_plans_the_second_send(tmp_path: Path, rule: str, e_start: float) -> None:
    # m-ETF (M-TOPO order a, b, c, e): a on g0 [0, 1); at t = 1, b starts earliest on g0 (1 < 2);
    # then c on g1 at 2 (g0 busy until 4), its copy sent g0 -> g1 during [1, 2); e on g2: the copy
    # arrives at 2 when sends out of g0 do not contend, at 3 under port. Simulated under port: 6 s.
    module = _fork(tmp_path)
    problem = PlacementProblem.from_module(module)
    node = _numbers(problem)
    device, start, _ = _etf_schedule(problem, None, "paper", rule)
    assert [int(device[node[k]]) for k in "abce"] == [0, 0, 1, 2]
    assert [float(start[node[k]]) for k in "abce"] == [0.0, 1.0, 2.0, e_start]
    Place.of("m-etf", plan_congestion=rule).run(module, PassContext())
    assert simulate(module, "port").makespan == pytest.approx(6.0)
