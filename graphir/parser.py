"""The `.gir` parser: reads what :mod:`graphir.printer` writes, with caret diagnostics.

The format is line-oriented (one op per line). Node lines as the printer writes them are read by
the fast paths (the commonest by the compiled loop of ``graphir/_girtext.c`` when it is built, the
common shape inline in :meth:`_Parser._read_plain_lines`, the others by :mod:`graphir.fastline`: a
few regular expressions per line, no tokens); every other line, and any line the fast paths
decline, is tokenized (:mod:`graphir.lexer`) and read by recursive
descent (values: :mod:`graphir.parse_values`). Each node is built when its line is read
(:class:`_Body`). Values may be used before the line that defines them (so a cyclic graph can be
read and reported by the verifier rather than rejected as a parse error): such an operand is
connected when its value's line is read, and one never defined is reported after the last line.
Errors raise :class:`~graphir.errors.ParseError` with ``file:line:col`` and the source line; an
error found after a fast path read a line re-reads that line with tokens for its column.
"""

# The parser builds the graph through its private tables (the checked API's cost per node of a
# million-node text) and shares the lexer's, fast path's and IR's private patterns and constants.
# pyright: reportPrivateUsage=false
from __future__ import annotations

import re
from collections.abc import Container
from sys import intern
from typing import Any, NamedTuple, cast

from graphir.annotations import ANNOTATIONS, DEFAULT_KIND, Cost, Mem
from graphir.attributes import BYTE_UNITS, DenseTensor
from graphir.errors import Location, ParseError, SourceLines
from graphir.fastline import (
    _ANNOTATION_LIST,
    _DTYPES,
    _HEAD_TYPES,
    AnnotationMatch,
    AnnotationRead,
    LineScanner,
    shape_reader,
    typed_annotations,
)
from graphir.gcpause import gc_paused
from graphir.ir import _NO_NODES, ExternalTensor, Graph, Module, Node, Value, ValueKind
from graphir.lexer import tokenize
from graphir.native import girtext
from graphir.parse_values import _Line, _ValueGrammar, dense_from_values
from graphir.regions import REGION_SLOT, Region
from graphir.types import TensorType

_NATIVE = girtext
"""The compiled reader (graphir/_girtext.c) of the commonest node lines, or None (not built)."""


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
        # The text is read in place: line ``line_no + 1`` starts at ``pos``, and no list of line
        # strings is made (the lines of a large graph are matched where they stand).
        if "\r" in text:
            text = "\n".join([line.rstrip("\r") for line in text.split("\n")])
        self.text = text
        self.source = SourceLines(filename, text)  # the nodes' locations, made when asked for
        self.line_no: int = 0
        self.pos = 0  # where the next line starts; past len(text) at the end
        self.cur: _Line | None = None
        self.type_cache: dict[str, TensorType] = {}
        self.scanner = LineScanner(self.type_cache, self._cached_type, dense_from_values)

    # ----------------------------------------------------------------- diagnostics
    def error(self, message: str, col: int | None = None, line: _Line | None = None) -> ParseError:
        line = line or self.cur
        if line is None:
            return ParseError(message, Location(self.filename, len(self.source.lines), 1))
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

    def _line_at_pos(self) -> tuple[str, int]:
        """The text of the line starting at :attr:`pos`, and where it ends (its newline or the end)."""
        end = self.text.find("\n", self.pos)
        if end < 0:
            end = len(self.text)
        return self.text[self.pos : end], end

    def next_line(self) -> _Line | None:
        """Advance to the next line holding tokens; ``None`` at end of file."""
        while self.pos <= len(self.text):
            text, end = self._line_at_pos()
            self.pos = end + 1
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
        if (tok := self.peek()) is not None and tok.text == "{" and self._brace_is_attributes():
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
            elif value is REGION_SLOT:
                raise self.error(f"module attribute '{key}' cannot be a region", col, line)
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

    def parse_graph(self, region: str | None = None) -> Graph:
        """A ``graph @name(...) { ... }`` block: the module's graph, or the graph of the region param ``region``."""
        if self.next_line() is None:
            raise self.error("expected 'graph @name(...) {'")
        self.expect("graph", "'graph'")
        name_tok = self.expect_kind("aname", "the graph name '@name'")
        graph = Graph(self.sigil_name(name_tok))
        if region is not None and graph.name != region:
            raise self.error(f"expected the graph of region '{region}', found '@{graph.name}'", name_tok.col)
        defined = graph._values  # every value name defined so far: arguments, constants, results
        self.expect("(")
        if not self.accept(")"):
            while True:
                tok = self.expect_kind("pname", "an argument '%name'")
                arg_name = self.sigil_name(tok)
                self.expect(":", "':' before the argument type")
                arg_type = self.parse_type()
                if arg_name in defined:
                    raise self.error(f"redefinition of '%{arg_name}'", tok.col)
                graph.add_input(arg_name, arg_type)
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("{", "'{' opening the graph body")
        self.expect_end()
        body = _Body(self, graph)
        outputs: list[tuple[str, int]] | None = None
        return_line: _Line | None = None
        size = len(self.text)
        scan = self.scanner.scan_node_line
        while True:
            if outputs is None and self.pos <= size:
                # Canonical node lines without params are read and built in one loop; other node
                # lines the fast path accepts come back as tuples; the rest go through the tokens.
                self._read_plain_lines(body)
                if self.pos <= size:
                    text, end = self._line_at_pos()
                    fast = scan(text, defined)
                    if fast is not None:
                        self.pos = end + 1
                        self.line_no += 1
                        body.add(fast + (self.line_no, text))  # a plain tuple: see _Body.add
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
                body.resolve(self.parse_constant(graph))
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
                body.add(self.parse_node(defined))
        body.finish()
        for value_name, col in outputs or []:
            value = graph.get_value(value_name)
            if value is None:
                raise self.error(f"use of undefined value '%{value_name}'", col, return_line)
            graph.outputs.append(value)
        return graph

    def _read_plain_lines(self, body: _Body) -> None:
        """Read and build node lines from ``self.line_no`` while they have the common shape.

        The common shape is a canonical node line (as the printer writes it) with results, a
        dialect-qualified op, no params and built-in annotations only (read by
        :func:`~graphir.fastline.typed_annotations`, as the general fast path reads them): the
        lines of a large graph. The first line of any other shape, or with
        anything to report, stops the loop unread: the general path reads it (and reports).
        What :meth:`LineScanner.scan_node_line` and :meth:`_Body.add` do for such a line happens
        here inline (the annotations apart), in the same order, since this loop runs once per node.
        """
        text = self.text
        size = len(text)
        find = text.find
        pos = self.pos
        number: int = self.line_no
        graph = body.graph
        values = graph._values
        node_names = graph._node_names
        cache = self.type_cache
        make_type = self.scanner._type
        add_node = graph.add_node_unchecked
        intern_op = intern
        connect = body.connect
        source = self.source
        head_types_match, annotations_match = _HEAD_TYPES.match, _ANNOTATION_LIST.match
        cache_get = cache.get
        # The annotation lists of a large graph come in a few shapes (which keys, which mem
        # fields): the last two shapes seen are tried first, each by its own pattern, which
        # matches a strict subset of the general one (fastline.shape_pattern), and read by its
        # own reader (same annotations as typed_annotations of the general groups).
        last_match, last_read = other_match, other_read = _NO_SHAPE
        keys = body.keys
        # The compiled loop reads what it can from each position; the line it stops at is read
        # below (or stops this loop too), then it goes on from the next.
        native = body.native

        def read_new_shape(match: re.Match[str]) -> dict[str, Any] | None:
            # The first line of a shape: its keys are those of every later line of that shape.
            annotations = _general_groups(match)
            if annotations is not None:
                keys.update(annotations)
            return annotations

        try:
            while pos <= size:
                if native is not None:
                    pos, number = native(text, pos, number)
                    if pos > size:
                        break
                # Each line is matched in the text, between its start and its end (``\Z`` matches
                # there), with no string of its own.
                eol = find("\n", pos)
                if eol < 0:
                    eol = size
                # Two matches rather than one: a pattern with fewer groups saves fewer marks when
                # it backtracks (one pattern for the whole line costs about 1.6 times as much).
                head_types = head_types_match(text, pos, eol)
                if head_types is None:
                    break
                head_end = head_types.end()
                tail = last_match(text, head_end, eol)
                if tail is not None:
                    read = last_read
                else:
                    tail = other_match(text, head_end, eol)
                    if tail is not None:
                        last_match, last_read, other_match, other_read = other_match, other_read, last_match, last_read
                        read = last_read
                    else:
                        tail = annotations_match(text, head_end, eol)
                        if tail is None:
                            break
                        other_match, other_read = last_match, last_read
                        last_match, last_read = shape_reader(tail.groups())
                        read = read_new_shape
                results_text, op, name, operands_text, controls_text, inputs_text, output_text, outputs_text = (
                    head_types.groups()
                )
                if not results_text or "." not in op:
                    break
                annotations = read(tail)
                if annotations is None:
                    break  # a value the token parser reads or reports
                if output_text is not None:
                    # One result type: one result ("%name", whose characters include no comma).
                    if "," in results_text:
                        break
                    results = [results_text[1:]]
                    result_types = [cache_get(output_text) or make_type(output_text)]
                    if result_types[0] is None or results[0] in values:
                        break
                else:
                    results = results_text.replace("%", "").split(", ")
                    result_types = [cache_get(piece) or make_type(piece) for piece in outputs_text.split(", ")]
                    if len(result_types) != len(results) or not all(result_types) or len(set(results)) != len(results):
                        break
                    if any(result in values for result in results):
                        break
                if operands_text:
                    operands = operands_text.replace("%", "").split(", ")
                    if not inputs_text:
                        break
                    # An operand's type was mostly read on its value's line: look-ups first.
                    operand_types = list(map(cache_get, inputs_text.split(", ")))
                    if not all(operand_types):
                        operand_types = [cache_get(piece) or make_type(piece) for piece in inputs_text.split(", ")]
                        if not all(operand_types):
                            break
                    if len(operand_types) != len(operands):
                        break
                elif inputs_text:
                    break
                else:
                    operands = operand_types = []
                node_name = name if name is not None else results[0]
                if node_name in node_names:
                    break  # the general path reports the redefinition with its column
                number += 1
                # One string per op name (a graph repeats a few hundred): less memory, and the
                # later look-ups by op (registries, counts) hash each one once.
                # all() above: neither list holds a None.
                result_types = cast(list[TensorType], result_types)
                operand_types = cast(list[TensorType], operand_types)
                node = add_node(intern_op(op), node_name, results, result_types, {}, annotations, source, number)
                controls = controls_text.replace("@", "").split(", ") if controls_text else None
                connect(node, operands, operand_types, controls, number)
                pos = eol + 1
        finally:
            # The first line not read here (the general path reads it).
            self.line_no = number
            self.pos = pos

    def parse_constant(self, graph: Graph) -> Value:
        """A ``const`` line after its keyword; returns the new constant."""
        tok = self.expect_kind("pname", "the constant '%name'")
        name = self.sigil_name(tok)
        if name in graph._values:
            raise self.error(f"redefinition of '%{name}'", tok.col)
        self.expect(":", "':' before the constant type")
        const_type = self.parse_type()
        self.expect("=", "'=' before the constant data")
        data_tok = self.peek()
        if data_tok is not None and data_tok.kind == "ident" and data_tok.text == "external":
            self.take()
            constant = graph.add_constant(name, const_type, ExternalTensor(const_type))
        else:
            value = self.parse_value()
            if not isinstance(value, DenseTensor):
                raise self.error("constant data must be dense<...> or external", data_tok.col if data_tok else None)
            if value.type != const_type:
                raise self.error(
                    f"constant data type {value.type} does not match the declared {const_type}",
                    data_tok.col if data_tok else None,
                )
            constant = graph.add_constant(name, const_type, value)
        self.expect_end()
        return constant

    def parse_node(self, defined: Container[str], reread: bool = False) -> _NodeRecord:
        """A node line and the region graphs that follow it; ``defined`` holds the value names defined earlier.

        ``reread``: the line is read again for its columns only (its regions were read already).
        """
        assert self.cur is not None
        outputs: list[tuple[str, int]] = []
        named_here: set[str] = set()
        tok = self.peek()
        if tok is not None and tok.kind == "pname":
            while True:
                tok = self.expect_kind("pname", "a result '%name'")
                name = self.sigil_name(tok)
                if name in defined or name in named_here:
                    raise self.error(f"redefinition of '%{name}'", tok.col)
                named_here.add(name)
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
        if (tok := self.peek()) is not None and tok.kind == "aname":
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
        if (tok := self.peek()) is not None and tok.text == "{":
            params = self.parse_dict()
        self.expect(":", "':' before the op type")
        self.expect("(", "'(' opening the operand types")
        input_types: list[tuple[TensorType, int]] = []
        if not self.accept(")"):
            while True:
                col = tok.col if (tok := self.peek()) else 0
                input_types.append((self.parse_type(), col))
                if self.accept(")"):
                    break
                self.expect(",", "',' or ')'")
        self.expect("->", "'->' before the result types")
        output_types: list[TensorType] = []
        types_col = tok.col if (tok := self.peek()) else None
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
        brace = self.peek()
        opens_regions = self.accept("{")
        self.expect_end()
        slots = [key for key, value in params.items() if value is REGION_SLOT]
        if slots and not opens_regions:
            raise self.error(f"param '{slots[0]}' is a region, but the line does not end with '{{' opening the regions")
        if opens_regions and not slots:
            raise self.error("'{' opens regions, but no param is a region", brace.col if brace else None)
        line_number, line_text = self.cur.number, self.cur.text
        if slots and not reread:
            for key in slots:
                params[key] = Region(self.parse_graph(region=key))
            if self.next_line() is None:
                raise self.error("expected '}' closing the regions")
            self.expect("}", "'}' closing the regions")
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
            {key: value for key, (value, _, _) in annotations.items()}, line_number, line_text, cols,
        )  # fmt: skip

    def _cols(self, record: _NodeRecord) -> tuple[_Cols, _Line]:
        """The columns of a node line, re-reading it with the tokens when the fast path read it."""
        line = _Line(record.line, record.source, [])
        if record.cols is not None:
            return record.cols, line
        saved = self.cur
        self.cur = self._tokenize(record.line, record.source)
        try:
            cols = self.parse_node(set[str](), reread=True).cols
        finally:
            self.cur = saved
        assert cols is not None
        return cols, line


class _Body:
    """The nodes of a graph body, built line by line as the parser reads them.

    Nodes are created in line order (the graph's insertion order). An operand whose value is
    defined on an earlier line is connected at once; one defined later (a forward use: the text
    may be cyclic, for the verifier to report) waits in :attr:`pending` until its value is
    defined, so every use list still lists its uses in line order. Control inputs name nodes,
    which may come later too: they are connected in :meth:`finish`, in line order. A node line
    without any name (no results, no ``@name``) is named in :meth:`finish` too, after every name
    the text spells out is known, so it cannot take one of them.

    Errors keep the order of a parser that reads every line before building: problems with
    operands and control inputs are reported after every line was read, the earliest line first.
    """

    def __init__(self, parser: _Parser, graph: Graph):
        self.parser = parser
        self.graph = graph
        self.values = graph._values  # the graph's own table (read by connect once per node)
        self.keys: set[str] = set()  # the annotation keys of the nodes added unchecked
        self.pending: dict[str, list[tuple[Node, int, TensorType, int]]] = {}
        self.controls: list[tuple[Node, list[str], int]] = []
        self.nameless: list[Node] = []
        self.mismatch: tuple[int, int, Value, TensorType] | None = None
        # The compiled plain-line loop (:data:`_NATIVE`) bound to this body's graph and tables;
        # None when the module is not built, or when it refuses the IR classes (their slots are
        # not the ones it sets: it is older or newer than ``graphir/ir.py``).
        self.native: Any = None
        if _NATIVE is not None:
            self.native = _NATIVE.make_reader(
                graph._values, graph._node_names, graph._nodes, graph._seq, parser.type_cache,
                parser.scanner._type, parser.source, self.pending, self.keys, self.controls, graph,
                ValueKind.RESULT, _NO_NODES, DEFAULT_KIND, BYTE_UNITS, _DTYPES, Node, Value, Cost, Mem,
                TensorType,
            )  # fmt: skip

    def connect(
        self, node: Node, operands: list[str], operand_types: list[TensorType], controls: list[str] | None,
        line_no: int,
    ) -> None:  # fmt: skip
        """Connect ``node``'s operands (the defined ones now), then its newly defined results."""
        values = self.values
        inputs = node.inputs
        k = 0
        for value_name in operands:
            value = values.get(value_name)
            declared = operand_types[k]
            if value is None:
                self.pending.setdefault(value_name, []).append((node, k, declared, line_no))
                inputs.append(cast(Value, None))  # a placeholder, set when the value is defined
            else:
                value_type = value.type
                if value_type is not declared and value_type != declared:
                    self._mismatch(line_no, k, value, declared)
                inputs.append(value)
                value.uses.append((node, k))
            k += 1
        if controls:
            self.controls.append((node, controls, line_no))
        if self.pending:
            for value in node.outputs:
                self.resolve(value)

    def resolve(self, value: Value) -> None:
        """Connect the operands that used ``value`` before the line defining it."""
        waiting = self.pending.pop(value.name, None) if self.pending else None
        if not waiting:
            return
        for node, k, declared, line_no in waiting:
            if value.type is not declared and value.type != declared:
                self._mismatch(line_no, k, value, declared)
            node.inputs[k] = value
            value.uses.append((node, k))

    def _mismatch(self, line_no: int, k: int, value: Value, declared: TensorType) -> None:
        if self.mismatch is None or (line_no, k) < self.mismatch[:2]:
            self.mismatch = (line_no, k, value, declared)

    def add(self, record: _NodeRecord | tuple[Any, ...]) -> None:
        """Build the node of a line the general fast path (a plain tuple) or the tokens read.

        Fast-path tuples are the fields of :class:`_NodeRecord` without ``cols`` (cheaper to make
        and unpack, turned into a record only for a diagnostic); they carry typed annotations and
        names it checked, so their nodes go through :meth:`~graphir.ir.Graph.add_node_unchecked`,
        the others through the checked API.
        """
        parser, graph = self.parser, self.graph
        node_names = graph._node_names
        if type(record) is tuple:
            op, name, outputs, operands, controls, params, operand_types, output_types, annotations, line_no, source = (
                record
            )
            if name is None and outputs:
                name = outputs[0]
            if name is not None:
                if name in node_names:
                    cols, line = parser._cols(_NodeRecord._make((*record, None)))
                    raise parser.error(f"redefinition of node '@{name}'", cols.name, line)
                node = graph.add_node_unchecked(
                    op, name, outputs, output_types, params, annotations, parser.source, line_no
                )
                self.keys.update(annotations)
                self.connect(node, operands, operand_types, controls, line_no)
                return
            record = _NodeRecord._make((*record, None))  # nameless: named by the path below
        assert isinstance(record, _NodeRecord)
        name = record.name if record.name is not None else (record.outputs[0] if record.outputs else None)
        if name is not None and name in node_names:
            cols, line = parser._cols(record)
            raise parser.error(f"redefinition of node '@{name}'", cols.name, line)
        source = record.source
        indent = 4 if source[:5] == "    %" else len(source) - len(source.lstrip())
        loc = Location(parser.filename, record.line, indent + 1, source)
        node = graph.add_node(
            record.op, (), record.output_types, name=name or " nameless", output_names=record.outputs,
            params=record.params,
        )  # fmt: skip
        if name is None:
            del node_names[node.name]  # named in finish(), once every spelled-out name is known
            self.nameless.append(node)
        node.loc = loc
        if record.cols is None:  # the fast path made the typed values
            for key, value in record.annotations.items():
                node.set_annotation(key, value)
        else:
            for key, value in record.annotations.items():
                kind = ANNOTATIONS.get(key)
                if kind is None:
                    cols, line = parser._cols(record)
                    known = ", ".join(sorted(ANNOTATIONS))
                    raise parser.error(f"unknown annotation '{key}' (known: {known})", cols.annotations[key][1], line)
                try:
                    node.set_annotation(key, kind.from_generic(value))
                except ValueError as exc:
                    cols, line = parser._cols(record)
                    raise parser.error(str(exc), cols.annotations[key][0], line) from None
        self.connect(node, record.inputs, record.input_types, record.controls, record.line)

    def finish(self) -> None:
        """Name the nameless nodes, report unconnected operands, connect the control inputs."""
        parser, graph = self.parser, self.graph
        node_names = graph._node_names
        for node in self.nameless:
            base = node.op.rsplit(".", 1)[-1].lower()
            name, k = base, 0
            while name in node_names:
                k += 1
                name = f"{base}_{k}"
            node.name = name
            node_names[name] = node
        # The first operand problem: a use of a value no line defines, or a type mismatch.
        first: tuple[int, int] | None = self.mismatch[:2] if self.mismatch is not None else None
        undefined: tuple[int, int, str] | None = None
        for value_name, waiting in self.pending.items():
            for _, k, _, line_no in waiting:
                if undefined is None or (line_no, k) < undefined[:2]:
                    undefined = (line_no, k, value_name)
        if undefined is not None and (first is None or undefined[:2] < first):
            first = undefined[:2]
        for node, controls, line_no in self.controls:
            if first is not None and first[0] <= line_no:
                break  # an operand problem comes first (on the same line too: operands come first)
            listed: dict[Node, None] = dict.fromkeys(node.control_inputs)
            for k, control_name in enumerate(controls):
                control = graph.get_node(control_name)
                if control is None or control in listed:
                    cols, line = parser._cols(self._source_record(line_no))
                    twice = control is not None
                    detail = "is listed twice" if twice else "is not a node of this graph"
                    raise parser.error(f"control input '@{control_name}' {detail}", cols.controls[k], line)
                listed[control] = None
            node.add_control_inputs(listed)  # one call: a sink may wait on thousands of nodes
        if first is not None:
            if undefined is not None and undefined[:2] == first:
                line_no, k, value_name = undefined
                cols, line = parser._cols(self._source_record(line_no))
                raise parser.error(f"use of undefined value '%{value_name}'", cols.inputs[k], line)
            assert self.mismatch is not None
            line_no, k, value, declared = self.mismatch
            cols, line = parser._cols(self._source_record(line_no))
            raise parser.error(
                f"operand #{k} '%{value.name}' has type {value.type}, but the op declares {declared}",
                cols.input_types[k],
                line,
            )
        graph.touch_all(self.keys)
        graph._uses_exact_version = graph._version  # every use was appended with its operand

    def _source_record(self, line_no: int) -> _NodeRecord:
        """A record standing for node line ``line_no`` by its number and text alone (columns: re-read)."""
        return _NodeRecord("", None, [], [], [], {}, [], [], {}, line_no, self.parser.source.line(line_no), None)


def _no_match(text: str, pos: int, endpos: int) -> None:
    """The annotation-list match of no shape (the plain-line loop's start)."""
    return None


def _general_groups(match: re.Match[str]) -> dict[str, Any] | None:
    """:func:`~graphir.fastline.typed_annotations` of a :data:`~graphir.fastline._ANNOTATION_LIST` match."""
    return typed_annotations(match.groups())


_NO_SHAPE: tuple[AnnotationMatch, AnnotationRead] = (_no_match, _general_groups)  # no match: never read


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse `.gir` text into a :class:`~graphir.ir.Module`.

    Raises:
        ParseError: with the file, line, column and source line of the first problem.
    """
    with gc_paused():
        return _Parser(text, filename).parse()
