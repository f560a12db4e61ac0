"""Pieces the parser's plain-line loop builds itself: nodes and values, types on a cache miss, lines.

``Graph.add_node_unchecked`` sets each field of a :class:`~graphir.ir.Node` and its result
:class:`~graphir.ir.Value` objects directly (no ``__init__``), and ``LineScanner._type`` builds a
rank-1 static type without a regular expression; both must give what the checked paths give.
The head and types patterns use possessive repeats, which must match as the plain ones do.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import make_synthetic_module
from graphir.errors import GraphIRError
from graphir.fastline import _HEAD_TYPES
from graphir.ir import Graph, Node, Value
from graphir.parser import _Parser, parse_module
from graphir.printer import print_module
from graphir.types import DType, TensorType

_T = TensorType(DType.F32, (4,))


def test_unchecked_node_and_values_set_every_slot_as_add_node_does():
    unchecked = Graph("g").add_node_unchecked("t.Op", "a", ["a", "b"], [_T, _T], {}, {}, None, 3)
    checked = Graph("g").add_node("t.Op", (), [_T, _T], name="a", output_names=["a", "b"])
    for slot in Node.__slots__:
        getattr(unchecked, slot)  # raises AttributeError when a slot was left unset
    assert unchecked._line == 3
    for mine, theirs in zip(unchecked.outputs, checked.outputs, strict=True):
        for slot in Value.__slots__:
            getattr(mine, slot)
        assert (mine.name, mine.type, mine.kind, mine.output_index, mine.uses, mine.const) == (
            theirs.name, theirs.type, theirs.kind, theirs.output_index, theirs.uses, theirs.const,
        )  # fmt: skip
        assert mine.producer is unchecked and mine.graph is unchecked.graph
        assert unchecked.graph.get_value(mine.name) is mine


def test_type_misses_build_what_the_token_parser_builds():
    texts = ["f32[5]", "f32[0012]", "i64[123456789012345678901]", "f32[]", "f32[1,2]", "bf16[7]", "f32[x]"]
    for text in texts:
        fast = _Parser("", "<fast>").scanner._type(text)
        slow = _Parser("", "<slow>")._cached_type(text)
        assert fast == slow and type(fast.shape) is tuple, text  # type: ignore[union-attr]
        assert all(type(dim) is type(want) for dim, want in zip(fast.shape, slow.shape, strict=True))  # type: ignore[union-attr]
    # Not a type, or a piece of a spaced shape (f32[1, 3] split at ", "): None, or read_type's answer.
    for text in ["zz9[5]", "f32[\u0663]", "f32[5", "5]", "]", "f32[5]]", "3]"]:
        fast = _Parser("", "<fast>").scanner._type(text)
        slow = _Parser("", "<slow>")._cached_type(text) if text.endswith("]") and "[" in text else None
        assert fast == slow, text


def test_crlf_text_reads_as_lf_text():
    text = print_module(make_synthetic_module(200, seed=3))
    assert print_module(parse_module(text.replace("\n", "\r\n"))) == text


def test_crlf_errors_and_locations_name_the_line_without_its_carriage_return():
    # The parser reads the lines where they stand in the text: after a run of fast-path lines an
    # error's line number, column and quoted text, and a node's lazily made location, must be
    # those of the line (CRLF read as LF), not of a neighbour.
    lines = [
        "module @m {",
        "  graph @main() {",
        "    %x = test.Op() : () -> f32[2] [cost = 1us]",
        "    %y = test.Op(%x) : (f32[2]) -> f32[2] [cost = 2us]",
        "    %z = test.Op(%nope) : (f32[2]) -> f32[2] [cost = 3us]",
        "    return",
        "  }",
        "}",
        "",
    ]
    with pytest.raises(GraphIRError) as info:
        parse_module("\r\n".join(lines), "t.gir")
    loc = info.value.loc
    assert (loc.line, loc.col, loc.source_line) == (5, 18, lines[4])
    assert "use of undefined value '%nope'" in info.value.message
    module = parse_module("\r\n".join(lines[:4] + lines[5:]), "t.gir")
    y = module.graph.get_node("y")
    assert y is not None and (y.loc.line, y.loc.col, y.loc.source_line) == (4, 5, lines[3])


_GREEDY_HEAD_TYPES = re.compile(_HEAD_TYPES.pattern.replace("*+", "*").replace("++", "+").replace("?+", "?"))
_LINES = [line for line in print_module(make_synthetic_module(300, seed=5)).split("\n") if " = " in line]
_LINES += [
    "    %a, %b = t.Op @n(%x, %y) ctrl(@c, @d) : (f32[1, 3], i64[]) -> (f32[2], f32[?,n])",
    "    t.Op() : () -> ()",
    "    %a = t.Op(%x,%y) : (f32[1]) -> f32[1]",
]


_EDIT_CHARS = st.sampled_from(list(" ,%@()[]=:->f32ctrl"))


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(_LINES),
    st.lists(
        st.tuples(st.integers(0, 160), st.integers(0, 3), st.sampled_from(list(" ,%@()[]=:->f32ctrl"))), max_size=3
    ),
)
def test_possessive_head_types_match_as_the_greedy_pattern(line, edits):
    for position, delete, insert in edits:
        position = min(position, len(line))
        line = line[:position] + insert + line[position + delete :]
    possessive, greedy = _HEAD_TYPES.match(line), _GREEDY_HEAD_TYPES.match(line)
    assert (possessive is None) == (greedy is None), line
    if possessive is not None:
        assert possessive.groups() == greedy.groups() and possessive.end() == greedy.end(), line  # type: ignore[union-attr]
