"""Regions in the IR: profiling charges a loop its trips x body, placement keeps the holder one unit."""

from __future__ import annotations

import pytest

from graphir.ops import estimate_node
from graphir.ops.control_flow import DEFAULT_TRIPS, trip_count
from graphir.parser import parse_module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.regions import check_regions, node_regions, walk_nodes

LOOP = """
module @m {cluster = "2xV100"} {
  graph @main(%c : i1[], %x : f32[64,64], %w : f32[64,64]) {
    %m = onnx.Constant() {value = dense<i64[] = [5]>} : () -> i64[]
    %v = onnx.Loop(%m, %c, %x, %w) {body = region, _captured_inputs = 1} : (i64[], i1[], f32[64,64], f32[64,64]) \
-> f32[64,64] {
      graph @body(%i : i64[], %cond : i1[], %v : f32[64,64], %w : f32[64,64]) {
        %p = onnx.MatMul(%v, %w) : (f32[64,64], f32[64,64]) -> f32[64,64]
        %q = onnx.Relu(%p) : (f32[64,64]) -> f32[64,64]
        return %cond, %q
      }
    }
    %y = onnx.Relu(%v) : (f32[64,64]) -> f32[64,64]
    return %y
  }
}
"""


def test_loop_cost_is_trips_times_body():
    module = parse_module(LOOP)
    loop = module.graph.node("v")
    assert trip_count(loop) == (5, True)
    body = node_regions(loop)[0][1].graph
    body_flops = sum(estimate_node(n)[0] for n in body.nodes)
    assert body_flops == 2 * 64**3 + 64 * 64  # by hand: the MatMul and one op per element of the Relu
    flops, _, temporary, fallback, _ = estimate_node(loop)
    assert not fallback and flops == 5 * body_flops
    assert temporary >= 2 * 64 * 64 * 4  # one trip's results alive together


def test_data_dependent_trip_count_uses_the_documented_guess():
    module = parse_module(
        LOOP.replace(
            "%m = onnx.Constant() {value = dense<i64[] = [5]>} : () -> i64[]",
            "%m = onnx.Identity(%c) : (i1[]) -> i64[]",
        )
    )
    assert trip_count(module.graph.node("v")) == (DEFAULT_TRIPS, False)


def test_placement_treats_the_holder_as_one_unit():
    module = parse_module(LOOP)
    PassManager(parse_pipeline("profile,place{algo=m-topo}")).run(module, PassContext(seed=0))
    loop = module.graph.node("v")
    assert loop.device is not None and loop.cost is not None
    body_nodes = [n for n in walk_nodes(module.graph) if n.graph is not module.graph]
    assert [n.name for n in body_nodes] == ["p", "q"]
    assert all(n.device is None for n in body_nodes)  # the body runs where its holder runs
    assert len(list(module.graph.nodes)) == 3
    longer = parse_module(LOOP.replace("[5]", "[500]"))
    PassManager(parse_pipeline("profile")).run(longer, PassContext(seed=0))
    overhead = module.cluster.devices[0].launch_overhead
    kernel, longer_kernel = loop.cost.times[0][1] - overhead, longer.graph.node("v").cost.times[0][1] - overhead
    # 100x the trips: 100x the body's work; the loop's own operands and results move once.
    assert 80 * kernel < longer_kernel <= 100 * kernel


def test_check_regions_names_the_broken_boundary():
    module = parse_module(LOOP)
    loop = module.graph.node("v")
    assert check_regions(loop) is None
    loop.params = {**loop.params, "_captured_inputs": 0}  # %w becomes a carried value the body does not return
    assert check_regions(loop) == "has 2 carried values but 1 results"


@pytest.mark.parametrize("op", ["onnx.If", "onnx.Scan"])
def test_holder_without_regions_falls_back(op):
    module = parse_module(LOOP)
    loop = module.graph.node("v")
    loop.params = {}
    loop.op = op
    assert estimate_node(loop)[3]  # no regions: the bytes-only fallback, counted by profile


def test_run_guard_looks_inside_regions():
    from graphir.runguard import refusals

    text = LOOP.replace("%q = onnx.Relu(%p)", "%q = onnx.com.example.Leak(%p)")
    (refusal,) = refusals(parse_module(text))
    assert (refusal.node, refusal.op, refusal.where) == ("q", "onnx.com.example.Leak", "region 'body' of 'v'")
