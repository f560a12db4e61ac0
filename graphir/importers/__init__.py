"""Model importers, chosen by input kind: `.gir` text, `.onnx` files, TensorFlow graphs, zoo entries.

Each file importer is registered by file suffix in :data:`IMPORTERS` and returns a
:class:`~graphir.ir.Module`; unreadable input raises :class:`~graphir.errors.ImportError_`
(or :class:`~graphir.errors.ParseError` for `.gir`). :func:`load_module` also accepts a directory
(a TensorFlow SavedModel) and ``<scheme>:<name>`` from a model source (:data:`SOURCES`): ``zoo:<name>``
is a model-zoo entry, built on first use. Sources are plugins registered through the entry-point
group ``graphir.sources`` (the model zoo is one, declared in graphir's own ``pyproject.toml``); the
core never names their modules. TensorFlow is imported only when a TF input is actually read.
"""

from __future__ import annotations

import importlib.metadata
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


def _import_tf_graphdef(path: Path) -> Module:
    from graphir.importers.tf import import_graphdef_file

    return import_graphdef_file(path)


def _import_saved_model(path: Path) -> Module:
    from graphir.importers.tf import import_saved_model

    return import_saved_model(path)


IMPORTERS[".gir"] = _import_gir
IMPORTERS[".onnx"] = _import_onnx
IMPORTERS[".pb"] = _import_tf_graphdef
IMPORTERS[".pbtxt"] = _import_tf_graphdef

ZOO_PREFIX = "zoo:"
"""``graphir-opt zoo:<name>`` imports a model-zoo entry (the ``zoo`` model source, a plugin)."""

Source = Callable[[str], Module]
"""``name -> Module`` for a ``scheme:name`` model spec."""

SOURCES: dict[str, Source] = {}
"""Model sources by scheme (``zoo`` -> the model zoo); registered by plugins, see :func:`register_source`."""

_loaded_sources = False


def register_source(scheme: str, loader: Source) -> None:
    """Make ``load_module("<scheme>:<name>")`` call ``loader(name)``."""
    SOURCES[scheme] = loader


def load_source_plugins() -> dict[str, Source]:
    """Import the installed model-source plugins (entry-point group ``graphir.sources``) once; the registry.

    Each entry point names a module that calls :func:`register_source` when imported (graphir's
    model zoo is one). A plugin that fails to import is reported in one line.
    """
    global _loaded_sources
    if not _loaded_sources:
        _loaded_sources = True
        for entry in importlib.metadata.entry_points(group="graphir.sources"):
            try:
                entry.load()
            except Exception as exc:  # a broken plugin is reported, not a traceback
                raise ImportError_(f"cannot load model source plugin '{entry.name}' ({entry.value}): {exc}") from exc
    return SOURCES


def load_module(path: str | Path, tf_variables: Path | None = None) -> Module:
    """Import the model at ``path``: a file by its suffix, a SavedModel directory, or ``zoo:<name>``.

    ``tf_variables`` (a TensorFlow checkpoint) completes the variable shapes of a GraphDef input
    (:mod:`graphir.importers.tf_checkpoint`); it is an error with any other input.
    """
    if tf_variables is not None:
        suffix = "" if isinstance(path, str) and path.startswith(ZOO_PREFIX) else Path(path).suffix
        if suffix not in (".pb", ".pbtxt") or Path(path).name == "saved_model.pb":
            raise ImportError_(
                f"'{path}': --tf-variables applies to a TensorFlow GraphDef (.pb/.pbtxt) input only "
                "(a SavedModel carries its variables' shapes)"
            )
        from graphir.importers.tf import import_graphdef_file

        if not Path(path).exists():
            raise ImportError_(f"'{path}': no such file")
        return import_graphdef_file(Path(path), variables=Path(tf_variables))
    if isinstance(path, str) and path.startswith(ZOO_PREFIX):
        zoo = load_source_plugins().get("zoo")
        if zoo is None:
            raise ImportError_(f"'{path}': no model source 'zoo' is installed (entry-point group graphir.sources)")
        return zoo(path[len(ZOO_PREFIX) :])
    path = Path(path)
    if path.is_dir():
        return _import_saved_model(path)
    importer = IMPORTERS.get(path.suffix)
    if importer is None:
        known = ", ".join(sorted(IMPORTERS))
        if not path.exists():
            raise ImportError_(f"'{path}': no such file or directory")
        raise ImportError_(
            f"'{path}': unknown input kind '{path.suffix}' (known: {known}, a SavedModel directory or zoo:<name>)"
        )
    if not path.exists():
        raise ImportError_(f"'{path}': no such file")
    return importer(path)
