"""The compiled reader (graphir/_girtext.c) builds what the parser's Python loop builds.

The parser hands each run of node lines to the compiled loop first; it builds the nodes of the
commonest lines and stops, unread, at the first line outside its subset, which the Python loop
then reads (or stops at). So the property that matters: a text parses to the same graph, field by
field and in the same order, and fails with the same error at the same place, whether the compiled
loop runs or not (``parser._NATIVE = None``: the Python loop reads every line). Checked on printed
synthetic, placed and simulated modules, on hand-written lines of every kind the compiled loop
reads or declines, and on random edits of them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import make_synthetic_module
from graphir import parser as parser_module
from graphir.errors import GraphIRError
from graphir.gcpause import gc_paused
from graphir.parser import _Parser
from graphir.printer import print_module


def test_the_compiled_loop_is_built():
    # `make` installs the package with its C module (setup.py); a failed compile is only a
    # warning of pip's, so this is where it shows.
    assert parser_module._NATIVE is not None, "graphir._girtext is not compiled: is a C compiler installed?"


def _parse(text: str, native: bool) -> tuple[object, _Parser | None, tuple | None]:
    """(snapshot, parser, error) of parsing ``text`` with or without the compiled loop."""
    saved = parser_module._NATIVE
    parser_module._NATIVE = saved if native else None
    try:
        parser = _Parser(text, "t.gir")
        with gc_paused():
            module = parser.parse()
    except GraphIRError as exc:
        return None, None, (type(exc).__name__, exc.message, exc.loc.line, exc.loc.col, exc.loc.source_line)
    finally:
        parser_module._NATIVE = saved
    return _snapshot(module, parser), parser, None


def _snapshot(module, parser: _Parser) -> tuple:
    """Every field the parser sets, in graph order (values by name; types by value and by cache identity)."""
    graph = module.graph
    cache_ids = {id(t): text for text, t in parser.type_cache.items()}
    first_op: dict[str, str] = {}
    nodes = []
    for node in graph._nodes:
        nodes.append(
            (
                node.op,
                first_op.setdefault(node.op, node.op) is node.op,  # one string per op (interned)
                node.name,
                node._seq,
                node._line,
                node._index_pos,
                type(node._loc).__name__,
                repr(node.params),
                repr(list(node._annotations.items())),
                [type(v).__name__ for v in node._annotations.values()],
                [(v.name, k) for k, v in enumerate(node.inputs)],
                [
                    (
                        v.name,
                        v.name is node.name,
                        repr(v.type),
                        cache_ids.get(id(v.type)),
                        v.kind,
                        v.output_index,
                        v.const,
                        v.producer is node,
                        v.graph is graph,
                        [(u.name, k) for u, k in v.uses],
                    )
                    for v in node.outputs
                ],  # fmt: skip
                [n.name for n in node.control_inputs],
                [n.name for n in node.control_users],
                type(node.control_inputs).__name__,
                node.graph is graph,
            )
        )
    return (
        nodes,
        list(graph._values),
        list(graph._node_names),
        [v.name for v in graph.outputs],
        sorted(parser.type_cache),
        graph._annotation_keys,
        graph._version,
        graph._uses_exact_version,
    )


def _same_both_ways(text: str) -> tuple | None:
    """Assert both readers agree on ``text``; returns the error (or None)."""
    native, _, native_error = _parse(text, True)
    python, _, python_error = _parse(text, False)
    assert native_error == python_error, text
    assert native == python, text
    return native_error


def _placed_text() -> str:
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    module = make_synthetic_module(300, seed=9)
    PassManager(parse_pipeline("fuse{algo=cpd-topo},place{algo=adjusting},simulate")).run(module, PassContext())
    return print_module(module)


def test_printed_modules_read_the_same(monkeypatch):
    for text in (print_module(make_synthetic_module(2000, seed=4)), _placed_text()):
        assert _same_both_ways(text) is None
        assert _same_both_ways(text.replace("\n", "\r\n")) is None


def test_the_compiled_loop_reads_every_line_of_a_synthetic_module(monkeypatch):
    # Unless it reads them, the agreement above proves nothing: count the lines the Python loop's
    # head pattern is tried on.
    text = print_module(make_synthetic_module(1500, seed=1))
    tried: list[int] = []
    pattern = parser_module._HEAD_TYPES

    class Counting:
        def match(self, *args):
            tried.append(1)
            return pattern.match(*args)

    monkeypatch.setattr(parser_module, "_HEAD_TYPES", Counting())
    _parse(text, True)
    assert len(tried) <= 2  # the line after the last node line ('return'), once per loop entry
    tried.clear()
    _parse(text, False)
    assert len(tried) > 1500


_HEAD = "module @m {\n  graph @main(%in : f32[2]) {\n"
_TAIL = "    return %y\n  }\n}\n"
LINES = [
    # Read by the compiled loop.
    "    %y = t.Op(%in) : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 1.5us]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 2.s]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 0ns, mem = {persistent = 8B}]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [mem = {activation = 3KiB, temporary = 007MiB}]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 12ms, mem = {persistent = 1GiB, activation = 2TiB, temporary = 0B}]",  # noqa: E501
    "    %y = t.Op(%in, %in) : (f32[2], f32[2]) -> f32[2,3]",
    "  %y = a.b.c$d(%in) : (f32[2]) -> i64[]",
    "    %y = t.Op() : () -> f32[2] [cost = 1234567890123456789012345678us]",
    # Declined: read by the Python loop or the token parser (or reported).
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 1e-3s]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 12345678901234567890123456789us]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = -1us]",
    '    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 1us, device = "gpu:0"]',
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [mem = {persistent = 1234567890123456789012B}]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [mem = {temporary = 1B, persistent = 2B}]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [group = 3]",
    "    %y = t.Op @n(%in) : (f32[2]) -> f32[2]",
    "    %y, %z = t.Op(%in) : (f32[2]) -> (f32[2], f32[2])",
    "    %y = t.Op(%in) ctrl(@x) : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) {a = 1} : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[1, 2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[2]) -> f64[2]",
    "    %y = t.Op(%in) : (f32[3]) -> f32[2]",
    "    %y = t.Op(%nope) : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : () -> f32[2]",
    "    %y = t.Op() : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[2], f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : (zz9[2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[?]) -> f32[n]",
    "    %y = Op(%in) : (f32[2]) -> f32[2]",
    "    %in = t.Op(%in) : (f32[2]) -> f32[2]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] ",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [cost = 1usx]",
    "    %y = t.Op(%in) : (f32[2]) -> f32[2] [mem = {}]",
    "    %y = t.Op(%in) : (f32[\u0663]) -> f32[2]",
    '    %"y" = t.Op(%in) : (f32[2]) -> f32[2]',
]


@pytest.mark.parametrize("line", LINES)
def test_each_kind_of_line_reads_the_same(line):
    _same_both_ways(_HEAD + line + "\n" + _TAIL)
    # After a compiled run of lines, and before one (the loop goes back to it after each line it declines).
    before = "    %a = t.Op(%in) : (f32[2]) -> f32[2] [cost = 1us]\n    %b = t.Op(%a) : (f32[2]) -> f32[2]\n"
    after = "    %c = t.Op(%in) : (f32[2]) -> f32[2] [cost = 3us]\n"
    _same_both_ways(_HEAD + before + line.replace("%in)", "%b)") + "\n" + after + _TAIL)


def test_forward_uses_and_waiting_values_read_the_same():
    body = [
        "    %b = t.Op(%a) : (f32[2]) -> f32[2] [cost = 1us]",  # %a defined later: pending
        "    %c = t.Op(%in) : (f32[2]) -> f32[2] [cost = 2us]",
        "    %a = t.Op(%c) : (f32[2]) -> f32[2] [cost = 3us]",  # resolves %b's operand
        "    %y = t.Op(%a, %b) : (f32[2], f32[2]) -> f32[2]",
    ]
    assert _same_both_ways(_HEAD + "\n".join(body) + "\n" + _TAIL) is None


_ALPHABET = st.sampled_from(list(' ,=:()[]{}%@.0123456789eEnsumkKiMGTBf_-\n\\"\u0663'))


@settings(max_examples=1200, deadline=None)
@given(
    st.lists(st.sampled_from(LINES[:9]), min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 2), _ALPHABET), max_size=3),
)
def test_edited_texts_read_the_same(lines, edits):
    names = [f"%n{k}" for k in range(len(lines))]
    body = []
    previous = "%in"
    for line, name in zip(lines, names, strict=True):
        body.append(line.replace("%y", name, 1).replace("(%in", "(" + previous, 1))
        previous = name
    text = "\n".join(body)
    for position, action, char in edits:
        position %= len(text) + 1
        if action == 0:
            text = text[:position] + char + text[position:]
        elif action == 1:
            text = text[:position] + text[position + 1 :]
        else:
            text = text[:position] + char + text[position + 1 :]
    _same_both_ways(_HEAD + text + "\n" + _TAIL.replace("%y", previous))
