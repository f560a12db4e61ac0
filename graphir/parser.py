"""The `.gir` parser: reads what :mod:`graphir.printer` writes, with caret diagnostics.

The format is line-oriented (one op per line). Node lines as the printer writes them are read by
the fast path (:mod:`graphir.fastline`: a few regular expressions per line, no tokens); every
other line, and any line the fast path declines, is tokenized (:mod:`graphir.lexer`) and read by
recursive descent (values: :mod:`graphir.parse_values`). Values may be used before the line that
defines them (so a cyclic graph can be read and reported by the verifier rather than rejected as
a parse error), so nodes are built once every line is read. Errors raise
:class:`~graphir.errors.ParseError` with ``file:line:col`` and the source line; an error found
while building a node whose line the fast path read re-reads that line with tokens for its column.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from graphir.annotations import ANNOTATIONS
from graphir.attributes import DenseTensor
from graphir.errors import Location, ParseError
from graphir.fastline import LineScanner
from graphir.gcpause import gc_paused
from graphir.ir import ExternalTensor, Graph, Module
from graphir.lexer import tokenize
from graphir.parse_values import _Line, _ValueGrammar, dense_from_values
from graphir.types import TensorType


class _Cols(NamedTuple):
    """Columns of a node line's parts, for diagnostics found after the line was read."""

    name: int
    inputs: list[int]
    controls: list[int]
    input_types: list[int]
    annotations: dict[str, tuple[int, int]]  # key -> (value column, key column)


class _NodeRecord(NamedTuple):
    """A node line, read; nodes are built once every line is read (operands may come later)."""

    op: str
    name: str | None
    outputs: list[str]
    inputs: list[str]
    controls: list[str]
    params: dict[str, Any]
    input_types: list[TensorType]
    output_types: list[TensorType]
    annotations: dict[str, Any]
    line: int
    source: str
    cols: _Cols | None  # None when the fast path read the line: re-read it for a column


class _Parser(_ValueGrammar):
    """The token parser: structure, diagnostics and node building (values: the base class)."""

    def __init__(self, text: str, filename: str):
        self.filename = filename
        # Only "\n" ends a line: str.splitlines would also split at U+2028 and friends, which may
        # appear (escaped by the printer, but raw in hand-written text) inside string literals.
        self.lines = [line.rstrip("\r") for line in text.split("\n")]
        self.line_no = 0
        self.cur: _Line | None = None
        self.type_cache: dict[str, TensorType] = {}
        self.scanner = LineScanner(self.type_cache, self._cached_type, dense_from_values)

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
        text = text.rstrip()
        tokens, pos = tokenize(text)
        if pos != len(text):
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
        defined: set[str] = set()
        if not self.accept(")"):
            while True:
                tok = self.expect_kind("pname", "an argument '%name'")
                arg_name = self.sigil_name(tok)
                self.expect(":", "':' before the argument type")
                arg_type = self.parse_type()
                if arg_name in defined:
                    raise self.error(f"redefinition of '%{arg_name}'", tok.col)
                defined.add(arg_name)
                graph.add_input(arg_name, arg_type)
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("{", "'{' opening the graph body")
        self.expect_end()
        records: list[_NodeRecord | tuple[Any, ...]] = []
        outputs: list[tuple[str, int]] | None = None
        return_line: _Line | None = None
        lines = self.lines
        scan = self.scanner.scan_node_line
        while True:
            if outputs is None and self.line_no < len(lines):
                # The fast path reads canonical node lines; every other line (and any line it
                # does not accept) goes through the tokens below.
                text = lines[self.line_no]
                fast = scan(text, defined)
                if fast is not None:
                    self.line_no += 1
                    defined.update(fast[2])
                    records.append(fast + (self.line_no, text))  # a plain tuple: see build_nodes
                    continue
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

    def parse_constant(self, graph: Graph, defined: set[str]) -> None:
        tok = self.expect_kind("pname", "the constant '%name'")
        name = self.sigil_name(tok)
        if name in defined:
            raise self.error(f"redefinition of '%{name}'", tok.col)
        defined.add(name)
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

    def parse_node(self, defined: set[str]) -> _NodeRecord:
        assert self.cur is not None
        outputs: list[tuple[str, int]] = []
        tok = self.peek()
        if tok is not None and tok.kind == "pname":
            while True:
                tok = self.expect_kind("pname", "a result '%name'")
                name = self.sigil_name(tok)
                if name in defined:
                    raise self.error(f"redefinition of '%{name}'", tok.col)
                defined.add(name)
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
        cols = _Cols(
            name_col,
            [col for _, col in inputs],
            [col for _, col in controls],
            [col for _, col in input_types],
            {key: (col, key_col) for key, (_, col, key_col) in annotations.items()},
        )
        return _NodeRecord(
            op_tok.text, node_name, [name for name, _ in outputs], [name for name, _ in inputs],
            [name for name, _ in controls], params, [t for t, _ in input_types], output_types,
            {key: value for key, (value, _, _) in annotations.items()}, self.cur.number, self.cur.text, cols,
        )  # fmt: skip

    def _cols(self, record: _NodeRecord) -> tuple[_Cols, _Line]:
        """The columns of a node line, re-reading it with the tokens when the fast path read it."""
        line = _Line(record.line, record.source, [])
        if record.cols is not None:
            return record.cols, line
        saved = self.cur
        self.cur = self._tokenize(record.line, record.source)
        try:
            cols = self.parse_node(set()).cols
        finally:
            self.cur = saved
        assert cols is not None
        return cols, line

    def build_nodes(self, graph: Graph, records: list[_NodeRecord | tuple[Any, ...]]) -> None:
        """Create the nodes of ``records`` in order, then connect operands and control inputs.

        Lines the fast path read come as plain tuples (the fields of :class:`_NodeRecord` without
        ``cols``: cheaper to make and unpack, and turned into a record only for a diagnostic);
        they carry typed annotations and names it checked, so their nodes go through
        :meth:`~graphir.ir.Graph.add_node_unchecked`; the others through the checked API.
        """
        nodes = []
        # Names the text gives (``@name`` or the first result) are reserved before any node is
        # created, so a node that names nothing cannot take a name a later line spells out.
        explicit: set[str] | None = None
        filename = self.filename
        annotation_kinds = ANNOTATIONS
        node_names = graph._node_names
        add_unchecked = graph.add_node_unchecked
        for position, record in enumerate(records):
            if type(record) is tuple:
                op, name, outputs, _, _, params, _, output_types, annotations, line_no, source = record
                if name is None and outputs:
                    name = outputs[0]
                if name is not None:
                    if name in node_names:
                        cols, line = self._cols(_NodeRecord(*record, None))
                        raise self.error(f"redefinition of node '@{name}'", cols.name, line)
                    indent = 4 if source[:5] == "    %" else len(source) - len(source.lstrip())
                    loc = Location(filename, line_no, indent + 1, source)
                    nodes.append(add_unchecked(op, name, outputs, output_types, params, annotations, loc))
                    continue
                record = records[position] = _NodeRecord(*record, None)  # nameless: named by the path below
            assert isinstance(record, _NodeRecord)
            name = record.name if record.name is not None else (record.outputs[0] if record.outputs else None)
            if name is not None and name in node_names:
                cols, line = self._cols(record)
                raise self.error(f"redefinition of node '@{name}'", cols.name, line)
            source = record.source
            indent = 4 if source[:5] == "    %" else len(source) - len(source.lstrip())
            loc = Location(filename, record.line, indent + 1, source)
            if name is None:
                if explicit is None:
                    explicit = {  # fields 1 and 2 of both record kinds: the name and the results
                        r[1] if r[1] is not None else r[2][0] for r in records if r[1] is not None or r[2]
                    }
                base = record.op.rsplit(".", 1)[-1].lower()
                name, k = base, 0
                while name in explicit or graph.get_node(name) is not None:
                    k += 1
                    name = f"{base}_{k}"
            node = graph.add_node(
                record.op, (), record.output_types, name=name, output_names=record.outputs, params=record.params
            )
            node.loc = loc
            nodes.append(node)
            if record.cols is None:  # the fast path made the typed values
                for key, value in record.annotations.items():
                    node.set_annotation(key, value)
                continue
            for key, value in record.annotations.items():
                kind = annotation_kinds.get(key)
                if kind is None:
                    cols, line = self._cols(record)
                    known = ", ".join(sorted(ANNOTATIONS))
                    raise self.error(f"unknown annotation '{key}' (known: {known})", cols.annotations[key][1], line)
                try:
                    node.set_annotation(key, kind.from_generic(value))
                except ValueError as exc:
                    cols, line = self._cols(record)
                    raise self.error(str(exc), cols.annotations[key][0], line) from None
        graph.touch_all()
        get_value = graph._values.get
        for record, node in zip(records, nodes, strict=True):
            inputs = node.inputs
            # Fields 3, 4 and 6 of both record kinds: operand names, control names, operand types.
            operand_types = record[6]
            for k, value_name in enumerate(record[3]):
                value = get_value(value_name)
                if value is None:
                    cols, line = self._cols(_as_record(record))
                    raise self.error(f"use of undefined value '%{value_name}'", cols.inputs[k], line)
                declared = operand_types[k]
                if value.type is not declared and value.type != declared:
                    cols, line = self._cols(_as_record(record))
                    raise self.error(
                        f"operand #{k} '%{value_name}' has type {value.type}, but the op declares {declared}",
                        cols.input_types[k],
                        line,
                    )
                inputs.append(value)
                value.uses.append((node, k))
            controls = record[4]
            if not controls:
                continue
            record = _as_record(record)
            for k, control_name in enumerate(controls):
                control = graph.get_node(control_name)
                if control is None:
                    cols, line = self._cols(record)
                    message = f"control input '@{control_name}' is not a node of this graph"
                    raise self.error(message, cols.controls[k], line)
                if control in node.control_inputs:
                    cols, line = self._cols(record)
                    raise self.error(f"control input '@{control_name}' is listed twice", cols.controls[k], line)
                node.add_control_input(control)
        graph.touch_all()
        graph._uses_exact_version = graph._version  # every use above was appended with its operand


def _as_record(record: _NodeRecord | tuple[Any, ...]) -> _NodeRecord:
    """A fast-path tuple as the record it stands for (``cols`` unknown: re-read when needed)."""
    return _NodeRecord(*record, None) if type(record) is tuple else record  # type: ignore[return-value]


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse `.gir` text into a :class:`~graphir.ir.Module`.

    Raises:
        ParseError: with the file, line, column and source line of the first problem.
    """
    with gc_paused():
        return _Parser(text, filename).parse()
