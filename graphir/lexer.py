"""Tokens of the `.gir` text format, one line at a time.

The format is line-oriented (one op per line), so a line is tokenized on its own: one regular
expression with one named alternative per token kind, applied with ``finditer`` until it stops
matching. :mod:`graphir.parser` drives the tokens with its recursive-descent parser (exact columns
for caret diagnostics); :mod:`graphir.fastline` reads canonical node lines without tokens and must
agree with this module about where every token starts and ends.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

NAME_CHARS = r"[A-Za-z0-9_.$\#/-]"
"""Characters of a bare ``%value`` / ``@node`` name (others are written quoted)."""
STRING = r'"(?:[^"\\]|\\u[0-9a-fA-F]{4}|\\[^u])*"'
"""A double-quoted string with JSON-style escapes."""
TYPE = r"[a-z][a-z0-9]*\[[^\]]*\]"
"""A tensor type such as ``f32[1,3,224,224]``."""
NUMBER = r"-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?"
UNIT = r"ns|us|ms|s|KiB|MiB|GiB|TiB|B"

TOKEN = re.compile(
    rf"""
    \s*(?:
    (?P<comment>//.*)
  | (?P<pname>%(?:{NAME_CHARS}+|{STRING}))
  | (?P<aname>@(?:{NAME_CHARS}+|{STRING}))
  | (?P<string>{STRING})
  | (?P<arrow>->)
  | (?P<number>{NUMBER})(?P<unit>{UNIT})?(?![A-Za-z0-9_])
  | (?P<type>{TYPE})
  | (?P<ident>-?[A-Za-z_][A-Za-z0-9_.$]*)
  | (?P<punct>[(){{}}\[\]<>,=:?*])
    )""",
    re.VERBOSE,
)

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/", "r": "\r", "b": "\b", "f": "\f"}


def unquote(text: str) -> str:
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


_TUPLE_NEW: Callable[[type[Token], tuple[str, str, int, str | None]], Token] = tuple[Any, ...].__new__
"""``tuple.__new__`` (spelled through ``tuple[Any, ...]`` so the checker knows its type)."""


class Token(NamedTuple):
    """One token: its kind (a group name of :data:`TOKEN`), text, 1-based column and unit."""

    kind: str
    text: str
    col: int  # 1-based
    unit: str | None = None


def tokenize(text: str) -> tuple[list[Token], int]:
    """Tokens of one line (already stripped of trailing whitespace), comments dropped.

    Returns:
        The tokens and the 0-based position where tokenizing stopped: ``len(text)`` when the whole
        line was read, else the position of the first character no token starts with (after
        skipping whitespace).
    """
    tokens: list[Token] = []
    append = tokens.append
    make = _TUPLE_NEW  # no per-field Python call (Token(...) runs NamedTuple's __new__)
    pos = 0
    for match in TOKEN.finditer(text):
        if match.start() != pos:
            break
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None, "every alternative of TOKEN is a named group"
        if kind == "comment":
            continue
        if kind == "unit" or kind == "number":
            append(make(Token, ("number", match.group("number"), match.start("number") + 1, match.group("unit"))))
        else:
            append(make(Token, (kind, match.group(kind), match.start(kind) + 1, None)))
    if pos != len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens, pos
