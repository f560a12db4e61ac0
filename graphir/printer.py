"""The `.gir` printer: deterministic MLIR-like text, one op per line.

Layout::

    module @resnet {cluster = "4xV100"} {
      graph @main(%x : f32[1,3,224,224]) {
        const %w : f32[64,3,7,7] = external
        const %shape : i64[2] = dense<i64[2] = [1, -1]>
        %y = onnx.Conv @c1(%x, %w) {strides = [2, 2]} : (f32[1,3,8,8], f32[64,3,7,7]) -> f32[1,64,4,4] [cost = 41.5us]
        return %y
      }
    }

Control dependencies print after the operands as ``ctrl(@node, ...)``. Nodes print in the graph
index's stable topological order, params in their stored order and
annotations sorted by key inside the trailing ``[...]``, so golden tests can match them alone. A
node's ``@name`` is printed only when it differs from its first result's name.
"""

from __future__ import annotations

import io
import re
from typing import TextIO

from graphir.annotations import ANNOTATIONS
from graphir.attributes import DenseTensor, format_key, format_string, format_value
from graphir.ir import Graph, Module, Node, Value
from graphir.types import TensorType

_BARE_NAME = re.compile(r"^[A-Za-z0-9_.$#/-]+$")


def format_name(name: str) -> str:
    """A value/node/module name: bare when it is simple, quoted otherwise."""
    return name if _BARE_NAME.match(name) else format_string(name)


def format_annotations(node: Node) -> str:
    """``[key = value, ...]`` with keys sorted, or ``""`` when the node has none."""
    if not node.annotations:
        return ""
    parts = []
    for key in sorted(node.annotations):
        kind = ANNOTATIONS[key]
        parts.append(f"{key} = {format_value(kind.to_generic(node.annotations[key]))}")
    return "[" + ", ".join(parts) + "]"


class _TypeText:
    """Memoised ``str(TensorType)``: real graphs repeat a few hundred types thousands of times."""

    def __init__(self) -> None:
        self._cache: dict[TensorType, str] = {}

    def __call__(self, tensor_type: TensorType) -> str:
        text = self._cache.get(tensor_type)
        if text is None:
            text = str(tensor_type)
            self._cache[tensor_type] = text
        return text


def print_node(node: Node, type_text: _TypeText | None = None) -> str:
    """One node as its `.gir` line (without indentation)."""
    ttext = type_text or _TypeText()
    parts: list[str] = []
    if node.outputs:
        parts.append(", ".join("%" + format_name(v.name) for v in node.outputs))
        parts.append(" = ")
    parts.append(node.op)
    if not node.outputs or node.outputs[0].name != node.name:
        parts.append(" @" + format_name(node.name))
    parts.append("(" + ", ".join("%" + format_name(v.name) for v in node.inputs) + ")")
    if node.control_inputs:
        parts.append(" ctrl(" + ", ".join("@" + format_name(n.name) for n in node.control_inputs) + ")")
    if node.params:
        parts.append(" {" + ", ".join(f"{format_key(k)} = {format_value(v)}" for k, v in node.params.items()) + "}")
    parts.append(" : (" + ", ".join(ttext(v.type) for v in node.inputs) + ") -> ")
    if len(node.outputs) == 1:
        parts.append(ttext(node.outputs[0].type))
    else:
        parts.append("(" + ", ".join(ttext(v.type) for v in node.outputs) + ")")
    annotations = format_annotations(node)
    if annotations:
        parts.append(" " + annotations)
    return "".join(parts)


def _print_constant(value: Value, ttext: _TypeText) -> str:
    data = value.const
    if isinstance(data, DenseTensor):
        body = format_value(data)
    else:
        body = "external"
    return f"const %{format_name(value.name)} : {ttext(value.type)} = {body}"


def print_graph(graph: Graph, out: TextIO, indent: str = "  ") -> None:
    """Write ``graph`` as `.gir` text."""
    ttext = _TypeText()
    args = ", ".join(f"%{format_name(v.name)} : {ttext(v.type)}" for v in graph.inputs)
    out.write(f"{indent}graph @{format_name(graph.name)}({args}) {{\n")
    inner = indent + "  "
    for value in graph.constants:
        out.write(inner + _print_constant(value, ttext) + "\n")
    lines = [inner + print_node(node, ttext) + "\n" for node in graph.index().nodes]
    out.write("".join(lines))
    results = ", ".join("%" + format_name(v.name) for v in graph.outputs)
    out.write(f"{inner}return {results}\n".replace("return \n", "return\n"))
    out.write(f"{indent}}}\n")


def print_module(module: Module, out: TextIO | None = None) -> str:
    """Print ``module``; writes to ``out`` when given and returns the text otherwise."""
    buffer = out if out is not None else io.StringIO()
    attributes: dict[str, object] = {}
    if module.cluster_spec is not None:
        attributes["cluster"] = module.cluster_spec
    attributes.update(module.metadata)
    header = f"module @{format_name(module.name)}"
    if attributes:
        header += " {" + ", ".join(f"{format_key(k)} = {format_value(v)}" for k, v in attributes.items()) + "}"
    buffer.write(header + " {\n")
    print_graph(module.graph, buffer)
    buffer.write("}\n")
    return "" if out is not None else buffer.getvalue()  # type: ignore[union-attr]
