"""`.gir` text: print(parse(print(m))) == print(m) on random modules, and parse error locations."""

from __future__ import annotations

import pytest
from helpers import random_modules
from hypothesis import given

from graphir.annotations import ANNOTATIONS, AnnotationKind, Cost, Mem, register_annotation
from graphir.attributes import DenseTensor
from graphir.errors import ParseError
from graphir.ir import Graph, Module
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.types import DType, TensorType


@given(random_modules())
def test_print_parse_print_is_a_fixed_point(module):
    text = print_module(module)
    parsed = parse_module(text, "random.gir")
    assert print_module(parsed) == text
    # And the structure survived, not only the text.
    assert [n.name for n in parsed.graph.index().nodes] == [n.name for n in module.graph.index().nodes]
    assert [v.name for v in parsed.graph.outputs] == [v.name for v in module.graph.outputs]
    for node in module.graph.nodes:
        twin = parsed.graph.node(node.name)
        assert twin.op == node.op
        assert [v.name for v in twin.inputs] == [v.name for v in node.inputs]
        assert [n.name for n in twin.control_inputs] == [n.name for n in node.control_inputs]
        assert [v.type for v in twin.outputs] == [v.type for v in node.outputs]
        assert dict(twin.annotations) == dict(node.annotations)


def test_printer_layout_example():
    conv_line = (
        "    %y = onnx.Conv @conv1(%x, %w) {strides = [2, 2]} : (f32[1,3,224,224], f32[64,3,7,7]) -> f32[1,64,112,112]"
        ' [cost = 41.5us, device = "gpu1", group = 3, mem = {persistent = 2MiB, activation = 3KiB}, order = 7]'
    )
    reshape_line = (
        "    %r = onnx.Reshape(%a, %shape) : (f32[1,32,112,112], i64[2]) -> f32[?,batch]"
        ' [affinity = ["cpu"], cost = {P100 = 2us, V100 = 1us}]'
    )
    lines = [
        'module @resnet {cluster = "4xV100", opset = 17} {',
        "  graph @main(%x : f32[1,3,224,224]) {",
        "    const %w : f32[64,3,7,7] = external",
        "    const %shape : i64[2] = dense<i64[2] = [1, -1]>",
        conv_line,
        "    %a, %b = graphir.split(%y) {axis = 1} : (f32[1,64,112,112]) -> (f32[1,32,112,112], f32[1,32,112,112])",
        reshape_line,
        "    graphir.sink @s(%b) : (f32[1,32,112,112]) -> ()",
        "    return %r, %b",
        "  }",
        "}",
    ]
    text = "\n".join(lines) + "\n"
    module = parse_module(text)
    assert print_module(module) == text
    conv = module.graph.node("conv1")
    assert conv.params == {"strides": (2, 2)}
    assert conv.cost == Cost.of(41.5e-6) and conv.mem == Mem(2 << 20, 3 << 10)
    split = module.graph.node("a")
    assert [v.name for v in split.outputs] == ["a", "b"]
    assert module.metadata == {"opset": 17} and module.cluster_spec == "4xV100"
    shape = module.graph.value("shape").const
    assert isinstance(shape, DenseTensor) and shape.numpy().tolist() == [1, -1]
    assert module.graph.node("s").outputs == []


def test_nodes_print_in_topological_order_with_sorted_annotations():
    g = Graph()
    x = g.add_input("x", TensorType(DType.F32, (1,)))
    late = g.add_node("test.b", [x], [TensorType(DType.F32, (1,))], name="b")
    early = g.add_node("test.a", [x], [TensorType(DType.F32, (1,))], name="a")
    late.set_input(0, early.outputs[0])
    late.order, late.device, late.cost = 0, "gpu0", 1e-6
    text = print_module(Module("m", g))
    body = [line.strip() for line in text.splitlines()[2:4]]
    assert body[0].startswith("%a = test.a(%x)")
    assert body[1].endswith('[cost = 1us, device = "gpu0", order = 0]')


def test_quoted_names_round_trip():
    g = Graph("my graph")
    x = g.add_input('in "put"', TensorType(DType.F32, (1,)))
    n = g.add_node("test.op", [x], [TensorType(DType.F32, (1,))], name="node é", output_names=["out\\put"])
    g.set_outputs(n.outputs)
    text = print_module(Module("mod ule", g))
    assert '%"in \\"put\\""' in text and '@"node é"' in text
    parsed = parse_module(text)
    assert parsed.name == "mod ule" and parsed.graph.name == "my graph"
    assert parsed.graph.node("node é").outputs[0].name == "out\\put"


@pytest.mark.parametrize("kind", ["V100-32GB", "2080Ti", "3060Ti"])
def test_per_kind_cost_for_builtin_device_kinds_round_trips(kind):
    # Regression: cost dict keys used to print bare (`{2080Ti = 1us}`) and were parsed as
    # identifiers, so the catalogue's own kinds 'V100-32GB', '2080Ti', '3060Ti' could not be read back.
    g = Graph()
    x = g.add_input("x", TensorType(DType.F32, (1,)))
    n = g.add_node("test.op", [x], [TensorType(DType.F32, (1,))], name="n")
    n.cost = {kind: 1e-6, "V100": 2e-6}
    text = print_module(Module("m", g))
    assert parse_module(text).graph.node("n").cost == n.cost


def test_cyclic_text_parses_and_fails_only_at_indexing():
    text = """\
module @m {
  graph @main(%x : f32[2]) {
    %a = onnx.Add(%x, %b) : (f32[2], f32[2]) -> f32[2]
    %b = onnx.Relu(%a) : (f32[2]) -> f32[2]
    return %b
  }
}
"""
    module = parse_module(text, "cyc.gir")
    assert len(module.graph) == 2
    from graphir.errors import VerifyError

    with pytest.raises(VerifyError, match=r"cycle: a -> b -> a") as info:
        module.graph.index()
    assert (info.value.loc.file, info.value.loc.line) == ("cyc.gir", 3)


# ----------------------------------------------------------------------------- parse errors

_OK_HEAD = "module @m {\n  graph @main(%x : f32[2]) {\n"
_OK_TAIL = "  }\n}\n"


def _error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_module(text, "in.gir")
    return info.value


@pytest.mark.parametrize(
    ("line", "at", "message"),
    [
        # (third line of the file, the text the caret must point at, message fragment)
        ("    %y = onnx.Relu(%z) : (f32[2]) -> f32[2]", "%z", "use of undefined value '%z'"),
        ("    %y = onnx.Relu(%x) : (q32[2]) -> f32[2]", "q32", "unknown element type 'q32'"),
        ("    %y = onnx.Relu(%x) ; (f32[2]) -> f32[2]", ";", "unexpected character ';'"),
        ("    %y = onnx.Relu(%x) : (f32[3]) -> f32[2]", "f32[3]", "has type f32[2], but the op declares f32[3]"),
        ("    %y = Relu(%x) : (f32[2]) -> f32[2]", "Relu", "must be qualified by its dialect"),
        ("    %x = onnx.Relu(%x) : (f32[2]) -> f32[2]", "%x =", "redefinition of '%x'"),
        ('    %y = onnx.Relu(%x) : (f32[2]) -> f32[2] [group = "a"]', '"a"', "'group' expects"),
        ("    %y = onnx.Relu(%x) : (f32[2]) -> f32[2] [order = 1, order = 2]", "order = 2", "duplicate key 'order'"),
        ("    %y = onnx.Relu(%x) {k = 1,} : (f32[2]) -> f32[2]", "}", "expected a key"),
        ("    %y = onnx.Relu(%x) : (f32[2]) -> f32[-1]", "-1", "bad dimension '-1'"),
        ("    %y, %z = onnx.Relu(%x) : (f32[2]) -> f32[2]", "f32[2]\n", "2 results named but 1 result types"),
        ("    %y = onnx.Relu(%x) {v = dense<i8[2] = [1]>} : (f32[2]) -> f32[2]", "[1]", "must list 2 values"),
        ("    %y = onnx.Relu(%x) {v = dense<i8[1] = [300]>} : (f32[2]) -> f32[2]", "[300]", "cannot hold"),
        ("    %y = onnx.Relu(%x) {v = 3KiBs} : (f32[2]) -> f32[2]", "3KiBs", "unexpected character '3'"),
    ],
)
def test_parse_error_location(line, at, message):
    exc = _error(_OK_HEAD + line + "\n    return %x\n" + _OK_TAIL)
    assert message in exc.message
    assert exc.loc.file == "in.gir" and exc.loc.line == 3
    expected_col = (line + "\n").index(at) + 1 if at else len(line) + 1
    assert exc.loc.col == expected_col, exc.render()
    assert exc.one_line().startswith(f"in.gir:3:{expected_col}: error: ")
    rendered = exc.render().splitlines()
    assert rendered[1] == line and rendered[2] == " " * (expected_col - 1) + "^"


def test_unknown_annotation_points_at_the_key():

    line = "    %y = onnx.Relu(%x) : (f32[2]) -> f32[2] [foo = 1]"
    exc = _error(_OK_HEAD + line + "\n    return %y\n" + _OK_TAIL)
    assert "unknown annotation 'foo'" in exc.message
    assert exc.loc.col == line.index("foo") + 1


@pytest.mark.parametrize(
    ("text", "line", "col", "message"),
    [
        ("", 1, 1, "empty input"),
        ("garbage\n", 1, 1, "expected 'module'"),
        ("module m {\n", 1, 8, "the module name"),
        ("module @m {cluster = 4} {\n", 1, 22, "'cluster' must be a string"),
        (_OK_HEAD + "    return %q\n" + _OK_TAIL, 3, 12, "use of undefined value '%q'"),
        (
            _OK_HEAD + "    return %x\n    %y = onnx.Relu(%x) : (f32[2]) -> f32[2]\n" + _OK_TAIL,
            4,
            5,
            "'return' must be",
        ),
        (_OK_HEAD + "    return %x\n" + _OK_TAIL + "module @n {\n", 6, 1, "unexpected text after the module"),
        (
            _OK_HEAD + "    const %w : f32[2] = dense<f32[3] = [1.0, 2.0, 3.0]>\n" + _OK_TAIL,
            3,
            25,
            "does not match the declared f32[2]",
        ),
        ("module @m {\n  graph @main(%x : f32[2], %x : f32[2]) {\n", 2, 28, "redefinition of '%x'"),
        (
            _OK_HEAD + "    %y = a.b(%x) : (f32[2]) -> f32[2]\n    %z = a.b @y(%x) : (f32[2]) -> f32[2]\n" + _OK_TAIL,
            4,
            14,
            "redefinition of node '@y'",
        ),
    ],
)
def test_parse_error_locations_elsewhere(text, line, col, message):
    exc = _error(text)
    assert message in exc.message
    assert (exc.loc.line, exc.loc.col) == (line, col), exc.render()


def test_comments_and_blank_lines_are_ignored():
    text = "// header\nmodule @m {  // trailing\n\n  graph @main(%x : f32[2]) {\n    return %x // done\n  }\n}\n"
    module = parse_module(text)
    assert module.graph.outputs[0].name == "x"


@pytest.mark.parametrize("escape", ["\\uzz12", "\\u-041"])
def test_malformed_unicode_escape_is_a_parse_error(escape):
    line = f'    %y = onnx.Relu(%x) {{s = "{escape}"}} : (f32[2]) -> f32[2]'
    exc = _error(_OK_HEAD + line + "\n    return %y\n" + _OK_TAIL)
    assert exc.loc.line == 3 and exc.loc.col == line.index('"') + 1


@pytest.mark.parametrize("key", ["plug{in}", 'plug"in', "plug\\in", "plügin", "plug\U0001f600in", "plug\tin"])
def test_a_plugin_key_prints_as_it_is_spelt(key):
    # The printer compiles one f-string per key set: braces, quotes and backslashes in a key must
    # come out as the key's own characters (the key text is written as it is, not quoted).
    kind = AnnotationKind(key, "a plugin's test key", str, lambda v: v, str)
    register_annotation(kind)
    try:
        g = Graph()
        x = g.add_input("x", TensorType(DType.F32, (1,)))
        node = g.add_node("test.a", [x], [TensorType(DType.F32, (1,))], name="a")
        node.set_annotation(key, "v")
        node.device = "gpu0"
        line = print_module(Module("m", g)).splitlines()[2]
        assert line.endswith(f' [device = "gpu0", {key} = "v"]')  # keys sorted: "device" < "plug..."
    finally:
        del ANNOTATIONS[key]
