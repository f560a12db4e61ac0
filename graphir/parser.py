"""The `.gir` parser: reads what :mod:`graphir.printer` writes, with caret diagnostics.

The format is line-oriented (one op per line), so the parser tokenizes line by line. Values may
be used before the line that defines them (so a cyclic graph can be read and reported by the
verifier rather than rejected as a parse error). Errors raise :class:`~graphir.errors.ParseError`
with ``file:line:col`` and the source line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from graphir.annotations import ANNOTATIONS
from graphir.attributes import (
    BYTE_UNITS,
    ByteSize,
    DenseTensor,
    Duration,
    Opaque,
    b64decode,
    dtype_from_numpy,
    numpy_dtype,
    seconds_from,
)
from graphir.errors import Location, ParseError
from graphir.gcpause import gc_paused
from graphir.ir import ExternalTensor, Graph, Module
from graphir.types import Dim, DType, TensorType

_TOKEN = re.compile(
    r"""
    \s*(?:
    (?P<comment>//.*)
  | (?P<pname>%(?:[A-Za-z0-9_.$\#/-]+|"(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*"))
  | (?P<aname>@(?:[A-Za-z0-9_.$\#/-]+|"(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*"))
  | (?P<string>"(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*")
  | (?P<arrow>->)
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?P<unit>ns|us|ms|s|KiB|MiB|GiB|TiB|B)?(?![A-Za-z0-9_])
  | (?P<type>[a-z][a-z0-9]*\[[^\]]*\])
  | (?P<ident>-?[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<punct>[(){}\[\]<>,=:?*])
    )""",
    re.VERBOSE,
)

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/", "r": "\r", "b": "\b", "f": "\f"}


def _unquote(text: str) -> str:
    """Decode a double-quoted string with JSON-style escapes."""
    body = text[1:-1]
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


class _Token(NamedTuple):
    kind: str
    text: str
    col: int  # 1-based
    unit: str | None = None


@dataclass
class _NodeRecord:
    op: str
    name: str | None
    name_col: int
    outputs: list[tuple[str, int]]
    inputs: list[tuple[str, int]]
    controls: list[tuple[str, int]]
    params: dict[str, Any]
    input_types: list[tuple[TensorType, int]]
    output_types: list[TensorType]
    annotations: dict[str, tuple[Any, int, int]]
    line: int
    source: str


@dataclass
class _Line:
    number: int
    text: str
    tokens: list[_Token]
    pos: int = 0
    end_col: int = field(default=0)


class _Parser:
    def __init__(self, text: str, filename: str):
        self.filename = filename
        # Only "\n" ends a line: str.splitlines would also split at U+2028 and friends, which may
        # appear (escaped by the printer, but raw in hand-written text) inside string literals.
        self.lines = [line.rstrip("\r") for line in text.split("\n")]
        self.line_no = 0
        self.cur: _Line | None = None
        self.type_cache: dict[str, TensorType] = {}

    # ----------------------------------------------------------------- diagnostics
    def error(self, message: str, col: int | None = None, line: _Line | None = None) -> ParseError:
        line = line or self.cur
        if line is None:
            return ParseError(message, Location(self.filename, max(len(self.lines), 1), 1))
        if col is None:
            col = line.tokens[line.pos].col if line.pos < len(line.tokens) else line.end_col
        return ParseError(message, Location(self.filename, line.number, col, line.text))

    # ----------------------------------------------------------------- lines and tokens
    def _tokenize(self, number: int, text: str) -> _Line:
        tokens: list[_Token] = []
        append = tokens.append
        make = tuple.__new__
        text = text.rstrip()
        pos = 0
        for match in _TOKEN.finditer(text):
            if match.start() != pos:
                break
            pos = match.end()
            kind = match.lastgroup
            if kind == "comment":
                continue
            if kind == "unit" or kind == "number":
                append(make(_Token, ("number", match.group("number"), match.start("number") + 1, match.group("unit"))))
            else:
                append(make(_Token, (kind, match.group(kind), match.start(kind) + 1, None)))
        if pos != len(text):
            while pos < len(text) and text[pos].isspace():
                pos += 1
            line = _Line(number, text, tokens, len(tokens), pos + 1)
            raise self.error(f"unexpected character '{text[pos]}'", pos + 1, line)
        return _Line(number, text, tokens, 0, len(text) + 1)

    def next_line(self) -> _Line | None:
        """Advance to the next line holding tokens; ``None`` at end of file."""
        while self.line_no < len(self.lines):
            text = self.lines[self.line_no]
            self.line_no += 1
            line = self._tokenize(self.line_no, text)
            if line.tokens:
                self.cur = line
                return line
        self.cur = None
        return None

    def peek(self) -> _Token | None:
        assert self.cur is not None
        return self.cur.tokens[self.cur.pos] if self.cur.pos < len(self.cur.tokens) else None

    def take(self) -> _Token:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end of line")
        assert self.cur is not None
        self.cur.pos += 1
        return tok

    def accept(self, text: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.text == text and tok.kind in ("punct", "arrow", "ident"):
            assert self.cur is not None
            self.cur.pos += 1
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> _Token:
        tok = self.peek()
        if tok is None or tok.text != text or tok.kind not in ("punct", "arrow", "ident"):
            found = "end of line" if tok is None else f"'{tok.text}'"
            raise self.error(f"expected {what or repr(text)}, found {found}")
        return self.take()

    def expect_end(self) -> None:
        tok = self.peek()
        if tok is not None:
            raise self.error(f"unexpected '{tok.text}' at end of line")

    def expect_kind(self, kind: str, what: str) -> _Token:
        tok = self.peek()
        if tok is None or tok.kind != kind:
            found = "end of line" if tok is None else f"'{tok.text}'"
            raise self.error(f"expected {what}, found {found}")
        return self.take()

    @staticmethod
    def sigil_name(tok: _Token) -> str:
        body = tok.text[1:]
        return _unquote(body) if body.startswith('"') else body

    # ----------------------------------------------------------------- types and values
    def parse_type(self) -> TensorType:
        tok = self.peek()
        if tok is None or tok.kind != "type":
            found = "end of line" if tok is None else f"'{tok.text}'"
            raise self.error(f"expected a tensor type such as f32[1,3], found {found}")
        self.take()
        cached = self.type_cache.get(tok.text)
        if cached is None:
            cached = self._type_from_text(tok)
            self.type_cache[tok.text] = cached
        return cached

    def _type_from_text(self, tok: _Token) -> TensorType:
        short, _, rest = tok.text.partition("[")
        try:
            dtype = DType.from_short(short)
        except KeyError:
            raise self.error(f"unknown element type '{short}'", tok.col) from None
        body = rest[:-1]
        if body.strip() == "*":
            return TensorType(dtype, None)
        dims: list[Dim] = []
        if body.strip():
            col = tok.col + len(short) + 1
            for item in body.split(","):
                dim = item.strip()
                if dim.isdigit():
                    dims.append(int(dim))
                elif dim == "?":
                    dims.append(None)
                elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", dim):
                    dims.append(dim)
                else:
                    raise self.error(f"bad dimension '{dim}'", col + len(item) - len(item.lstrip()))
                col += len(item) + 1
        return TensorType(dtype, tuple(dims))

    def parse_value(self) -> Any:
        tok = self.take()
        if tok.kind == "number":
            if tok.unit is not None:
                if tok.unit in BYTE_UNITS:
                    if not re.fullmatch(r"-?\d+", tok.text):
                        raise self.error("byte sizes must be whole numbers", tok.col)
                    return ByteSize(int(tok.text) * BYTE_UNITS[tok.unit])
                seconds = seconds_from(tok.text, tok.unit)
                if not math.isfinite(seconds):
                    raise self.error(f"duration '{tok.text}{tok.unit}' is not finite", tok.col)
                return Duration(seconds)
            if re.fullmatch(r"-?\d+", tok.text):
                return int(tok.text)
            return float(tok.text)
        if tok.kind == "string":
            return _unquote(tok.text)
        if tok.kind == "ident":
            return self._parse_ident_value(tok)
        if tok.text == "[":
            items: list[Any] = []
            if self.accept("]"):
                return ()
            while True:
                items.append(self.parse_value())
                if self.accept("]"):
                    return tuple(items)
                self.expect(",", "',' or ']' in the list")
        if tok.text == "{":
            return self.parse_dict(opened=True)
        raise self.error(f"expected a value, found '{tok.text}'", tok.col)

    def _parse_ident_value(self, tok: _Token) -> Any:
        simple = {"true": True, "false": False, "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
        if tok.text in simple:
            return simple[tok.text]
        if tok.text == "type":
            self.expect("<")
            tensor_type = self.parse_type()
            self.expect(">")
            return tensor_type
        if tok.text == "dense":
            return self.parse_dense_body()
        if tok.text == "opaque":
            self.expect("<")
            kind = _unquote(self.expect_kind("string", "the opaque kind string").text)
            self.expect(",")
            return Opaque(kind, self.parse_b64())
        raise self.error(f"unknown value '{tok.text}'", tok.col)

    def parse_b64(self) -> bytes:
        tag = self.expect_kind("ident", 'b64"..."')
        if tag.text != "b64":
            raise self.error(f"expected b64\"...\", found '{tag.text}'", tag.col)
        data_tok = self.expect_kind("string", "a base64 string")
        try:
            data = b64decode(_unquote(data_tok.text))
        except ValueError:
            raise self.error("malformed base64 data", data_tok.col) from None
        self.expect(">")
        return data

    def parse_dense_body(self) -> DenseTensor:
        self.expect("<")
        type_col = self.peek().col if self.peek() else 0
        tensor_type = self.parse_type()
        if not tensor_type.is_static:
            raise self.error("a dense tensor needs a static shape", type_col)
        self.expect("=")
        tok = self.peek()
        count = tensor_type.num_elements or 0
        if tok is not None and tok.kind == "ident" and tok.text == "b64":
            data = self.parse_b64()
            if tensor_type.nbytes != len(data):
                raise self.error(
                    f"dense data has {len(data)} bytes, the type {tensor_type} needs {tensor_type.nbytes}", tok.col
                )
            return DenseTensor(tensor_type, data)
        values_col = tok.col if tok else 0
        values = self.parse_value()
        self.expect(">")
        if not isinstance(values, tuple) or len(values) != count:
            raise self.error(f"dense data must list {count} values for {tensor_type}", values_col)
        if tensor_type.dtype is DType.STRING:
            return DenseTensor(tensor_type, tuple(str(v) for v in values))
        import numpy as np

        try:
            array = np.array(values, dtype=numpy_dtype(tensor_type.dtype)).reshape(tensor_type.shape or ())
        except (KeyError, TypeError, ValueError, OverflowError):
            raise self.error(f"cannot hold these values as {tensor_type}", values_col) from None
        dtype_from_numpy(array.dtype)
        return DenseTensor.from_numpy(array)

    def parse_key(self) -> tuple[str, int]:
        """A key: an identifier or a quoted string; returns it with its column."""
        tok = self.peek()
        if tok is not None and tok.kind == "string":
            self.take()
            return _unquote(tok.text), tok.col
        tok = self.expect_kind("ident", "a key")
        return tok.text, tok.col

    def parse_dict(self, opened: bool = False) -> dict[str, Any]:
        if not opened:
            self.expect("{")
        out: dict[str, Any] = {}
        if self.accept("}"):
            return out
        while True:
            key, key_col = self.parse_key()
            if key in out:
                raise self.error(f"duplicate key '{key}'", key_col)
            self.expect("=", f"'=' after '{key}'")
            out[key] = self.parse_value()
            if self.accept("}"):
                return out
            self.expect(",", "',' or '}'")

    def parse_keyed(self, close: str) -> dict[str, tuple[Any, int, int]]:
        """``key = value, ...`` up to ``close``, keeping the columns of each value and key."""
        out: dict[str, tuple[Any, int, int]] = {}
        if self.accept(close):
            return out
        while True:
            key, key_col = self.parse_key()
            if key in out:
                raise self.error(f"duplicate key '{key}'", key_col)
            self.expect("=", f"'=' after '{key}'")
            col = self.peek().col if self.peek() else key_col
            out[key] = (self.parse_value(), col, key_col)
            if self.accept(close):
                return out
            self.expect(",", f"',' or '{close}'")

    # ----------------------------------------------------------------- structure
    def parse(self) -> Module:
        line = self.next_line()
        if line is None:
            raise self.error("empty input: expected 'module @name {'")
        self.expect("module", "'module'")
        name = self.sigil_name(self.expect_kind("aname", "the module name '@name'"))
        attributes: dict[str, tuple[Any, int, int]] = {}
        if self.peek() is not None and self.peek().text == "{" and self._brace_is_attributes():  # type: ignore[union-attr]
            self.take()
            attributes = self.parse_keyed("}")
        self.expect("{", "'{' opening the module body")
        self.expect_end()
        cluster = None
        metadata: dict[str, Any] = {}
        for key, (value, col, _) in attributes.items():
            if key == "cluster":
                if not isinstance(value, str):
                    raise self.error("'cluster' must be a string", col, line)
                cluster = value
            else:
                metadata[key] = value
        graph = self.parse_graph()
        if self.next_line() is None:
            raise self.error("expected '}' closing the module")
        self.expect("}", "'}' closing the module")
        self.expect_end()
        if self.next_line() is not None:
            raise self.error("unexpected text after the module")
        return Module(name, graph, cluster, metadata)

    def _brace_is_attributes(self) -> bool:
        assert self.cur is not None
        rest = self.cur.tokens[self.cur.pos + 1 :]
        return bool(rest)

    def parse_graph(self) -> Graph:
        if self.next_line() is None:
            raise self.error("expected 'graph @name(...) {'")
        self.expect("graph", "'graph'")
        graph = Graph(self.sigil_name(self.expect_kind("aname", "the graph name '@name'")))
        self.expect("(")
        defined: dict[str, tuple[int, int]] = {}
        if not self.accept(")"):
            while True:
                tok = self.expect_kind("pname", "an argument '%name'")
                arg_name = self.sigil_name(tok)
                self.expect(":", "':' before the argument type")
                arg_type = self.parse_type()
                if arg_name in defined:
                    raise self.error(f"redefinition of '%{arg_name}'", tok.col)
                defined[arg_name] = (self.cur.number, tok.col)  # type: ignore[union-attr]
                graph.add_input(arg_name, arg_type)
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("{", "'{' opening the graph body")
        self.expect_end()
        records: list[_NodeRecord] = []
        outputs: list[tuple[str, int]] | None = None
        return_line: _Line | None = None
        while True:
            line = self.next_line()
            if line is None:
                raise self.error("expected '}' closing the graph")
            first = self.peek()
            assert first is not None
            if first.text == "}" and first.kind == "punct":
                self.take()
                self.expect_end()
                break
            if outputs is not None:
                raise self.error("'return' must be the last line of the graph", first.col)
            if first.kind == "ident" and first.text == "const":
                self.take()
                self.parse_constant(graph, defined)
            elif first.kind == "ident" and first.text == "return":
                self.take()
                outputs = []
                return_line = line
                if self.peek() is not None:
                    while True:
                        tok = self.expect_kind("pname", "a result '%name'")
                        outputs.append((self.sigil_name(tok), tok.col))
                        if self.peek() is None:
                            break
                        self.expect(",", "',' between results")
            else:
                records.append(self.parse_node(defined))
        self.build_nodes(graph, records)
        for value_name, col in outputs or []:
            value = graph.get_value(value_name)
            if value is None:
                raise self.error(f"use of undefined value '%{value_name}'", col, return_line)
            graph.outputs.append(value)
        return graph

    def parse_constant(self, graph: Graph, defined: dict[str, tuple[int, int]]) -> None:
        tok = self.expect_kind("pname", "the constant '%name'")
        name = self.sigil_name(tok)
        if name in defined:
            raise self.error(f"redefinition of '%{name}'", tok.col)
        defined[name] = (self.cur.number, tok.col)  # type: ignore[union-attr]
        self.expect(":", "':' before the constant type")
        const_type = self.parse_type()
        self.expect("=", "'=' before the constant data")
        data_tok = self.peek()
        if data_tok is not None and data_tok.kind == "ident" and data_tok.text == "external":
            self.take()
            graph.add_constant(name, const_type, ExternalTensor(const_type))
        else:
            value = self.parse_value()
            if not isinstance(value, DenseTensor):
                raise self.error("constant data must be dense<...> or external", data_tok.col if data_tok else None)
            if value.type != const_type:
                raise self.error(
                    f"constant data type {value.type} does not match the declared {const_type}",
                    data_tok.col if data_tok else None,
                )
            graph.add_constant(name, const_type, value)
        self.expect_end()

    def parse_node(self, defined: dict[str, tuple[int, int]]) -> _NodeRecord:
        assert self.cur is not None
        outputs: list[tuple[str, int]] = []
        tok = self.peek()
        if tok is not None and tok.kind == "pname":
            while True:
                tok = self.expect_kind("pname", "a result '%name'")
                name = self.sigil_name(tok)
                if name in defined:
                    raise self.error(f"redefinition of '%{name}'", tok.col)
                defined[name] = (self.cur.number, tok.col)
                outputs.append((name, tok.col))
                if self.accept("="):
                    break
                self.expect(",", "',' or '=' after the results")
        op_tok = self.expect_kind("ident", "an op name such as onnx.Relu")
        if "." not in op_tok.text:
            raise self.error(
                f"op name '{op_tok.text}' must be qualified by its dialect (e.g. onnx.{op_tok.text})", op_tok.col
            )
        node_name = None
        name_col = op_tok.col
        if self.peek() is not None and self.peek().kind == "aname":  # type: ignore[union-attr]
            name_tok = self.take()
            node_name = self.sigil_name(name_tok)
            name_col = name_tok.col
        self.expect("(", "'(' opening the operands")
        inputs: list[tuple[str, int]] = []
        if not self.accept(")"):
            while True:
                tok = self.expect_kind("pname", "an operand '%name'")
                inputs.append((self.sigil_name(tok), tok.col))
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        controls: list[tuple[str, int]] = []
        if self.accept("ctrl"):
            self.expect("(", "'(' opening the control inputs")
            if not self.accept(")"):
                while True:
                    tok = self.expect_kind("aname", "a control input '@node'")
                    controls.append((self.sigil_name(tok), tok.col))
                    if self.accept(")"):
                        break
                    self.expect(",", "',' or ')'")
        params: dict[str, Any] = {}
        if self.peek() is not None and self.peek().text == "{":  # type: ignore[union-attr]
            params = self.parse_dict()
        self.expect(":", "':' before the op type")
        self.expect("(", "'(' opening the operand types")
        input_types: list[tuple[TensorType, int]] = []
        if not self.accept(")"):
            while True:
                col = self.peek().col if self.peek() else 0  # type: ignore[union-attr]
                input_types.append((self.parse_type(), col))
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("->", "'->' before the result types")
        output_types: list[TensorType] = []
        types_col = self.peek().col if self.peek() else None  # type: ignore[union-attr]
        if self.accept("("):
            if not self.accept(")"):
                while True:
                    output_types.append(self.parse_type())
                    if self.accept(")"):
                        break
                    self.expect(",", "',' or ')'")
        else:
            output_types.append(self.parse_type())
        if len(output_types) != len(outputs):
            raise self.error(f"{len(outputs)} results named but {len(output_types)} result types given", types_col)
        if len(input_types) != len(inputs):
            raise self.error(f"{len(inputs)} operands but {len(input_types)} operand types", op_tok.col)
        annotations: dict[str, tuple[Any, int, int]] = {}
        if self.accept("["):
            annotations = self.parse_keyed("]")
        self.expect_end()
        return _NodeRecord(
            op_tok.text, node_name, name_col, outputs, inputs, controls, params, input_types, output_types,
            annotations, self.cur.number, self.cur.text,
        )  # fmt: skip

    def build_nodes(self, graph: Graph, records: list[_NodeRecord]) -> None:
        nodes = []
        # Names the text gives (``@name`` or the first result) are reserved before any node is
        # created, so a node that names nothing cannot take a name a later line spells out.
        explicit = {
            record.name if record.name is not None else record.outputs[0][0]
            for record in records
            if record.name is not None or record.outputs
        }
        for record in records:
            line = _Line(record.line, record.source, [])
            name = record.name if record.name is not None else (record.outputs[0][0] if record.outputs else None)
            if name is not None and graph.get_node(name) is not None:
                raise self.error(f"redefinition of node '@{name}'", record.name_col, line)
            if name is None:
                base = record.op.rsplit(".", 1)[-1].lower()
                name, k = base, 0
                while name in explicit or graph.get_node(name) is not None:
                    k += 1
                    name = f"{base}_{k}"
            node = graph.add_node(
                record.op,
                [],
                record.output_types,
                name=name,
                output_names=[n for n, _ in record.outputs],
                params=record.params,
            )
            indent = len(record.source) - len(record.source.lstrip())
            node.loc = Location(self.filename, record.line, indent + 1, record.source)
            for key, (value, col, key_col) in record.annotations.items():
                kind = ANNOTATIONS.get(key)
                if kind is None:
                    known = ", ".join(sorted(ANNOTATIONS))
                    raise self.error(f"unknown annotation '{key}' (known: {known})", key_col, line)
                try:
                    node.set_annotation(key, kind.from_generic(value))
                except ValueError as exc:
                    raise self.error(str(exc), col, line) from None
            nodes.append(node)
        for record, node in zip(records, nodes, strict=True):
            line = _Line(record.line, record.source, [])
            for k, ((value_name, col), (declared, type_col)) in enumerate(
                zip(record.inputs, record.input_types, strict=True)
            ):
                value = graph.get_value(value_name)
                if value is None:
                    raise self.error(f"use of undefined value '%{value_name}'", col, line)
                if value.type != declared:
                    raise self.error(
                        f"operand #{k} '%{value_name}' has type {value.type}, but the op declares {declared}",
                        type_col,
                        line,
                    )
                node.add_input(value)
            for control_name, col in record.controls:
                control = graph.get_node(control_name)
                if control is None:
                    raise self.error(f"control input '@{control_name}' is not a node of this graph", col, line)
                if control in node.control_inputs:
                    raise self.error(f"control input '@{control_name}' is listed twice", col, line)
                node.add_control_input(control)


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse `.gir` text into a :class:`~graphir.ir.Module`.

    Raises:
        ParseError: with the file, line, column and source line of the first problem.
    """
    with gc_paused():
        return _Parser(text, filename).parse()
