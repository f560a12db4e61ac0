"""The value grammar of the `.gir` token parser: types, scalars, lists, dicts and constants.

:class:`_ValueGrammar` holds the token-stream primitives (``peek``, ``take``, ``expect``...) and
the recursive-descent rules for everything that can stand after ``key =``; the structural rules
(module, graph, node lines) and node building live in :mod:`graphir.parser`, which subclasses it.
"""

from __future__ import annotations

import math
import re
from typing import Any, cast

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
from graphir.errors import ParseError
from graphir.lexer import Token as _Token
from graphir.lexer import unquote as _unquote
from graphir.regions import REGION_SLOT, REGION_WORD
from graphir.types import Dim, DType, TensorType

__all__ = ["dense_from_values", "_Line", "_ValueGrammar"]  # the two classes are graphir.parser's base

_DIM_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STATIC_TYPE = re.compile(r"([a-z][a-z0-9]*)\[((?:[0-9]+(?:,[0-9]+)*)?)\]\Z")
"""A type with a static shape written without spaces (``f32[1,3,224,224]``, ``i64[]``)."""


def _static_type(short: str, dims: str) -> TensorType | None:
    """``TensorType(dtype, shape)`` from :data:`_STATIC_TYPE`'s groups, ``None`` for an unknown dtype.

    The dimensions are ASCII digit runs, so the class's converter and validator (a tuple of
    non-negative ints) hold by construction and are skipped: one type per distinct spelling of
    a million-node file is built here.
    """
    try:
        dtype = DType.from_short(short)
    except KeyError:
        return None
    tensor_type = object.__new__(TensorType)
    object.__setattr__(tensor_type, "dtype", dtype)
    object.__setattr__(tensor_type, "shape", tuple(map(int, dims.split(","))) if dims else ())
    return tensor_type


def dense_from_values(tensor_type: TensorType, values: Any) -> DenseTensor:
    """The constant a ``dense<type = [...]>`` value list denotes.

    Raises:
        ValueError: the values are not a list of the type's element count, or do not fit the
            element type (the message says which).
    """
    count = tensor_type.num_elements or 0
    if not isinstance(values, tuple):
        raise ValueError(f"dense data must list {count} values for {tensor_type}")
    items = cast(tuple[object, ...], values)  # parsed values
    if len(items) != count:
        raise ValueError(f"dense data must list {count} values for {tensor_type}")
    if tensor_type.dtype is DType.STRING:
        return DenseTensor(tensor_type, tuple(str(v) for v in items))
    import numpy as np

    shape = cast(tuple[int, ...], tensor_type.shape or ())  # a symbolic dim raises TypeError, reported below
    try:
        array = np.array(items, dtype=numpy_dtype(tensor_type.dtype)).reshape(shape)
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ValueError(f"cannot hold these values as {tensor_type}") from None
    dtype_from_numpy(array.dtype)
    return DenseTensor.from_numpy(array)


class _Line:
    """One tokenized line and the parser's position in it."""

    __slots__ = ("number", "text", "tokens", "pos", "end_col")

    def __init__(self, number: int, text: str, tokens: list[_Token], pos: int = 0, end_col: int = 0):
        self.number = number
        self.text = text
        self.tokens = tokens
        self.pos = pos
        self.end_col = end_col


class _ValueGrammar:
    """Token-stream primitives and value rules; the subclass provides ``error`` and the lines."""

    cur: _Line | None
    type_cache: dict[str, TensorType]

    def error(self, message: str, col: int | None = None, line: _Line | None = None) -> ParseError:
        raise NotImplementedError

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
                elif _DIM_SYMBOL.fullmatch(dim):
                    dims.append(dim)
                else:
                    raise self.error(f"bad dimension '{dim}'", col + len(item) - len(item.lstrip()))
                col += len(item) + 1
        return TensorType(dtype, tuple(dims))

    def _cached_type(self, text: str) -> TensorType | None:
        """The type spelt ``text`` (shared between equal spellings); ``None`` when it is invalid."""
        cached = self.type_cache.get(text)
        if cached is None and (static := _STATIC_TYPE.match(text)) is not None:
            cached = _static_type(static.group(1), static.group(2))
            if cached is not None:
                self.type_cache[text] = cached
                return cached
        if cached is None:
            try:
                cached = self._type_from_text(_Token("type", text, 1))
            except (ParseError, TypeError, ValueError):
                return None
            self.type_cache[text] = cached
        return cached

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
        if tok.text == REGION_WORD:
            return REGION_SLOT  # a node's region param: the node parser reads its graph after the line
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
        type_col = tok.col if (tok := self.peek()) else 0
        tensor_type = self.parse_type()
        if not tensor_type.is_static:
            raise self.error("a dense tensor needs a static shape", type_col)
        self.expect("=")
        tok = self.peek()
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
        try:
            return dense_from_values(tensor_type, values)
        except ValueError as exc:
            raise self.error(str(exc), values_col) from None

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
            col = tok.col if (tok := self.peek()) else key_col
            out[key] = (self.parse_value(), col, key_col)
            if self.accept(close):
                return out
            self.expect(",", f"',' or '{close}'")

    # ----------------------------------------------------------------- structure
