"""The graphir exception family and source locations.

Every user-facing failure is a :class:`GraphIRError` carrying a :class:`Location`, so the CLI
can print it as one line (``file:line:col: error: message``) and exit 1 without a traceback.
``assert`` is reserved for internal invariants.

Errors stay short whatever the input: the one-line message has control characters escaped and
is cut in the middle beyond :data:`MAX_MESSAGE_CHARS`; lists of names go through :func:`elide`
(``a, b, c ... and 212 more``); the source line under a caret is clipped to a window of
:data:`CARET_WINDOW` characters around the column.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

MAX_MESSAGE_CHARS = 1000
"""Longest one-line message: longer ones keep their start and end around an ``[... N chars ...]`` mark."""
CARET_WINDOW = 100
"""Characters of the source line shown under an error (about half of them before the caret)."""
ELIDE_AFTER = 8
"""How many names :func:`elide` and :func:`format_cycle` show before ``... and N more``."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\u0085]")


def elide(names: Sequence[str], limit: int = ELIDE_AFTER, sep: str = ", ") -> str:
    """``names`` joined by ``sep``, the tail beyond ``limit`` replaced by ``... and N more``."""
    if len(names) <= limit:
        return sep.join(names)
    return sep.join(names[:limit]) + f"{sep}... and {len(names) - limit} more"


def format_cycle(names: Sequence[str], limit: int = ELIDE_AFTER) -> str:
    """A cycle as ``a -> b -> c -> a``, elided when long.

    A long cycle shows its first ``limit`` nodes, the count of the rest, and closes on its first
    node again (``a -> b -> ... and 212 more -> a``).
    """
    if not names:
        return ""
    return elide(list(names), limit, " -> ") + f" -> {names[0]}"


def one_line_text(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` with control characters escaped (it stays one line) and cut in the middle past ``limit``."""
    if _CONTROL.search(text):
        text = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    if len(text) <= limit:
        return text
    keep = (limit - 30) // 2
    return f"{text[:keep]}[... {len(text) - 2 * keep} chars ...]{text[-keep:]}"


def caret_window(line: str, col: int, width: int = CARET_WINDOW) -> tuple[str, int]:
    """The part of ``line`` shown under an error and the caret's 1-based column in it.

    Short lines are returned whole; a long one is cut to ``width`` characters around ``col``, with
    ``...`` marking each cut side, so a 1-million-character pipeline still prints one short line.
    """
    # One character for one: the caret column stays right (tabs and control characters become spaces).
    line = _CONTROL.sub(" ", line.rstrip("\r\n"))
    if len(line) <= width:
        return line, col
    start = max(0, min(col - 1 - width // 2, len(line) - width))
    end = start + width
    head = "..." if start > 0 else ""
    tail = "..." if end < len(line) else ""
    return head + line[start:end] + tail, col - start + len(head)


@attrs.frozen
class Location:
    """Where something came from: a text position, or a source-model node name.

    Attributes:
        file: file name (``<stdin>`` for standard input), or ``None`` when unknown.
        line: 1-based line, 0 when unknown.
        col: 1-based column, 0 when unknown.
        source_line: the text of that line, used to draw a caret under ``col``.
        node: the name of the imported node the error concerns (ONNX/TF node name).
    """

    file: str | None = None
    line: int = 0
    col: int = 0
    source_line: str | None = None
    node: str | None = None

    def prefix(self) -> str:
        """The ``file:line:col`` prefix (only the parts that are known)."""
        parts: list[str] = []
        if self.file is not None:
            parts.append(self.file)
        if self.line:
            parts.append(str(self.line))
            if self.col:
                parts.append(str(self.col))
        if self.node is not None:
            parts.append(f"node '{self.node}'")
        return ":".join(parts)


UNKNOWN = Location()


class SourceLines:
    """The text of a parse, for :class:`Location` objects made only when one is asked for.

    The `.gir` parser gives each node the line number and this shared object instead of a
    :class:`Location` (one object fewer per node); :attr:`graphir.ir.Node.loc` calls
    :meth:`location` the first time a diagnostic or a copy wants it. The text is kept whole (the
    string the parser read, no copy) and cut into lines only when a line is first asked for:
    a million line strings held for diagnostics that seldom come cost more memory than the text.
    """

    __slots__ = ("file", "text", "_lines")

    def __init__(self, file: str | None, text: str):
        self.file = file
        self.text = text  # lines end at "\n" alone (the parser removed any "\r" before it)
        self._lines: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        """The lines of the text: line ``n`` (1-based) is ``lines[n - 1]``."""
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    def line(self, number: int) -> str:
        """The text of line ``number`` (1-based)."""
        return self.lines[number - 1]

    def location(self, line: int) -> Location:
        """The location of the first character of line ``line`` past its indentation."""
        text = self.line(line)
        indent = 4 if text[:5] == "    %" else len(text) - len(text.lstrip())
        return Location(self.file, line, indent + 1, text)


def describe_exception(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` of a library exception on one line (whitespace folded, long text cut)."""
    text = " ".join(str(exc).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class GraphIRError(Exception):
    """Base of every user-facing graphir error.

    Args:
        message: what went wrong, naming the object concerned.
        loc: where it happened.
        notes: extra lines printed after the caret (e.g. a cycle, the list of valid names).
    """

    kind = "error"

    def __init__(self, message: str, loc: Location = UNKNOWN, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.notes = notes
        self.pass_context = False  # set once a pass manager has prefixed the failing pass

    def one_line(self) -> str:
        """The error as a single line: ``prefix: error: message``."""
        prefix = one_line_text(self.loc.prefix(), 300)
        head = f"{prefix}: " if prefix else ""
        return f"{head}error: {one_line_text(self.message)}"

    def render(self) -> str:
        """The full diagnostic: the one-line message, the source line with a caret, and notes."""
        lines = [self.one_line()]
        if self.loc.source_line is not None and self.loc.col:
            shown, col = caret_window(self.loc.source_line, self.loc.col)
            lines.append(shown)
            lines.append(" " * (col - 1) + "^")
        lines.extend(f"note: {one_line_text(note)}" for note in self.notes)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.one_line()


class ParseError(GraphIRError):
    """Malformed `.gir` text."""


class VerifyError(GraphIRError):
    """The IR breaks an invariant (cycle, missing producer, type mismatch, bad annotation)."""


class PassOptionError(GraphIRError):
    """A bad pipeline string: unknown pass, unknown option, or an option value of the wrong type."""


class PreconditionError(GraphIRError):
    """A pass needs a fact (annotation) that is missing and that no registered pass provides."""


class PassError(GraphIRError):
    """A pass failed on valid input (for example an impossible memory budget)."""


class ImportError_(GraphIRError):  # noqa: N801, N818 - the underscore avoids shadowing the builtin
    """A model file cannot be read: missing, corrupt, or using an unsupported construct."""


class BackendError(GraphIRError):
    """An emitter cannot produce its output for this module."""
