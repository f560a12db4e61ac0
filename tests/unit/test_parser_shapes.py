"""The per-shape annotation patterns of the parser's plain-line loop agree with the general one.

``fastline.shape_pattern`` writes out one shape of a built-in annotation list (which keys, which
``mem`` fields); the plain-line loop tries the last two shapes before the general pattern
``_ANNOTATION_LIST``. That is only right when a shape pattern matches a subset of what the general
pattern matches, with the same groups once ``shape_layout`` puts them in place, and when a shape's
reader gives what ``typed_annotations`` gives. Checked on every one of the 2^11 shapes (with values
that contain separators inside quotes), against every other shape, and on random edits of such lists."""

from __future__ import annotations

import itertools
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from graphir.fastline import (
    _ANNOTATION_LIST,
    annotation_shape,
    shape_layout,
    shape_pattern,
    shape_reader,
    typed_annotations,
)
from graphir.parser import parse_module
from graphir.printer import print_module

_VALUES = {
    "affinity": '["gpu", "cpu, device = \\"x\\""]',
    "colocate": '"c, order = 1]"',
    "cost": "1.5us",
    "device": '"gpu0, start = 1s"',
    "finish": "2.25ms",
    "group": "7",
    "order": "12",
    "start": "3s",
}
_KEYS = ("affinity", "colocate", "cost", "device", "finish", "group", "mem", "order", "start")
_MEM_TEXT = {"persistent": "persistent = 4KiB", "activation": "activation = 100B", "temporary": "temporary = 2MiB"}


def _text(shape: tuple[bool, ...]) -> str:
    """The canonical annotation list (as the printer writes it) holding the parts ``shape`` names."""
    flags = iter(shape)
    items = []
    for key in _KEYS:
        if key == "mem":
            fields = [text for field, text in _MEM_TEXT.items() if next(flags)]
            if fields:
                items.append("mem = {" + ", ".join(fields) + "}")
        elif next(flags):
            items.append(f"{key} = {_VALUES[key]}")
    return " [" + ", ".join(items) + "]" if items else ""


_SHAPES = list(itertools.product([False, True], repeat=11))
_PATTERNS = {shape: shape_pattern(shape) for shape in _SHAPES}
_LAYOUTS = {shape: shape_layout(shape) for shape in _SHAPES}


def _general(shape: tuple[bool, ...], match: re.Match[str]) -> tuple[str | None, ...]:
    """A shape pattern's groups where the general pattern has them."""
    return _LAYOUTS[shape](match.groups() + (None,))


def test_every_shape_matches_its_own_list_with_the_general_groups():
    for shape in _SHAPES:
        text = _text(shape)
        general = _ANNOTATION_LIST.match(text)
        assert general is not None, text
        assert annotation_shape(general.groups()) == shape
        own = _PATTERNS[shape].match(text)
        assert own is not None, text
        assert _general(shape, own) == general.groups()


def _same(left: dict | None, right: dict | None) -> bool:
    """Equal annotations, value types included (1 == 1.0 would hide an int read as a float)."""
    if left is None or right is None:
        return left is right
    return list(left.items()) == list(right.items()) and all(type(left[key]) is type(right[key]) for key in left)


def test_every_shape_reader_reads_what_typed_annotations_reads():
    costs = ["1.5us", "0ns", "-2us", "1e400s", "12345678901234567890.123456789e-3ms", "7s"]
    mems = ["4KiB", "0B", "3GiB"]
    for shape in _SHAPES:
        for k, cost in enumerate(costs):
            text = _text(shape).replace("cost = 1.5us", f"cost = {cost}").replace("4KiB", mems[k % 3])
            general = _ANNOTATION_LIST.match(text)
            assert general is not None, text
            match, read = shape_reader(general.groups())
            own = match(text, 0)
            assert own is not None, text
            assert _same(read(own), typed_annotations(general.groups())), text


def test_no_shape_matches_another_shapes_list():
    texts = {shape: _text(shape) for shape in _SHAPES}
    for shape, pattern in _PATTERNS.items():
        for other, text in texts.items():
            if other != shape:
                assert pattern.match(text) is None, (shape, text)


_EDIT_CHARS = st.sampled_from(list(' ,=[]{}"\\0123456789.eusmB') + ["cost", "mem", "KiB", ", ", " = "])


@settings(max_examples=2000, deadline=None)
@given(
    st.sampled_from(_SHAPES),
    st.lists(st.tuples(st.integers(0, 120), st.integers(0, 2), _EDIT_CHARS), max_size=3),
)
def test_edited_lists_match_a_shape_only_where_the_general_pattern_agrees(shape, edits):
    text = _text(shape)
    for position, delete, insert in edits:
        position = min(position, len(text))
        text = text[:position] + insert + text[position + delete :]
    general = _ANNOTATION_LIST.match(text)
    for tried in (shape, *_SHAPES[::97]):
        match = _PATTERNS[tried].match(text)
        if match is not None:
            assert general is not None, text
            assert _general(tried, match) == general.groups(), text


def test_lines_of_alternating_shapes_read_as_printed():
    # Three shapes in turn (the loop keeps two): each line goes through a shape pattern or the
    # general one, and the module prints back byte-identically.
    lines = ["module @m {", "  graph @main() {"]
    tails = [
        " [cost = 1us, mem = {persistent = 4B, activation = 4B}]",
        " [cost = 2us, mem = {activation = 8B}]",
        ' [cost = 3us, device = "gpu1", group = 2, order = 5]',
        "",
    ]
    for k in range(24):
        operand = f"%v{k - 1}" if k else ""
        operand_type = "f32[4]" if k else ""
        lines.append(f"    %v{k} = t.Op({operand}) : ({operand_type}) -> f32[4]{tails[(k * 7) % 4]}")
    lines += ["    return %v23", "  }", "}", ""]
    text = "\n".join(lines)
    module = parse_module(text)
    assert print_module(module) == text
    assert module.graph.get_node("v2").annotations["cost"].times[0][1] == 3e-6
