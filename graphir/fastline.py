"""The fast path of the `.gir` parser: node lines as the printer writes them, read without tokens.

A node line of a large module (``%y = onnx.Relu(%x) : (f32[8]) -> f32[8] [cost = 4us]``) is
matched by two compiled regular expressions (the head up to the control inputs, then the types)
with a small recursive scanner for the ``{params}`` and ``[annotations]`` values in between. It
accepts only canonical spacing and the constructs the printer emits; anything else (a comment,
other spacing, a quoted op, an ``opaque<...>`` value, an error of any kind) makes
:func:`scan_node_line` return ``None`` and the line goes through the token parser, which reads
every legal line and reports errors with their exact column. So for every line it accepts, the
fast path must produce what the token parser would: its regular expressions are built from the
token patterns of :mod:`graphir.lexer`, and a unit test compares both paths line by line.

Columns are not computed here. The parser keeps the source line and re-reads it with the token
parser when an error found later (an undefined operand, a bad annotation) needs a column.
"""

# The fast path reads with the token parser's own patterns (parse_values._STATIC_TYPE).
# pyright: reportPrivateUsage=false
from __future__ import annotations

import operator
import re
from collections.abc import Callable, Container
from typing import Any, cast

from graphir.annotations import ANNOTATIONS, DEFAULT_KIND, Cost, Mem
from graphir.attributes import BYTE_UNITS, ByteSize, DenseTensor, Duration, b64decode, seconds_from
from graphir.lexer import NAME_CHARS, NUMBER, STRING, TYPE, UNIT, unquote
from graphir.parse_values import _STATIC_TYPE
from graphir.types import DType, TensorType


def _possessive(pattern: str) -> str:
    r"""``pattern`` with ``*+?`` after a class or a group, and ``*+`` after ``\d``, made possessive.

    Only for the patterns of canonical lines here (:data:`_HEAD`, :data:`_TYPES`, the shape
    patterns), where every such repeat is followed by a character it cannot match: a name by ``,``,
    a space or a parenthesis; ``(?:, %name)*`` by ``)`` or `` = ``; a type's ``[^\]]*`` by ``]``; a
    string's characters by its closing quote (each piece of a string starts with a character other
    than ``"``); a digit run by a non-digit; and an optional part that matched starts with a
    character that what follows it cannot start with. The greedy choice is then the only one that
    can succeed, so the matches are the same (tests compare them), and the engine keeps no
    backtracking points (each node line about a fifth cheaper to match).
    """
    pattern = re.sub(r"(?<=[\])])([*+?])", r"\1+", pattern)
    return re.sub(r"(?<=\\d)([*+])", r"\1+", pattern)


_NAME = NAME_CHARS + "+"
_HEAD = re.compile(
    _possessive(
        rf" *(?:(?P<results>%{_NAME}(?:, %{_NAME})*) = )?"
        r"(?P<op>[A-Za-z_][A-Za-z0-9_.$]*)"
        rf"(?: @(?P<name>{_NAME}))?"
        rf"\((?P<operands>(?:%{_NAME}(?:, %{_NAME})*)?)\)"
        rf"(?: ctrl\((?P<controls>@{_NAME}(?:, @{_NAME})*)\))?"
    )
)
_TYPES = re.compile(
    _possessive(
        rf" : \((?P<inputs>(?:{TYPE}(?:, {TYPE})*)?)\) -> "
        rf"(?:(?P<output>{TYPE})|\((?P<outputs>(?:{TYPE}(?:, {TYPE})*)?)\))"
    )
)
_TYPE_LIST = re.compile(TYPE)
_HEAD_TYPES = re.compile(_HEAD.pattern + _TYPES.pattern)
"""A node line up to its annotations (groups: :data:`_HEAD`'s, then :data:`_TYPES`')."""


def _item(key: str, value: str) -> str:
    """An optional ``key = value`` item of a sorted annotation list (``, `` unless it comes first)."""
    return rf"(?:(?:(?<=\[)|, ){key} = {value})?"


_DURATION = rf"({NUMBER})(ns|us|ms|s)(?![A-Za-z0-9_])"
_BYTES = r"(\d+)(B|KiB|MiB|GiB|TiB)(?![A-Za-z0-9_])"
_MEM_FIELDS = ("persistent", "activation", "temporary")
_ITEMS: tuple[tuple[str, str], ...] = (
    ("affinity", rf"(\[(?:{STRING}(?:, {STRING})*)?\])"),
    ("colocate", f"({STRING})"),
    ("cost", _DURATION),
    ("device", f"({STRING})"),
    ("finish", _DURATION),
    ("group", r"(\d+)(?![0-9.eE])"),
    ("mem", ""),  # its fields: _MEM_FIELDS, each _BYTES
    ("order", r"(\d+)(?![0-9.eE])"),
    ("start", _DURATION),
)
"""The built-in annotations as the printer writes them, in key order: (key, value pattern)."""
_MEM_VALUE = r"\{(?!\})" + "".join(rf"(?:(?:(?<=\{{)|, ){field} = {_BYTES})?" for field in _MEM_FIELDS) + r"\}"
_ANNOTATIONS = r"(?: \[(?!\])" + "".join(_item(key, value or _MEM_VALUE) for key, value in _ITEMS) + r"\])?\Z"
"""The built-in annotations as the printer writes them (sorted keys, each at most once, a
default-only ``cost``, ``mem`` fields in declaration order), captured by one match; any other
annotation list (a per-kind cost, a plugin's key) goes through the value scanner."""


def _group_count(pattern: str) -> int:
    return re.compile(pattern).groups


def _presence_groups() -> tuple[int, ...]:
    """The first group (0-based) of every item of :data:`_ITEMS` (mem: of every field) in :data:`_ANNOTATIONS`."""
    firsts: list[int] = []
    group = 0
    for key, value in _ITEMS:
        for pattern in (_BYTES,) * len(_MEM_FIELDS) if key == "mem" else (value,):
            firsts.append(group)
            group += _group_count(pattern)
    return tuple(firsts)


_PRESENCE_GROUPS = _presence_groups()
"""Group numbers (0-based) of :data:`_ANNOTATION_LIST` that tell which parts a match holds: one
per item of :data:`_ITEMS` (mem: one per field of :data:`_MEM_FIELDS`)."""


def annotation_shape(groups: Groups) -> tuple[bool, ...]:
    """Which items (and mem fields) a match of :data:`_ANNOTATION_LIST` holds, from its groups."""
    return tuple(groups[k] is not None for k in _PRESENCE_GROUPS)


def shape_pattern(shape: tuple[bool, ...]) -> re.Pattern[str]:
    """An annotation-list pattern for one shape (:func:`annotation_shape`), with only its own groups.

    It matches exactly the lists of :data:`_ANNOTATION_LIST` that hold these items (and mem
    fields) and no others: present items are written out with their separators (no
    look-behinds, no optional items to try), absent ones not at all, so its groups are those of
    the present items in order (:func:`shape_layout` puts them where the general pattern has
    them). A large graph's lines share a few shapes, and this match costs under half the general one.
    """
    present = iter(shape)
    parts: list[str] = []
    separator = " \\["
    for key, value in _ITEMS:
        if key == "mem":
            fields = [field for field in _MEM_FIELDS if next(present)]
            if not fields:
                continue
            inner = ", ".join(f"{field} = {_BYTES}" for field in fields)
            parts.append(f"{separator}mem = \\{{{inner}\\}}")
        elif next(present):
            parts.append(f"{separator}{key} = {value}")
        else:
            continue
        separator = ", "
    closing = "\\]" if separator == ", " else ""
    return re.compile(_possessive("".join(parts) + closing + "\\Z"))


def shape_layout(shape: tuple[bool, ...]) -> Callable[[Groups], Groups]:
    """Maps a :func:`shape_pattern` match's groups, with ``(None,)`` appended, to the general pattern's groups."""
    present = iter(shape)
    positions: list[int] = []
    own = 0
    for key, value in _ITEMS:
        for pattern in (_BYTES,) * len(_MEM_FIELDS) if key == "mem" else (value,):
            count = _group_count(pattern)
            if next(present):
                positions.extend(range(own, own + count))
                own += count
            else:
                positions.extend([-1] * count)  # the appended None
    return operator.itemgetter(*positions)


Groups = tuple["str | Any", ...]
"""A match's groups as ``re.Match.groups()`` types them: a ``str``, or ``None`` for a group that took
no part. Which is which follows from the pattern (a time's unit is there when its number is), so
a group is ``str | Any`` as typeshed has it, not ``str | None``, which every use would have to check."""
AnnotationMatch = Callable[[str, int, int], "re.Match[str] | None"]
AnnotationRead = Callable[["re.Match[str]"], "dict[str, Any] | None"]
_SHAPE_READERS: dict[tuple[bool, ...], tuple[AnnotationMatch, AnnotationRead]] = {}
"""Per shape: its pattern's ``match`` and the reader of such a match, made once (at most 2^11 shapes)."""


def shape_reader(groups: Groups) -> tuple[AnnotationMatch, AnnotationRead]:
    """The ``match`` of a shape's :func:`shape_pattern` and the reader of its matches.

    The shape is that of a :data:`_ANNOTATION_LIST` match's ``groups``; the reader gives what
    :func:`typed_annotations` gives for the same list read by the general pattern.
    """
    shape = annotation_shape(groups)
    reader = _SHAPE_READERS.get(shape)
    if reader is None:
        read = _cost_mem_reader(shape)
        if read is None:
            layout = shape_layout(shape)

            def read_general(match: re.Match[str]) -> dict[str, Any] | None:
                return typed_annotations(layout(match.groups() + _NO_GROUP))

            read = read_general

        reader = _SHAPE_READERS[shape] = (shape_pattern(shape).match, read)
    return reader


def _cost_mem_reader(shape: tuple[bool, ...]) -> AnnotationRead | None:
    """:func:`typed_annotations` for a shape of ``cost`` and ``mem`` fields only, or None for another shape.

    The lists of a graph not yet placed have this shape. The reader takes its values from the
    shape pattern's own groups, without the general pattern's 17 groups and checks of absent items.
    """
    keys = [field if key == "mem" else key for key, _ in _ITEMS for field in (_MEM_FIELDS if key == "mem" else (key,))]
    present = {key for key, on in zip(keys, shape, strict=True) if on}
    if not present or not present <= {"cost", *_MEM_FIELDS}:
        return None
    with_cost = "cost" in present
    first = 2 if with_cost else 0  # the own group of the first present mem field
    positions: dict[str, int] = {}
    for field in _MEM_FIELDS:
        positions[field] = first if field in present else -1
        first += 2 if field in present else 0
    persistent, activation, temporary = (positions[field] for field in _MEM_FIELDS)
    with_mem = present != {"cost"}

    def read(match: re.Match[str]) -> dict[str, Any] | None:
        groups = match.groups()
        annotations: dict[str, Any] = {}
        if with_cost:
            seconds = seconds_from(groups[0], groups[1])
            if not 0.0 <= seconds < _INF:
                return None  # negative or infinite: the token parser reports it
            annotations["cost"] = _cost_of(seconds)
        if with_mem:
            annotations["mem"] = _mem_of(
                int(groups[persistent]) * _BYTE_UNITS[groups[persistent + 1]] if persistent >= 0 else 0,
                int(groups[activation]) * _BYTE_UNITS[groups[activation + 1]] if activation >= 0 else 0,
                int(groups[temporary]) * _BYTE_UNITS[groups[temporary + 1]] if temporary >= 0 else 0,
            )
        return annotations

    return read


_NO_GROUP = (None,)
_ANNOTATION_LIST = re.compile(_ANNOTATIONS)
_TAIL = re.compile(_TYPES.pattern + _ANNOTATIONS)
_LINE = re.compile(_HEAD.pattern + _TYPES.pattern + _ANNOTATIONS)
_STRINGS = re.compile(STRING)
_SCALAR = re.compile(
    rf"(?P<number>{NUMBER})(?P<unit>{UNIT})?(?![A-Za-z0-9_])"
    rf"|(?P<string>{STRING})"
    r"|(?P<word>true|false|inf|-inf|nan)(?![A-Za-z0-9_.$])"
)
_INTEGER = re.compile(r"-?\d+")
_KEY = re.compile(rf"(?:(?P<ident>[A-Za-z_][A-Za-z0-9_.$]*)|(?P<string>{STRING})) = ")
_TYPE_VALUE = re.compile(rf"type<({TYPE})>")
_DENSE_HEAD = re.compile(rf"dense<({TYPE}) = ")
_B64 = re.compile(rf"b64({STRING})>")
_WORDS = {"true": True, "false": False, "inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
_MAX_DEPTH = 64
"""Deeper nesting is left to the token parser (and its limits)."""


class _NotCanonicalError(Exception):
    """The line is not one the fast path reads; the token parser takes it."""


def _invalid() -> Any:
    raise ValueError("not a valid annotation value")


def _seconds(number: str, unit: str) -> float:
    seconds = seconds_from(number, unit)
    if seconds - seconds != 0:  # inf or nan
        raise ValueError("not a finite time")
    return seconds


_STATIC_TYPE_MATCH = _STATIC_TYPE.match
_DTYPES = {dtype.short: dtype for dtype in DType}
_INF = float("inf")
_BYTE_UNITS = BYTE_UNITS
_LINE_MATCH = _LINE.match
_new = object.__new__
# The slots' own setters: a frozen attrs class refuses plain stores, and these skip the name
# lookup of object.__setattr__ (about a third cheaper per field).
_set_dtype = TensorType.__dict__["dtype"].__set__
_set_shape = TensorType.__dict__["shape"].__set__
_set_times = Cost.__dict__["times"].__set__
_set_persistent = Mem.__dict__["persistent"].__set__
_set_activation = Mem.__dict__["activation"].__set__
_set_temporary = Mem.__dict__["temporary"].__set__


def _cost_of(seconds: float) -> Cost:
    """``Cost.of(seconds)`` for a finite, non-negative float (what its converter would check)."""
    cost = _new(Cost)
    _set_times(cost, ((DEFAULT_KIND, seconds),))
    return cost


def _mem_of(persistent: int, activation: int, temporary: int) -> Mem:
    """``Mem(...)`` for non-negative ints (what its validators would check)."""
    mem = _new(Mem)
    _set_persistent(mem, persistent)
    _set_activation(mem, activation)
    _set_temporary(mem, temporary)
    return mem


def _strings_into(out: dict[str, Any], affinity: str | None, colocate: str | None) -> bool:
    """``affinity`` and ``colocate`` into ``out``; ``False`` when one holds an empty string."""
    if affinity is not None:
        kinds = tuple(unquote(item) for item in _STRINGS.findall(affinity))
        if not all(kinds):
            return False
        out["affinity"] = kinds
    if colocate is not None:
        colocate = unquote(colocate)
        if not colocate:
            return False
        out["colocate"] = colocate
    return True


TypeReader = Callable[[str], "TensorType | None"]
DenseBuilder = Callable[[TensorType, Any], DenseTensor]


def typed_annotations(groups: Groups) -> dict[str, Any] | None:
    """The typed annotations of a :data:`_ANNOTATION_LIST` match's groups, or None for the token parser.

    Keys in sorted order, as the token parser's dict has them. None when a value is one the token
    parser must read or report (a negative or infinite time, an empty device, a string list it
    cannot take apart). The one reading of the common annotation list: :meth:`LineScanner.scan_node_line`
    and the parser's plain-line loop both call it.
    """
    (affinity, colocate, cost, cost_unit, device, finish, finish_unit, group,
     persistent, persistent_unit, activation, activation_unit, temporary, temporary_unit,
     order, start, start_unit) = groups  # fmt: skip
    annotations: dict[str, Any] = {}
    if (affinity is not None or colocate is not None) and not _strings_into(annotations, affinity, colocate):
        return None
    if cost is not None:
        seconds = seconds_from(cost, cost_unit)
        if not 0.0 <= seconds < _INF:
            return None  # negative or infinite: the token parser reports it
        annotations["cost"] = _cost_of(seconds)
    if device is not None:
        device = unquote(device)
        if not device:
            return None
        annotations["device"] = device
    if finish is not None:
        seconds = seconds_from(finish, finish_unit)
        if not -_INF < seconds < _INF:
            return None
        annotations["finish"] = seconds
    if group is not None:
        annotations["group"] = int(group)
    if persistent is not None or activation is not None or temporary is not None:
        annotations["mem"] = _mem_of(
            int(persistent) * _BYTE_UNITS[persistent_unit] if persistent is not None else 0,
            int(activation) * _BYTE_UNITS[activation_unit] if activation is not None else 0,
            int(temporary) * _BYTE_UNITS[temporary_unit] if temporary is not None else 0,
        )
    if order is not None:
        annotations["order"] = int(order)
    if start is not None:
        seconds = seconds_from(start, start_unit)
        if not -_INF < seconds < _INF:
            return None
        annotations["start"] = seconds
    return annotations


_PARAMS_CACHE_TEXT = 400
"""Longest params text :meth:`LineScanner._params` remembers (longer ones are rarely repeated)."""


def _plain(value: Any) -> bool:
    """Whether a param value is immutable and plain (shared safely by the nodes of a remembered params text)."""
    if isinstance(value, tuple):
        items: tuple[Any, ...] = cast("tuple[Any, ...]", value)
        return all(_plain(item) for item in items)
    return isinstance(value, (bool, int, float, str, TensorType, DenseTensor))


class LineScanner:
    """Reads canonical node lines; ``types`` maps type text to a shared :class:`TensorType`.

    Args:
        type_cache: type text -> type, for the types already read (``read_type`` adds to it).
        read_type: type text -> type, or ``None`` when the text is not a valid type.
        dense_from_values: the token parser's conversion of a ``dense<...>`` value list (raises
            ``ValueError`` when the values do not fit the type).
    """

    def __init__(self, type_cache: dict[str, TensorType], read_type: TypeReader, dense_from_values: DenseBuilder):
        self.type_cache = type_cache
        self.read_type = read_type
        self.dense_from_values = dense_from_values
        self.params_cache: dict[str, dict[str, Any]] = {}  # params text -> its dict (plain values only)

    def scan_node_line(self, text: str, defined: Container[str]) -> tuple[Any, ...] | None:
        """The parts of a node line, or ``None`` when the token parser must read it.

        Returns:
            ``(op, node_name, results, operands, controls, params, operand_types, result_types,
            annotations)``; names without sigils, ``annotations`` maps key -> typed value.
        """
        line = _LINE_MATCH(text)
        if line is None:
            return self._scan_general(text, defined)
        # The common case: no params, built-in annotations only. Kept flat: it runs once per node.
        groups = line.groups()
        results_text, op, name, operands_text, controls_text, inputs_text, output_text, outputs_text = groups[:8]
        if "." not in op:
            return None
        annotations = typed_annotations(groups[8:])
        if annotations is None:
            return None
        if results_text:
            results = results_text.replace("%", "").split(", ")
            for result in results:
                if result in defined:
                    return None
            if len(results) > 1 and len(set(results)) != len(results):
                return None
        else:
            results = []
        operands = operands_text.replace("%", "").split(", ") if operands_text else []
        controls = controls_text.replace("@", "").split(", ") if controls_text else []
        cache = self.type_cache
        if inputs_text:
            operand_types = [cache.get(piece) or self._type(piece) for piece in inputs_text.split(", ")]
            if not all(operand_types) or len(operand_types) != len(operands):
                return self._scan_general(text, defined)  # a spaced shape (f32[1, 3]) or a bad type
        elif operands:
            return None
        else:
            operand_types = []
        if output_text is not None:
            result_types = [cache.get(output_text) or self._type(output_text)]
        elif outputs_text:
            result_types = [cache.get(piece) or self._type(piece) for piece in outputs_text.split(", ")]
        else:
            result_types = []
        if not all(result_types) or len(result_types) != len(results):
            return self._scan_general(text, defined)
        return (op, name, results, operands, controls, {}, operand_types, result_types, annotations)

    def _type(self, text: str) -> TensorType | None:
        """A type the cache misses; ``None`` for a piece of a spaced shape (``f32[1, 3]`` split at ``, ``).

        A static shape without spaces of a known dtype (most misses: a large graph has a type per
        distinct tensor size) is built here as :func:`~graphir.parse_values._static_type` builds
        it; anything else goes to ``read_type``.
        """
        short, _, rest = text.partition("[")
        dims = rest[:-1]
        if dims.isdigit() and dims.isascii() and rest[-1:] == "]":  # rank 1 (dims: [0-9]+), no regex needed
            dtype = _DTYPES.get(short)
            if dtype is not None:
                tensor_type = _new(TensorType)
                _set_dtype(tensor_type, dtype)
                _set_shape(tensor_type, (int(dims),))
                self.type_cache[text] = tensor_type
                return tensor_type
        static = _STATIC_TYPE_MATCH(text)
        if static is not None:
            short, dims = static.groups()
            dtype = _DTYPES.get(short)
            if dtype is not None:
                tensor_type = _new(TensorType)
                _set_dtype(tensor_type, dtype)
                _set_shape(tensor_type, tuple(map(int, dims.split(","))) if dims else ())
                self.type_cache[text] = tensor_type
                return tensor_type
        return self.read_type(text) if text.endswith("]") and "[" in text else None

    def _scan_general(self, text: str, defined: Container[str]) -> tuple[Any, ...] | None:
        """:meth:`scan_node_line` for lines with params or annotations beyond the built-in shapes."""
        line = _LINE.match(text)
        if line is not None:
            parts = line.groups()
            head, types, annotations = parts[:5], parts[5:8], self._annotations(parts[8:])
            params: dict[str, Any] = {}
        else:
            head_match = _HEAD.match(text)
            if head_match is None:
                return None
            head = head_match.groups()
            try:
                params, pos = {}, head_match.end()
                if text.startswith(" {", pos):
                    params, pos = self._params(text, pos + 1)
                tail = _TAIL.match(text, pos)
                if tail is not None:
                    parts = tail.groups()
                    types, annotations = parts[:3], self._annotations(parts[3:])
                else:
                    types_match = _TYPES.match(text, pos)
                    if types_match is None or not text.startswith(" [", types_match.end()):
                        return None
                    types = types_match.groups()
                    generic, pos = self._dict(text, types_match.end() + 1, "]", 0)
                    if pos != len(text):
                        return None
                    annotations = self._typed(generic)
            except (_NotCanonicalError, RecursionError):
                return None
        if annotations is None:
            return None
        results_text, op, name, operands_text, controls_text = head
        if "." not in op:
            return None
        results = [item[1:] for item in results_text.split(", ")] if results_text else []
        for result in results:
            if result in defined:
                return None
        if len(results) > 1 and len(set(results)) != len(results):
            return None
        operands = [item[1:] for item in operands_text.split(", ")] if operands_text else []
        controls = [item[1:] for item in controls_text.split(", ")] if controls_text else []
        operand_types = self._types(types[0])
        result_types = self._types(types[1] if types[1] is not None else types[2])
        if operand_types is None or result_types is None:
            return None
        if len(result_types) != len(results) or len(operand_types) != len(operands):
            return None
        return (op, name, results, operands, controls, params, operand_types, result_types, annotations)

    @staticmethod
    def _annotations(parts: Groups) -> dict[str, Any] | None:
        """The typed values of the groups of :data:`_ANNOTATIONS`, as ``from_generic`` makes them.

        Returns ``None`` when one is invalid: the token parser then reads the line and reports it.
        """
        (affinity, colocate, cost, cost_unit, device, finish, finish_unit, group,
         persistent, persistent_unit, activation, activation_unit, temporary, temporary_unit,
         order, start, start_unit) = parts  # fmt: skip
        out: dict[str, Any] = {}
        try:
            if affinity is not None:
                kinds = tuple(unquote(item) for item in _STRINGS.findall(affinity))
                if not all(kinds):
                    return None
                out["affinity"] = kinds
            if colocate is not None:
                out["colocate"] = unquote(colocate) or _invalid()
            if cost is not None:
                out["cost"] = Cost.of(_seconds(cost, cost_unit))
            if device is not None:
                out["device"] = unquote(device) or _invalid()
            if finish is not None:
                out["finish"] = _seconds(finish, finish_unit)
            if group is not None:
                out["group"] = int(group)
            if persistent is not None or activation is not None or temporary is not None:
                out["mem"] = Mem(
                    int(persistent) * BYTE_UNITS[persistent_unit] if persistent is not None else 0,
                    int(activation) * BYTE_UNITS[activation_unit] if activation is not None else 0,
                    int(temporary) * BYTE_UNITS[temporary_unit] if temporary is not None else 0,
                )
            if order is not None:
                out["order"] = int(order)
            if start is not None:
                out["start"] = _seconds(start, start_unit)
        except ValueError:
            return None
        return out

    @staticmethod
    def _typed(generic: dict[str, Any]) -> dict[str, Any]:
        """Annotations read by the value scanner, converted by their declarations."""
        out: dict[str, Any] = {}
        for key, value in generic.items():
            kind = ANNOTATIONS.get(key)
            if kind is None:
                raise _NotCanonicalError
            try:
                out[key] = kind.from_generic(value)
            except ValueError:
                raise _NotCanonicalError from None
        return out

    def _types(self, text: str | None) -> list[TensorType] | None:
        if not text:
            return []
        cache = self.type_cache
        found = [cache.get(piece) for piece in text.split(", ")]
        if None not in found:
            return cast(list[TensorType], found)  # no None in it
        # A miss, or a spaced shape such as f32[1, 3] that the split cut in two.
        out: list[TensorType] = []
        for type_text in _TYPE_LIST.findall(text):
            tensor_type = self.read_type(type_text)
            if tensor_type is None:
                return None
            out.append(tensor_type)
        return out

    def _params(self, text: str, pos: int) -> tuple[dict[str, Any], int]:
        """A node's params ``{...}`` opening at ``text[pos]``: :meth:`_dict`, remembered by their text.

        A graph repeats a few params texts thousands of times (``{T = "f32"}``). The text up to the
        first ``} : `` is looked up; a dict that was read to exactly such a text is the answer again
        (reading consumes the same characters whatever follows them), as a fresh dict. Only dicts of
        immutable values are kept (a :class:`~graphir.attributes.DenseTensor` holds bytes: shared safely).
        """
        end = text.find("} : ", pos)
        key = text[pos : end + 1] if 0 <= end < pos + _PARAMS_CACHE_TEXT else None
        if key is not None:
            known = self.params_cache.get(key)
            if known is not None:
                return dict(known), end + 1
        params, after = self._dict(text, pos, "}", 0)
        if key is not None and after == end + 1 and all(_plain(v) for v in params.values()):
            self.params_cache[key] = params
            return dict(params), after
        return params, after

    def _dict(self, text: str, pos: int, close: str, depth: int) -> tuple[dict[str, Any], int]:
        """``{key = value, ...}`` (or ``[...]`` for annotations) opening at ``text[pos]``."""
        out: dict[str, Any] = {}
        pos += 1
        if text.startswith(close, pos):
            return out, pos + 1
        while True:
            key_match = _KEY.match(text, pos)
            if key_match is None:
                raise _NotCanonicalError
            key = key_match.group("ident")
            if key is None:
                key = unquote(key_match.group("string"))
            if key in out:
                raise _NotCanonicalError
            out[key], pos = self._value(text, key_match.end(), depth + 1)
            if text.startswith(close, pos):
                return out, pos + 1
            if not text.startswith(", ", pos):
                raise _NotCanonicalError
            pos += 2

    def _value(self, text: str, pos: int, depth: int) -> tuple[Any, int]:
        if depth > _MAX_DEPTH:
            raise _NotCanonicalError
        scalar = _SCALAR.match(text, pos)
        if scalar is not None:
            return self._scalar(scalar), scalar.end()
        first = text[pos : pos + 1]
        if first == "[":
            return self._list(text, pos, depth)
        if first == "{":
            return self._dict(text, pos, "}", depth)
        type_value = _TYPE_VALUE.match(text, pos)
        if type_value is not None:
            tensor_type = self.read_type(type_value.group(1))
            if tensor_type is None:
                raise _NotCanonicalError
            return tensor_type, type_value.end()
        dense = _DENSE_HEAD.match(text, pos)
        if dense is not None:
            return self._dense(text, dense, depth)
        raise _NotCanonicalError

    def _list(self, text: str, pos: int, depth: int) -> tuple[tuple[Any, ...], int]:
        pos += 1
        if text.startswith("]", pos):
            return (), pos + 1
        items: list[Any] = []
        while True:
            item, pos = self._value(text, pos, depth + 1)
            items.append(item)
            if text.startswith("]", pos):
                return tuple(items), pos + 1
            if not text.startswith(", ", pos):
                raise _NotCanonicalError
            pos += 2

    @staticmethod
    def _scalar(match: re.Match[str]) -> Any:
        number = match.group("number")
        if number is not None:
            unit = match.group("unit")
            if unit is None:
                return int(number) if _INTEGER.fullmatch(number) else float(number)
            if unit in BYTE_UNITS:
                if not _INTEGER.fullmatch(number):
                    raise _NotCanonicalError
                return ByteSize(int(number) * BYTE_UNITS[unit])
            seconds = seconds_from(number, unit)
            if seconds - seconds != 0:  # inf or nan: the token parser reports it
                raise _NotCanonicalError
            return Duration(seconds)
        string = match.group("string")
        if string is not None:
            return unquote(string)
        return _WORDS[match.group("word")]

    def _dense(self, text: str, head: re.Match[str], depth: int) -> tuple[DenseTensor, int]:
        tensor_type = self.read_type(head.group(1))
        if tensor_type is None or not tensor_type.is_static:
            raise _NotCanonicalError
        pos = head.end()
        b64 = _B64.match(text, pos)
        if b64 is not None:
            try:
                data = b64decode(unquote(b64.group(1)))
            except ValueError:
                raise _NotCanonicalError from None
            if tensor_type.nbytes != len(data):
                raise _NotCanonicalError
            return DenseTensor(tensor_type, data), b64.end()
        values, pos = self._value(text, pos, depth + 1)
        if not text.startswith(">", pos):
            raise _NotCanonicalError
        try:
            return self.dense_from_values(tensor_type, values), pos + 1
        except ValueError:
            raise _NotCanonicalError from None
