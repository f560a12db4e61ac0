"""The compiled writer (graphir/_girtext.c) prints what the printer's own node_line prints.

The printer hands each chunk of nodes to the compiled writer, which formats the commonest node
lines and calls node_line for every other one. So a module prints to the same bytes with the
writer or without it (``printer._NATIVE = None``), and its duration and byte-size texts follow
the rules of graphir.attributes (format_duration, format_bytes) for every value it formats.
"""

from __future__ import annotations

import io
import math
import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import make_synthetic_module
from graphir import printer
from graphir.annotations import DEFAULT_KIND, Cost, Mem
from graphir.attributes import format_bytes, format_duration
from graphir.ir import Node, Value
from graphir.parser import parse_module
from graphir.printer import print_module

native = printer._NATIVE


def test_the_compiled_writer_is_built():
    assert native is not None, "graphir._girtext is not compiled: is a C compiler installed?"


def _durations_agree(seconds: float) -> None:
    text = native.format_duration(seconds)
    if text is not None:
        assert text == format_duration(seconds), seconds
    else:
        assert not math.isfinite(seconds)


@settings(max_examples=3000, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_durations_follow_the_rule_on_any_bit_pattern(bits):
    _durations_agree(struct.unpack("<d", struct.pack("<Q", bits))[0])


@settings(max_examples=2000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_durations_follow_the_rule(seconds):
    _durations_agree(seconds)


def test_durations_follow_the_rule_at_unit_edges_and_on_costs():
    rng = np.random.default_rng(0)
    values = [0.0, -0.0, 5e-324, 1e-9, 1e-6, 1e-3, 1.0, 1e16, 1e300, 0.1, 0.5, 123.0, 1e-7, 9.999999999999999e-7]
    values += [math.nextafter(v, math.inf) for v in values] + [math.nextafter(v, 0) for v in values]
    values += rng.lognormal(-10, 4, 20_000).tolist() + (-rng.lognormal(-10, 4, 200)).tolist()
    for seconds in values:
        _durations_agree(seconds)
    assert native.format_duration(math.inf) is None and native.format_duration(math.nan) is None


@settings(max_examples=2000, deadline=None)
@given(st.integers(0, 2**63 - 1), st.sampled_from([0, 10, 20, 30, 40]))
def test_byte_sizes_follow_the_rule(count, shift):
    count = (count >> shift) << shift  # often a whole number of some unit
    assert native.format_bytes(count) == format_bytes(count)


def test_byte_sizes_the_writer_leaves_to_the_printer():
    assert native.format_bytes(-1) is None and native.format_bytes(2**63) is None and native.format_bytes(True) is None


def _both_ways(module) -> str:
    saved = printer._NATIVE
    token = printer.PRINT_JOBS.set(1)
    try:
        with_writer = print_module(module)
        printer._NATIVE = None
        without = print_module(module)
    finally:
        printer._NATIVE = saved
        printer.PRINT_JOBS.reset(token)
    assert with_writer == without
    return with_writer


def _placed(num_nodes: int, seed: int):
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    module = make_synthetic_module(num_nodes, seed=seed)
    PassManager(parse_pipeline("fuse{algo=cpd-topo},place{algo=adjusting},simulate")).run(module, PassContext())
    return module


def test_printed_modules_are_the_same_bytes():
    _both_ways(make_synthetic_module(3000, seed=7))
    _both_ways(_placed(600, seed=3))


def test_the_compiled_writer_writes_every_line_of_a_placed_module():
    # Unless it writes them, the agreement above proves nothing: count the lines left to node_line.
    module = _placed(400, seed=2)
    nodes = module.graph.index().nodes
    ttext = printer._TypeText()
    keys = frozenset(printer._NATIVE_KEYS)
    writer = native.make_writer(Node, Value, Cost, Mem, ttext._by_id, ttext, DEFAULT_KIND, keys, "    ", "\n")
    left: list[str] = []
    text = writer.lines(list(nodes), lambda node: left.append(node.name) or "")
    assert left == [] and text.count("\n") == len(nodes)
    assert all(" [cost = " in line and "device = " in line for line in text.splitlines())


# Lines of every kind the writer writes or leaves to node_line: @names, control inputs, params,
# several or no results, quoted names, strings with escapes, per-kind costs, plugin keys, values of
# other types, non-ASCII text, huge ints.
_GIR = """module @m {
  graph @main(%x : f32[2], %"odd in" : f32[2]) {
    %a = t.Op @named(%x) : (f32[2]) -> f32[2] [cost = 1.5us, device = "gpu:0", group = 3, order = 0]
    %b = t.Op(%a, %x) ctrl(@named) : (f32[2], f32[2]) -> f32[2] [mem = {persistent = 1KiB, temporary = 3B}]
    %c = t.Op(%b) {axis = 1} : (f32[2]) -> f32[2] [cost = 2ms]
    %d, %e = t.Op(%c) : (f32[2]) -> (f32[2], f32[2]) [cost = 1s]
    %"q q" = t.Op(%d) : (f32[2]) -> f32[2] [start = 0s, finish = 1.25s]
    %f = t.Op(%"odd in") : (f32[2]) -> f32[2] [device = "gpu \\"0\\"\\n", colocate = "c"]
    %g = t.Op(%f) : (f32[2]) -> f32[2] [cost = {V100 = 1us, default = 2us}]
    %h = t.Op(%g) : (f32[2]) -> f32[?,n] [affinity = ["GPU"], order = 4611686018427387903]
    %i = t.Op(%h) : (f32[?,n]) -> f32[2] [device = "gp\u00fc"]
    %"\u00fc" = t.Op(%i) : (f32[2]) -> f32[2] [cost = 1ns]
    %j = t.Op(%"\u00fc") : (f32[2]) -> f32[2] [mem = {activation = 1099511627776B}, group = 0]
    t.Sink(%j) : (f32[2]) -> ()
    return %e, %"q q", %j
  }
}
"""


def test_lines_of_every_kind_are_the_same_bytes():
    module = parse_module(_GIR)
    text = _both_ways(module)
    assert "%a = t.Op @named(%x)" in text and "ctrl(@named)" in text and '"gpu \\"0\\"\\n"' in text
    graph = module.graph
    # Values of other types than the parser's (stored past the checks): the printer's rules.
    graph.get_node("j")._annotations["group"] = True
    graph.get_node("b")._annotations["start"] = 3
    graph.get_node("c")._annotations["cost"] = Cost(((DEFAULT_KIND, 7),))
    graph.get_node("d")._annotations["finish"] = np.float64(0.5)
    _both_ways(module)


def test_plugin_keys_and_overridden_built_ins_go_to_node_line():
    from graphir.annotations import ANNOTATIONS, AnnotationKind

    module = parse_module(_GIR)
    module.graph.get_node("b")._annotations["zz.plugin"] = 5
    group = ANNOTATIONS["group"]
    ANNOTATIONS["zz.plugin"] = AnnotationKind("zz.plugin", "a test key", lambda v: v, lambda v: v, lambda v: v)
    try:
        assert "zz.plugin = 5" in _both_ways(module)
        # A built-in key declared anew (a plugin's own group): its text is the new declaration's.
        ANNOTATIONS["group"] = AnnotationKind("group", "a test group", lambda v: v, lambda v: f"g{v}", lambda v: v)
        assert 'group = "g3"' in _both_ways(module)
    finally:
        del ANNOTATIONS["zz.plugin"]
        ANNOTATIONS["group"] = group


def test_forked_printing_with_the_writer_is_the_same_bytes():
    module = make_synthetic_module(600, seed=4)
    nodes = module.graph.index().nodes
    line = printer._line_printer(printer._TypeText(), printer._NameText("%"), printer._AnnotationText(), "    ", "\n")
    assert hasattr(line, "lines")
    one, three = io.StringIO(), io.StringIO()
    printer._write_lines(nodes, line, one)
    printer._write_lines_forked(nodes, 3, line, three)
    assert one.getvalue() == three.getvalue() == "".join(printer._lines_text(nodes, line) for _ in [0])
