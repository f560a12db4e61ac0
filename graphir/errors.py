"""The graphir exception family and source locations.

Every user-facing failure is a :class:`GraphIRError` carrying a :class:`Location`, so the CLI
can print it as one line (``file:line:col: error: message``) and exit 1 without a traceback.
``assert`` is reserved for internal invariants.
"""

from __future__ import annotations

import attrs


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
        prefix = self.loc.prefix()
        head = f"{prefix}: " if prefix else ""
        return f"{head}error: {self.message}"

    def render(self) -> str:
        """The full diagnostic: the one-line message, the source line with a caret, and notes."""
        lines = [self.one_line()]
        if self.loc.source_line is not None and self.loc.col:
            lines.append(self.loc.source_line.rstrip("\n"))
            lines.append(" " * (self.loc.col - 1) + "^")
        lines.extend(f"note: {note}" for note in self.notes)
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
