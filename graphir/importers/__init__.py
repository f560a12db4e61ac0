"""Model importers, chosen by input kind: `.gir` text, `.onnx` files (later: TF graphs).

Each importer is registered by file suffix in :data:`IMPORTERS` and returns a
:class:`~graphir.ir.Module`; unreadable input raises :class:`~graphir.errors.ImportError_`
(or :class:`~graphir.errors.ParseError` for `.gir`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from graphir.errors import ImportError_
from graphir.ir import Module

Importer = Callable[[Path], Module]
IMPORTERS: dict[str, Importer] = {}


def register_importer(suffix: str) -> Callable[[Importer], Importer]:
    """Register ``fn(path) -> Module`` for files ending in ``suffix`` (``.onnx``)."""

    def decorate(fn: Importer) -> Importer:
        IMPORTERS[suffix] = fn
        return fn

    return decorate


def _import_gir(path: Path) -> Module:
    from graphir.parser import parse_module

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImportError_(f"cannot read '{path}': {exc.__class__.__name__}: {exc}") from None
    return parse_module(text, str(path))


def _import_onnx(path: Path) -> Module:
    from graphir.importers.onnx import import_onnx

    return import_onnx(path)


IMPORTERS[".gir"] = _import_gir
IMPORTERS[".onnx"] = _import_onnx


def load_module(path: str | Path) -> Module:
    """Import the model at ``path`` with the importer registered for its suffix."""
    path = Path(path)
    importer = IMPORTERS.get(path.suffix)
    if importer is None:
        known = ", ".join(sorted(IMPORTERS))
        raise ImportError_(f"'{path}': unknown input kind '{path.suffix}' (known: {known})")
    if not path.exists():
        raise ImportError_(f"'{path}': no such file")
    return importer(path)
