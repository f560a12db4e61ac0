"""Which modules of the layers below register graphir's built-in passes and emitters.

The core's registries (:data:`graphir.pass_infra.PASSES`, :data:`graphir.emit.EMITTERS`,
:data:`graphir.emit.RUNNERS`) are filled by the modules that define their entries, when those are
imported; the core never names them. This module is the one place that does, with real imports
(so the layering contract sees them), made inside the functions: ``graphir-opt model.gir
--emit=summary`` imports no pass at all, and a run that emits ``gir`` imports the backends only to
list them.

Model sources (``zoo:<name>``) are plugins of the entry-point group ``graphir.sources``
(:func:`graphir.importers.load_source_plugins`): the model zoo lives in ``tools/``, above this layer.
"""

from __future__ import annotations

from graphir.emit import EMITTERS, Emitter, register_emitter
from graphir.pass_infra import Pass, load_pass_plugins, registered_passes


def load_builtin_passes() -> dict[str, type[Pass]]:
    """Import the built-in passes and those of installed plugins (entry-point group ``graphir.passes``).

    Returns:
        The pass registry (:data:`graphir.pass_infra.PASSES`) by pipeline name.
    """
    import graphir.passes  # noqa: F401  (each pass registers itself on import)

    load_pass_plugins()
    return registered_passes()


def load_builtin_emitters() -> dict[str, Emitter]:
    """Import the backends that register the built-in emitters (and the ``--run-tf`` runner); the registry.

    ``tf`` registers ``tf-graphdef``, ``tf-savedmodel`` and the ``tf`` runner; TensorFlow itself is
    imported only when one of them runs. ``gir`` (the printer of the core) is registered here unless
    a backend registered its own.
    """
    from graphir.backends import compare, json_export, placement, report, summary, tf  # noqa: F401  (register on import)

    if "gir" not in EMITTERS:
        from graphir.printer import print_module

        register_emitter("gir", "the annotated module as .gir text")(print_module)
    return EMITTERS
