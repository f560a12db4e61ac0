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

Control dependencies print after the operands as ``ctrl(@node, ...)``. A node holding regions
(:mod:`graphir.regions`) prints ``region`` for each region param and ends its line with ``{``; its
region graphs follow, indented, and a line ``}`` closes them. Nodes print in the graph
index's stable topological order, params in their stored order and
annotations sorted by key inside the trailing ``[...]``, so golden tests can match them alone. A
node's ``@name`` is printed only when it differs from its first result's name.

The node lines of a graph of :data:`PARALLEL_MIN_NODES` to :data:`AUTO_MAX_NODES` nodes are
formatted by two processes when two cores are available (``graphir-opt --jobs``): the later half in
a forked copy of this process, sent back through a pipe, so the text is the same bytes as one
process writes.
"""

# The node-line writer binds the memo tables of this module's text classes and reads the nodes'
# annotation tables directly (it runs once per node of a million-node graph).
# pyright: reportPrivateUsage=false
from __future__ import annotations

import contextvars
import functools
import io
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO, cast

from graphir.annotations import ANNOTATIONS, DEFAULT_KIND, Cost, Mem
from graphir.attributes import (
    DenseTensor,
    format_bytes,
    format_duration,
    format_key,
    format_string,
    format_value,
)
from graphir.gcpause import gc_paused
from graphir.hostcpu import available_cores
from graphir.ir import Graph, Module, Node, Value
from graphir.native import girtext
from graphir.regions import REGION_WORD, Region, node_regions
from graphir.types import TensorType

_NATIVE = girtext
"""The compiled writer (graphir/_girtext.c) of the commonest node lines, or None (not built)."""

_NATIVE_KEYS = frozenset({"colocate", "cost", "device", "finish", "group", "mem", "order", "start"})
"""The annotation keys the compiled writer formats (when their direct formatters are in force)."""

_BARE_NAME = re.compile(r"^[A-Za-z0-9_.$#/-]+$")


def format_name(name: str) -> str:
    """A value/node/module name: bare when it is simple, quoted otherwise."""
    return name if _BARE_NAME.match(name) else format_string(name)


# ---------------------------------------------------------------- annotation text, fast paths
# Each built-in annotation has a direct formatter that writes exactly what
# ``format_value(kind.to_generic(value))`` writes, without building the generic value first
# (``Duration``/``ByteSize`` objects and an ``isinstance`` chain per item). Keys registered by
# plugins, and values of unexpected types, take the generic path.


def _cost_text(cost: Cost) -> str:
    times = cost.times
    if len(times) == 1 and times[0][0] == DEFAULT_KIND:
        return format_duration(times[0][1])
    per_kind = dict(times)  # as _cost_to_generic: a repeated kind keeps its last time
    return "{" + ", ".join(f"{format_key(k)} = {format_duration(v)}" for k, v in per_kind.items()) + "}"


def _mem_text(mem: Mem) -> str:
    parts: list[str] = []
    if mem.persistent:
        parts.append("persistent = " + format_bytes(mem.persistent))
    if mem.activation:
        parts.append("activation = " + format_bytes(mem.activation))
    if mem.temporary:
        parts.append("temporary = " + format_bytes(mem.temporary))
    return "{" + ", ".join(parts) + "}"


def _int_text(value: Any) -> str:
    return str(value) if type(value) is int else format_value(value)


def _seconds_text(value: Any) -> str:
    return format_duration(value) if type(value) is float else format_value(ANNOTATIONS["start"].to_generic(value))


def _affinity_text(value: tuple[str, ...]) -> str:
    return "[" + ", ".join(format_string(kind) for kind in value) + "]"


_FAST_TEXT: dict[str, tuple[object, Callable[[Any], str]]] = {
    key: (ANNOTATIONS[key], text)
    for key, text in (
        ("cost", _cost_text),
        ("mem", _mem_text),
        ("group", _int_text),
        ("order", _int_text),
        ("device", format_string),
        ("colocate", format_string),
        ("start", _seconds_text),
        ("finish", _seconds_text),
        ("affinity", _affinity_text),
    )
}
"""Key -> (the built-in declaration it is valid for, its direct formatter)."""


def _annotation_text(key: str, value: Any, strings: dict[str, str] | None = None) -> str:
    kind = ANNOTATIONS[key]
    fast = _FAST_TEXT.get(key)
    if fast is None or fast[0] is not kind:
        return format_value(kind.to_generic(value))
    if strings is not None and type(value) is str:
        # device and colocate strings repeat on many nodes: quote each once per print.
        text = strings.get(value)
        if text is None:
            text = strings[value] = format_string(value)
        return text
    return fast[1](value)


def format_annotations(node: Node, strings: dict[str, str] | None = None) -> str:
    """``[key = value, ...]`` with keys sorted, or ``""`` when the node has none."""
    annotations = node.annotations
    if not annotations:
        return ""
    return (
        "["
        + ", ".join(f"{key} = {_annotation_text(key, annotations[key], strings)}" for key in sorted(annotations))
        + "]"
    )


class _AnnotationText:
    """The ``" [key = value, ...]"`` functions of one print (one per key tuple), and its table of direct formatters.

    The table holds the built-in keys whose registered declaration is still the built-in one
    (checked once per print, not per node); quoted strings (devices, colocation classes) are
    memoised, as they repeat on many nodes.
    """

    def __init__(self) -> None:
        self._direct = {key: text for key, (kind, text) in _FAST_TEXT.items() if ANNOTATIONS.get(key) is kind}
        self._strings: dict[str, str] = {}
        self._plans: dict[tuple[str, ...], Callable[[dict[str, Any]], str]] = {}
        for key in ("device", "colocate"):
            if key in self._direct:
                self._direct[key] = self._quoted

    def _quoted(self, value: Any) -> str:
        if type(value) is not str:
            return format_string(value)
        text = self._strings.get(value)
        if text is None:
            text = self._strings[value] = format_string(value)
        return text

    def _plan(self, keys: tuple[str, ...]) -> Callable[[dict[str, Any]], str]:
        """The ``" [key = value, ...]"`` function for one key tuple (keys sorted in the text).

        It is compiled once per key tuple as one expression (literal pieces and one formatter
        call per key), so a node costs a call per annotation and one string build, not a list,
        a join and a lookup of the key's formatter per annotation.
        """
        namespace: dict[str, Any] = {}
        pieces: list[str] = []
        for number, key in enumerate(sorted(keys)):
            text = self._direct.get(key)
            if text is None:
                text = functools.partial(_annotation_text, key)
            namespace[f"format_{number}"] = text
            namespace[f"key_{number}"] = key
            separator = " [" if number == 0 else ", "
            # The literal text as the inside of a double-quoted literal (JSON's escapes of quotes,
            # backslashes and control characters are Python's; other characters stay as they are,
            # as a \u escape pair would not make one astral character), braces doubled for the f-string.
            literal = (
                json.dumps(separator + key + " = ", ensure_ascii=False)[1:-1].replace("{", "{{").replace("}", "}}")
            )
            pieces.append(f"{literal}{{format_{number}(annotations[key_{number}])}}")
        # One f-string builds the text in one step (a chain of + makes a string per piece).
        source = 'def plan(annotations):\n    return f"' + "".join(pieces) + ']"\n'
        exec(source, namespace)  # noqa: S102  (the source is built from the sorted keys' escaped text above)
        plan = self._plans[keys] = namespace["plan"]
        return plan


class _TypeText:
    """Memoised ``str(TensorType)``: real graphs repeat a few hundred types thousands of times.

    Keyed by object identity (hashing an attrs type walks its shape and hashes an enum in Python);
    the instance keeps every type it has seen alive, so an identity is never reused while cached.
    """

    def __init__(self) -> None:
        self._by_id: dict[int, str] = {}
        self._alive: list[TensorType] = []

    def __call__(self, tensor_type: TensorType) -> str:
        text = self._by_id.get(id(tensor_type))
        if text is None:
            text = self._by_id[id(tensor_type)] = str(tensor_type)
            self._alive.append(tensor_type)
        return text


class _NameText:
    """Memoised ``"%" + format_name(name)`` for values (each is printed once defined, then per use)."""

    def __init__(self, sigil: str) -> None:
        self._sigil = sigil
        self._cache: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        text = self._cache.get(name)
        if text is None:
            text = self._cache[name] = self._sigil + format_name(name)
        return text


def print_node(node: Node, type_text: _TypeText | None = None) -> str:
    """One node as its `.gir` line (without indentation)."""
    return _line_printer(type_text or _TypeText(), _NameText("%"), _AnnotationText())(node)


def _line_printer(
    ttext: _TypeText, vtext: _NameText, atext: _AnnotationText, indent: str = "", end: str = ""
) -> Callable[[Node], str]:
    """A function printing one node line between ``indent`` and ``end``, with the memo tables bound as locals.

    It runs per node: the indentation and the line end are written by it (not by a wrapper, a
    call and two concatenations more per node), and the annotation plans are looked up here.
    """
    type_get = ttext._by_id.get
    name_get = vtext._cache.get
    plan_get = atext._plans.get

    def node_line(node: Node) -> str:
        # The pieces are made first and joined by one f-string (one string build per line).
        outputs = node.outputs
        inputs = node.inputs
        if len(outputs) == 1:
            first = outputs[0]
            head = name_get(first.name) or vtext(first.name)
            if first.name != node.name:
                head = f"{head} = {node.op} @{format_name(node.name)}"
            else:
                head = f"{head} = {node.op}"
            result_types = type_get(id(first.type)) or ttext(first.type)
        else:
            head = (", ".join([vtext(v.name) for v in outputs]) + " = " + node.op) if outputs else node.op
            if not outputs or outputs[0].name != node.name:
                head += " @" + format_name(node.name)
            result_types = "(" + ", ".join([ttext(v.type) for v in outputs]) + ")"
        if len(inputs) == 1:
            value = inputs[0]
            operands = name_get(value.name) or vtext(value.name)
            operand_types = type_get(id(value.type)) or ttext(value.type)
        else:
            operands = ", ".join([name_get(v.name) or vtext(v.name) for v in inputs])
            operand_types = ", ".join([type_get(id(v.type)) or ttext(v.type) for v in inputs])
        extra = ""
        if node.control_inputs:
            extra = " ctrl(" + ", ".join("@" + format_name(n.name) for n in node.control_inputs) + ")"
        regions = ""
        if node.params:
            params = node.params.items()
            extra += " {" + ", ".join(f"{format_key(k)} = {_param_text(v)}" for k, v in params) + "}"
            if any(type(v) is Region for v in node.params.values()):
                regions = _regions_text(node, indent)
        annotations = node._annotations
        if annotations:
            # Nodes of one graph carry a few distinct key sets (in a few insertion orders): the
            # sorted plan is made once per key tuple.
            keys = tuple(annotations)
            plan = plan_get(keys) or atext._plan(keys)
            types = f"({operand_types}) -> {result_types}"
            return f"{indent}{head}({operands}){extra} : {types}{plan(annotations)}{regions}{end}"
        return f"{indent}{head}({operands}){extra} : ({operand_types}) -> {result_types}{regions}{end}"

    writer = None
    if _NATIVE is not None:
        keys = frozenset(key for key in _NATIVE_KEYS if key in atext._direct)
        writer = _NATIVE.make_writer(Node, Value, Cost, Mem, ttext._by_id, ttext, DEFAULT_KIND, keys, indent, end)
    if writer is not None:
        # The commonest lines by the compiled writer, the others by node_line (the same bytes).
        write = writer.lines

        def lines(nodes: Sequence[Node]) -> str:
            return write(nodes, node_line)

        cast(_WithLines, node_line).lines = lines  # read by _lines_text
    return node_line


def _param_text(value: Any) -> str:
    """A param's text: ``region`` for a region (its graph follows the line), else its value."""
    return REGION_WORD if type(value) is Region else format_value(value)


def _regions_text(node: Node, indent: str) -> str:
    """`` {`` then each region graph of ``node`` (one level deeper than ``indent``) and ``}``."""
    buffer = io.StringIO()
    buffer.write(" {\n")
    for _, region in node_regions(node):
        print_graph(region.graph, buffer, indent + "  ")
    buffer.write(indent + "}")
    return buffer.getvalue()


def _print_constant(value: Value, ttext: _TypeText) -> str:
    data = value.const
    if isinstance(data, DenseTensor):
        body = format_value(data)
    else:
        body = "external"
    return f"const %{format_name(value.name)} : {ttext(value.type)} = {body}"


_CHUNK = 4096
"""Node lines joined per write: bounded memory for the text of a million-node graph."""


PRINT_JOBS: contextvars.ContextVar[int] = contextvars.ContextVar("graphir_print_jobs", default=0)
"""Processes that print the node lines of a large graph (``graphir-opt --jobs``); 0: automatic
(two when this process may use two cores or more)."""

PARALLEL_MIN_NODES = 20_000
"""Below this many nodes a graph is printed in this process (a fork costs more than it saves)."""

AUTO_MAX_NODES = 400_000
"""Above this many nodes the automatic choice prints in this process: both processes write the
reference counts of the objects they read, so every page of the heap either touches is copied
after the fork. On this project's 2-core machine (``graphir-opt s.gir
--passes='fuse{algo=cpd-topo},place{algo=adjusting}' -o out.gir``, synthetic graphs, whole command,
``--jobs 2`` against ``--jobs 1``) the two processes took 0.95 of the wall time at 100k nodes and
0.94 at 300k, but 1.00 at 600k and 1.05 at 1M, where the system time grew by 2.2 and 8.4 s.
An explicit ``--jobs`` is obeyed at any size."""


def print_jobs(num_nodes: int) -> int:
    """How many processes print ``num_nodes`` node lines: :data:`PRINT_JOBS`, or automatic.

    One unless the graph has :data:`PARALLEL_MIN_NODES` nodes or more, the platform has
    ``os.fork``, and this process runs no other thread (a forked child gets only the calling
    thread, and a lock another thread held would stay held in it). The automatic choice is one
    above :data:`AUTO_MAX_NODES` nodes too.
    """
    if num_nodes < PARALLEL_MIN_NODES or not hasattr(os, "fork") or threading.active_count() > 1:
        return 1
    jobs = PRINT_JOBS.get()
    if jobs <= 0:
        jobs = min(2, len(available_cores())) if num_nodes <= AUTO_MAX_NODES else 1
    return max(1, min(jobs, num_nodes // (PARALLEL_MIN_NODES // 2)))


class _WithLines(Protocol):
    """A node-line function that also writes many lines at once (by the compiled writer)."""

    lines: Callable[[Sequence[Node]], str]


def _lines_text(nodes: Sequence[Node], line: Callable[[Node], str]) -> str:
    """``line(node)`` of each node, joined (by the compiled writer when ``line`` has one: ``line.lines``)."""
    lines = getattr(line, "lines", None)
    if lines is not None:
        return lines(nodes)
    return "".join([line(node) for node in nodes])


def _write_lines(nodes: Sequence[Node], line: Callable[[Node], str], out: TextIO) -> None:
    """Write ``line(node)`` of each node, :data:`_CHUNK` lines per write."""
    for begin in range(0, len(nodes), _CHUNK):
        out.write(_lines_text(nodes[begin : begin + _CHUNK], line))


def _write_lines_forked(nodes: Sequence[Node], jobs: int, line: Callable[[Node], str], out: TextIO) -> None:
    """:func:`_write_lines` with the lines of ``jobs - 1`` later slices of ``nodes`` made in forked children.

    Each child gets a copy of this process (copy-on-write: nothing is serialised), formats its
    slice, sends the UTF-8 text through a pipe and ends with ``os._exit`` (no exit handlers, no
    flush of the buffers it inherited). This process formats the first slice meanwhile, writes it,
    then each child's text in slice order: the same bytes as one process writes. A slice whose
    child could not be forked, or failed (its exit status is not 0), is formatted here.
    """
    bounds = [len(nodes) * k // jobs for k in range(jobs + 1)]
    children: list[tuple[int, int, int, int]] = []  # (pid, read end, begin, end); pid -1: not forked
    for k in range(1, jobs):
        begin, end = bounds[k], bounds[k + 1]
        try:
            read_end, write_end = os.pipe()
        except OSError:  # out of descriptors: this slice is printed here
            children.append((-1, -1, begin, end))
            continue
        try:
            pid = os.fork()
        except OSError:  # no memory or no process slot for a copy: this slice is printed here
            os.close(read_end)
            os.close(write_end)
            children.append((-1, -1, begin, end))
            continue
        if pid == 0:  # the child: format, send, end without any teardown
            status = 1
            try:
                os.close(read_end)
                data = memoryview(_lines_text(nodes[begin:end], line).encode())
                while data:
                    data = data[os.write(write_end, data) :]
                status = 0
            finally:
                os._exit(status)
        os.close(write_end)
        children.append((pid, read_end, begin, end))
    texts: list[tuple[bytes | None, int, int]] = []
    try:
        _write_lines(nodes[: bounds[1]], line, out)
    finally:  # every child is waited for, whatever happened here
        for pid, read_end, begin, end in children:
            if pid < 0:
                texts.append((None, begin, end))
                continue
            with os.fdopen(read_end, "rb") as pipe:
                data = pipe.read()
            _, status = os.waitpid(pid, 0)
            texts.append((data if status == 0 else None, begin, end))
    for data, begin, end in texts:
        if data is not None:
            out.write(data.decode())
        else:
            _write_lines(nodes[begin:end], line, out)


def print_graph(graph: Graph, out: TextIO, indent: str = "  ") -> None:
    """Write ``graph`` as `.gir` text."""
    ttext = _TypeText()
    vtext = _NameText("%")
    inner = indent + "  "
    node_line = _line_printer(ttext, vtext, _AnnotationText(), inner, "\n")
    args = ", ".join(f"%{format_name(v.name)} : {ttext(v.type)}" for v in graph.inputs)
    out.write(f"{indent}graph @{format_name(graph.name)}({args}) {{\n")
    for value in graph.constants:
        out.write(inner + _print_constant(value, ttext) + "\n")
    nodes = graph.index().nodes
    with gc_paused():  # printing makes no reference cycles: no collector passes over a big graph
        jobs = print_jobs(len(nodes))
        if jobs > 1:
            _write_lines_forked(nodes, jobs, node_line, out)
        else:
            _write_lines(nodes, node_line, out)
    results = ", ".join("%" + format_name(v.name) for v in graph.outputs)
    out.write(f"{inner}return {results}\n".replace("return \n", "return\n"))
    out.write(f"{indent}}}\n")


def print_module(module: Module, out: TextIO | None = None) -> str:
    """Print ``module``; writes to ``out`` when given and returns the text otherwise."""
    text_buffer = None if out is not None else io.StringIO()
    buffer = out if out is not None else text_buffer
    assert buffer is not None, "one of the two is given"
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
    return "" if text_buffer is None else text_buffer.getvalue()
