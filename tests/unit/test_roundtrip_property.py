"""Round trip with the parser's fast path: random modules print, parse and print back byte-identically.

``test_text_roundtrip`` draws the random modules (every construct: quoted names, multi-result
nodes, control inputs, params of every kind, every annotation). Here each printed module is parsed
twice, once as usual (canonical node lines through :mod:`graphir.fastline`) and once with the fast
path switched off (every line through the token parser), and both must print the same bytes and
hold the same nodes, values, params, annotations and source locations, and know exactly which
annotation keys their nodes hold (``Graph.may_hold``). Synthetic modules with
random placements exercise the fast path's built-in annotation pattern at size.
"""

from __future__ import annotations

import pytest
from helpers import parse_tokens_only, random_modules
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.synth import make_synthetic_module
from graphir.annotations import ANNOTATIONS, Cost
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.regions import Region


def _same_modules(a: Module, b: Module) -> None:
    assert (a.name, a.cluster_spec, repr(a.metadata)) == (b.name, b.cluster_spec, repr(b.metadata))
    assert [n.name for n in a.graph.nodes] == [n.name for n in b.graph.nodes]  # insertion order too
    for x, y in zip(a.graph.nodes, b.graph.nodes, strict=True):
        assert (x.op, x.loc) == (y.op, y.loc)
        assert repr(x.params) == repr(y.params)  # repr: NaN params are unequal to themselves
        assert list(x.params) == list(y.params)
        assert list(x.annotations.items()) == list(y.annotations.items())
        assert [(v.name, v.type) for v in x.inputs] == [(v.name, v.type) for v in y.inputs]
        assert [(v.name, v.type) for v in x.outputs] == [(v.name, v.type) for v in y.outputs]
        assert [n.name for n in x.control_inputs] == [n.name for n in y.control_inputs]
    assert [v.name for v in a.graph.outputs] == [v.name for v in b.graph.outputs]


def _held_keys_exact(module: Module) -> None:
    """A parsed graph knows which annotation keys its nodes hold (checks skip the keys none hold)."""
    graph = module.graph
    for key in ANNOTATIONS:
        assert graph.may_hold(key) == any(key in node.annotations for node in graph.nodes), key


def _check(module: Module) -> None:
    text = print_module(module)
    fast = parse_module(text, "random.gir")
    assert print_module(fast) == text
    slow = parse_tokens_only(text)
    assert print_module(slow) == text
    _same_modules(fast, slow)
    _held_keys_exact(fast)
    _held_keys_exact(slow)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_modules())
def test_random_modules_round_trip_through_both_paths(module):
    _check(module)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_modules())
def test_many_random_modules_round_trip_through_both_paths(module):
    _check(module)


@st.composite
def placed_synthetic(draw) -> Module:
    module = make_synthetic_module(draw(st.integers(1, 300)), seed=draw(st.integers(0, 10**6)))
    rng = draw(st.randoms(use_true_random=False))
    seconds = st.floats(0, 1e4, allow_nan=False) | st.floats(0, 1e-3) | st.integers(0, 10**9).map(lambda n: n * 1e-9)
    for node in module.graph.nodes:
        if rng.random() < 0.5:
            node.device = rng.choice(["gpu0", "gpu1", "gpu2", "gpu3"])
            node.order = rng.randrange(1000)  # the printer and parser do not care about validity
        if rng.random() < 0.3:
            node.group = rng.randrange(50)
        if rng.random() < 0.3:
            node.start = draw(seconds)
            node.finish = draw(seconds)
        if rng.random() < 0.1:
            node.cost = Cost({"V100": draw(seconds), "default": draw(seconds)})
        if rng.random() < 0.1:
            node.colocate = rng.choice(["k", "x y", "é"])
            node.affinity = tuple(rng.sample(["cpu", "V100", "P100"], rng.randint(1, 2)))
    return module


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(placed_synthetic())
def test_placed_synthetic_modules_round_trip_through_both_paths(module):
    _check(module)


_REGION_KEYS = ("body", "then_branch", "else_branch", "cond", "r")


@st.composite
def modules_with_regions(draw, depth: int = 2, max_nodes: int = 25) -> Module:
    """A random module whose nodes hold random region graphs (themselves holding regions, to ``depth``).

    Every graph, the regions' too, has up to ``max_nodes`` nodes (:func:`helpers.random_modules`).
    """
    module = draw(random_modules(max_nodes))
    rng = draw(st.randoms(use_true_random=False))
    nodes = list(module.graph.nodes)
    for node in rng.sample(nodes, min(len(nodes), rng.randint(1, 2))):  # one or two holders per graph
        params = list(node.params.items())
        for key in rng.sample(_REGION_KEYS, rng.randint(1, 2)):
            inner = draw(modules_with_regions(depth - 1, max_nodes) if depth > 1 else random_modules(max_nodes))
            inner.graph.name = key
            params = [(k, v) for k, v in params if k != key]
            params.insert(rng.randint(0, len(params)), (key, Region(inner.graph)))
        node.params = dict(params)
    return module


def _check_regions_text(module: Module) -> None:
    text = print_module(module)
    assert ("= region" in text) == any(True for _ in module.graph.nodes)
    assert print_module(parse_module(text, "regions.gir")) == text
    assert print_module(parse_tokens_only(text)) == text


_REGION_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


# Graphs of up to 6 nodes, regions nested two deep: every construct of a region-holding module, at
# a tenth of the generation time of 25-node graphs (hypothesis discards most of those as too large);
# the slow test below draws full-size ones.
@settings(max_examples=8, **_REGION_SETTINGS)
@given(modules_with_regions(max_nodes=6))
def test_modules_with_regions_round_trip_byte_identical(module):
    _check_regions_text(module)


@pytest.mark.slow
@settings(max_examples=80, **_REGION_SETTINGS)
@given(modules_with_regions())
def test_many_modules_with_regions_round_trip_byte_identical(module):
    _check_regions_text(module)
