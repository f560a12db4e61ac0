"""The parser's fast path (graphir.fastline) reads every line it accepts exactly as the token parser.

The fast path reads canonical node lines with a few regular expressions; any line it does not
accept goes to the token parser, which also gives every diagnostic. So the one property that
matters: whenever the fast path returns a record, the token parser accepts the same line and
builds the same record. It is checked on every node line of the golden tests, on printed modules
(synthetic, placed and simulated), on hand-written tricky lines, and on random mutations of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.synth import make_synthetic_module
from graphir.annotations import ANNOTATIONS
from graphir.errors import GraphIRError
from graphir.parser import _Parser, parse_module
from graphir.printer import print_module

REPO = Path(__file__).resolve().parents[2]


def _slow_record(line: str) -> tuple | None:
    """What the token parser makes of ``line`` as a node line (``None`` when it rejects it)."""
    parser = _Parser("", "<test>")
    try:
        parser.cur = parser._tokenize(1, line)
        record = parser.parse_node(set())
        annotations = {key: ANNOTATIONS[key].from_generic(value) for key, value in record.annotations.items()}
    except (GraphIRError, KeyError, ValueError):
        return None
    return (*record[:8], annotations)


def _fast_record(line: str) -> tuple | None:
    return _Parser("", "<test>").scanner.scan_node_line(line, set())


def _check_line(line: str) -> bool:
    """Assert the two paths agree on ``line``; returns whether the fast path read it."""
    fast = _fast_record(line)
    if fast is None:
        return False
    slow = _slow_record(line)
    assert slow is not None, f"fast path accepted a line the token parser rejects: {line!r}"
    # repr: NaN params compare unequal to themselves; key order matters too.
    assert repr(fast) == repr(slow), line
    assert [list(d) for d in (fast[5], fast[8])] == [list(d) for d in (slow[5], slow[8])], line
    return True


def _node_lines(text: str) -> list[str]:
    return [
        line
        for line in text.split("\n")
        if line.startswith("    ") and not line.lstrip().startswith(("const ", "return", "//", "}"))
    ]


def _placed_module_text() -> str:
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    module = make_synthetic_module(400, seed=5)
    PassManager(parse_pipeline("fuse{algo=cpd-topo},place{algo=adjusting},simulate")).run(module, PassContext())
    return print_module(module)


def test_fast_path_reads_every_printed_synthetic_line():
    text = print_module(make_synthetic_module(3000, seed=2))
    lines = _node_lines(text)
    assert len(lines) == 3000
    assert all(_check_line(line) for line in lines)


def test_fast_path_reads_placed_and_simulated_lines():
    lines = _node_lines(_placed_module_text())
    assert lines and all(_check_line(line) for line in lines)
    assert any("device = " in line and "start = " in line for line in lines)


def test_golden_file_lines_agree():
    golden = sorted((REPO / "tests" / "filecheck").rglob("*.gir"))
    assert golden
    read = total = 0
    for path in golden:
        for line in _node_lines(path.read_text()):
            total += 1
            read += _check_line(line)
    assert read > total // 2  # the fast path is the common path, not a curiosity


TRICKY = [
    '    %y = onnx.Conv @c1(%x, %w) {strides = [2, 2], pads = [], mode = "SAME \\"x\\"", f = 1.5, n = -3} '
    ": (f32[1,3,8,8], f32[4,3,3,3]) -> f32[1,4,4,4] [cost = 41.5us]",
    "    %a, %b = tf.Split(%x) {axis = 0, t = type<f32[2]>, d = dense<i64[2] = [1, -1]>} "
    ": (f32[4]) -> (f32[2], f32[2])",
    '    %c = tf.Const() {value = dense<f32[2] = b64"AACAPwAAAEA=">, s = dense<str[2] = ["a", "b"]>} : () -> f32[2]',
    "    test.Sink @s(%x) ctrl(@a, @b) : (f32[2]) -> ()",
    "    %y = test.Op(%x) : (f32[1, 3]) -> f32[batch,?] [mem = {}]",
    '    %y = test.Op(%x) : (f32[2]) -> f32[2] [cost = {V100 = 1us, default = 2us}, device = "gpu:0", order = 3]',
    '    %y = test.Op(%x) : (f32[2]) -> f32[2] [affinity = ["cpu", "gpu"], colocate = "v", group = 7]',
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [mem = {activation = 4KiB, persistent = 1B}]",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [mem = {persistent = 1.5KiB}]",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [cost = -1us]",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [cost = 1e400s]",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [group = 5e3]",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2] [group = 1, group = 2]",
    '    %y = test.Op(%x) : (f32[2]) -> f32[2] [device = ""]',
    "    %y = test.Op(%x) {true = true, inf = -inf, x = nan, e = 1e5, u = 3MiB} : (f32[2]) -> f32[2]",
    '    %y = test.Op(%x) {"quoted key" = {a = [1, [2, 3]]}} : (f32[2]) -> f32[2]',
    "    %y = test.Op(%x) {a = 1} : (f32[2]) -> f32[2] // trailing comment",
    "    %y = test.Op(%x) : (f32[2]) -> f32[2]  ",
    "    %y, %y = test.Op(%x) : (f32[2]) -> (f32[2], f32[2])",
    "    %y = Op(%x) : (f32[2]) -> f32[2]",
    "    %y = test.Op(%x) : (q32[2]) -> f32[2]",
    '    %"odd name" = test.Op(%x) : (f32[2]) -> f32[2]',
    '    %y = test.Op(%x) {a = opaque<"k", b64"AA==">} : (f32[2]) -> f32[2]',
]


@pytest.mark.parametrize("line", TRICKY)
def test_tricky_lines_agree(line):
    _check_line(line)


def test_fast_path_declines_what_it_should():
    for line in (TRICKY[8], TRICKY[9], TRICKY[10], TRICKY[11], TRICKY[12], TRICKY[16], TRICKY[17], TRICKY[18]):
        assert _fast_record(line) is None, line
    assert _fast_record(TRICKY[0]) is not None
    assert _fast_record(TRICKY[5]) is not None  # per-kind cost: read by the value scanner


_ALPHABET = st.sampled_from(list(' ,=:()[]{}<>%@"\\-.0123456789eEsuBKiMafx_/#$'))


@settings(max_examples=1500, deadline=None)
@given(st.sampled_from(TRICKY[:8]), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2), _ALPHABET), max_size=3))
def test_mutated_lines_agree(line, edits):
    for position, action, char in edits:
        position %= len(line) + 1
        if action == 0:
            line = line[:position] + char + line[position:]
        elif action == 1:
            line = line[:position] + line[position + 1 :]
        else:
            line = line[:position] + char + line[position + 1 :]
    _check_line(line)


def test_errors_after_a_fast_line_still_point_at_the_column():
    line = "    %y = test.Op(%nope) : (f32[2]) -> f32[2] [cost = 1us]"
    text = "module @m {\n  graph @main() {\n" + line + "\n    return\n  }\n}\n"
    with pytest.raises(GraphIRError) as info:
        parse_module(text, "t.gir")
    assert info.value.loc.line == 3 and info.value.loc.col == 18
    assert "use of undefined value '%nope'" in info.value.message


# ------------------------------------------------------------------ nodes built while reading
# The parser builds each node as it reads its line; a use of a value defined on a later line
# waits until that line. These cases pin what a reader that builds after reading every line did.


def _body(*lines: str) -> str:
    return "module @m {\n  graph @main(%in : f32[2]) {\n" + "".join(f"    {line}\n" for line in lines) + "  }\n}\n"


def _tokens_only(text: str):
    from helpers import parse_tokens_only

    return parse_tokens_only(text)


def test_a_use_before_the_definition_keeps_the_use_lists_in_line_order():
    # %a is used on line 3 (by %x, before its definition on line 4) and on line 5 (by %y): its use
    # list holds both in line order, whichever path read the lines.
    text = _body(
        "%x = t.A(%a) : (f32[2]) -> f32[2]",
        "%a = t.B(%in) : (f32[2]) -> f32[2]",
        "%y = t.C(%a, %x) : (f32[2], f32[2]) -> f32[2] [cost = 1us]",
        "return %y",
    )
    for module in (parse_module(text), _tokens_only(text)):
        graph = module.graph
        a, x, y = graph.value("a"), graph.node("x"), graph.node("y")
        assert a.uses == [(x, 0), (y, 0)]
        assert [v.name for v in x.inputs] == ["a"] and [v.name for v in y.inputs] == ["a", "x"]
        assert [n.name for n in graph.nodes] == ["x", "a", "y"]  # insertion order: line order
    # Printing puts the graph in topological order; that text reads back to itself.
    printed = print_module(parse_module(text))
    assert printed.index("%a = t.B") < printed.index("%x = t.A")
    assert print_module(parse_module(printed)) == printed


def test_a_nameless_node_does_not_take_a_name_a_later_line_spells_out():
    # The first line names nothing: its name comes from its op ("noop"), but line 4 defines the
    # node "noop", so it becomes noop_1; line 5 names it as a control input.
    text = _body(
        "t.NoOp() : () -> ()",
        "%noop = t.A(%in) : (f32[2]) -> f32[2]",
        "%z = t.B(%noop) ctrl(@noop_1) : (f32[2]) -> f32[2]",
        "return %z",
    )
    for module in (parse_module(text), _tokens_only(text)):
        graph = module.graph
        assert [n.name for n in graph.nodes] == ["noop_1", "noop", "z"]
        assert graph.node("z").control_inputs == [graph.node("noop_1")]
        assert graph.node("noop_1").control_users == [graph.node("z")]


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        # An undefined operand on line 3 comes before a type mismatch on line 4.
        (
            ["%x = t.A(%nope) : (f32[2]) -> f32[2]", "%y = t.B(%in) : (f32[3]) -> f32[2]", "return %y"],
            (3, 14),
            "use of undefined value '%nope'",
        ),
        # A mismatch found only when line 4 defines %a (used on line 3) comes before line 5's
        # undefined operand.
        (
            [
                "%x = t.A(%a) : (f32[3]) -> f32[2]",
                "%a = t.B(%in) : (f32[2]) -> f32[2]",
                "%y = t.C(%nope) : (f32[2]) -> f32[2]",
                "return %y",
            ],
            (3, 21),
            "operand #0 '%a' has type f32[2], but the op declares f32[3]",
        ),
        # On one line, operands come before control inputs.
        (
            ["%x = t.A(%nope) ctrl(@nowhere) : (f32[2]) -> f32[2]", "return %x"],
            (3, 14),
            "use of undefined value '%nope'",
        ),
        # A control input problem on line 3 comes before an operand problem on line 4.
        (
            ["%x = t.A(%in) ctrl(@nowhere) : (f32[2]) -> f32[2]", "%y = t.B(%nope) : (f32[2]) -> f32[2]", "return %y"],
            (3, 24),
            "control input '@nowhere' is not a node of this graph",
        ),
    ],
)
def test_the_earliest_operand_problem_is_reported(lines, where, message):
    text = _body(*lines)
    for parse in (lambda t: parse_module(t, "t.gir"), _tokens_only):
        with pytest.raises(GraphIRError) as info:
            parse(text)
        assert (info.value.loc.line, info.value.loc.col) == where
        assert message in info.value.message


def test_types_are_shared_by_spelling_and_never_merged_across_spellings():
    # One object per distinct type text (a parse interns them); distinct types stay distinct.
    text = _body(
        "%a = t.A(%in) : (f32[2]) -> f32[2]",
        "%b = t.B(%a) : (f32[2]) -> i32[2]",
        "%c = t.C(%b) : (i32[2]) -> f32[2,1]",
        "%d = t.D(%c) : (f32[2,1]) -> f32[1,2]",
        "return %d",
    )
    graph = parse_module(text).graph
    types = {name: graph.value(name).type for name in ("in", "a", "b", "c", "d")}
    assert types["a"] is types["in"]  # the argument's f32[2] is the node line's f32[2]
    distinct = [types[name] for name in ("a", "b", "c", "d")]
    assert [str(t) for t in distinct] == ["f32[2]", "i32[2]", "f32[2,1]", "f32[1,2]"]
    assert len({id(t) for t in distinct}) == 4 and len(set(distinct)) == 4


def test_node_locations_are_made_when_first_read():
    # Three lines, one per reading path: the plain-line loop (%a), the general fast path (a
    # param: %b) and the token parser (a trailing comment: %c). Expected by hand: the node
    # line's number, the column of its first non-blank character (5 after four spaces, 3
    # after two) and the line's text as written.
    lines = [
        "module @m {",
        "  graph @g() {",
        "    %a = t.A() : () -> f32[2] [cost = 1us]",
        "    %b = t.B(%a) {k = 1} : (f32[2]) -> f32[2]",
        "  %c = t.C(%b) : (f32[2]) -> f32[3] // a comment",
        "    return %c",
        "  }",
        "}",
    ]
    module = parse_module("\n".join(lines) + "\n", "m.gir")
    graph = module.graph
    expected = {"a": (3, 5), "b": (4, 5), "c": (5, 3)}
    for name, (line, col) in expected.items():
        loc = graph.get_node(name).loc
        assert (loc.file, loc.line, loc.col) == ("m.gir", line, col), name
        assert loc.source_line.rstrip() == lines[line - 1].rstrip()
        assert graph.get_node(name).loc is loc  # made once, then kept
    node_a = graph.get_node("a")
    fresh = parse_module("\n".join(lines) + "\n", "m.gir").graph.get_node("a")
    assert type(fresh._loc).__name__ == "SourceLines"  # nothing made until asked for
    from graphir.errors import Location

    node_a.loc = Location(node="elsewhere")
    assert node_a.loc == Location(node="elsewhere")
