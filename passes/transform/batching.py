"""The same TensorFlow model at another batch size, for Celeritas's Standard Evaluation (§4.2.1).

``profile{mode=regression}`` measures a model at several small batch sizes and needs, for each, a
GraphDef whose nodes carry **the same names** as the module being profiled (so per-node
measurements line up). Two sources, tried in this order by :func:`graphdef_at_batch`:

1. **A registered builder** (:func:`register_batch_builder`): a callable ``batch -> GraphDef``
   stored under the module's name. The model zoo's training entries are registered implicitly:
   for a module named like a ``*_train`` entry of :mod:`graphir.tools.zoo` (``graphir-opt
   zoo:resnet50_train`` names its module so), the zoo's own builder
   (:func:`graphir.tools.zoo.build_train_graphdef`) traces the training step again at the new batch,
   in a fresh Python process (Keras layer names and TF function names then match the zoo entry's,
   see the zoo's determinism note), and the result is cached as
   ``<zoo dir>/batches/<entry>_b<batch>.pb`` (rebuilt when older than the entry itself).
   Rebuilding is needed for graphs traced with a static batch: Keras and TF's gradient code bake
   the batch into constants (``Reshape`` targets, ``Tile`` multiples, the loss's mean divisor), so
   shape inference alone cannot change it.
2. **Placeholder rewriting** (:func:`rebatch_graphdef`): the leading dimension of every
   ``Placeholder`` whose leading dimension equals the module's batch is set to the new batch and
   TensorFlow's shape inference runs again when the GraphDef is imported. This works for graphs
   whose shapes all flow from the inputs (``Reshape`` to ``[-1, ...]``, dynamic ``Shape`` ops); a
   graph with a baked batch is rejected by TF's shape inference, and the error (one line) says
   to register a builder.

The module's batch (:func:`module_batch`) is the leading dimension shared by its placeholders
(graph inputs for non-TF graphs); a module without one cannot be re-batched.

TensorFlow and the zoo are imported inside the functions only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from graphir.errors import PassError
from graphir.importers import load_source_plugins
from graphir.ir import Module

__all__ = [
    "BatchBuilder",
    "graphdef_at_batch",
    "module_batch",
    "rebatch_graphdef",
    "register_batch_builder",
    "register_builder_provider",
]

BatchBuilder = Callable[[int], Any]
"""``batch -> tf GraphDef`` with the node names of the registered module."""

_BUILDERS: dict[str, BatchBuilder] = {}
_PROVIDERS: list[Callable[[str], BatchBuilder | None]] = []


def register_builder_provider(provider: Callable[[str], BatchBuilder | None]) -> None:
    """Ask ``provider(module_name)`` for a builder when no module-specific one is registered.

    The model zoo registers one (``graphir.tools.zoo_source``): it rebuilds its training entries.
    """
    if provider not in _PROVIDERS:
        _PROVIDERS.append(provider)


def _provided_builder(module_name: str) -> BatchBuilder | None:
    load_source_plugins()
    for provider in _PROVIDERS:
        builder = provider(module_name)
        if builder is not None:
            return builder
    return None


def register_batch_builder(module_name: str, builder: BatchBuilder | None) -> None:
    """Use ``builder`` to rebuild the module called ``module_name`` at other batch sizes (None removes it)."""
    if builder is None:
        _BUILDERS.pop(module_name, None)
    else:
        _BUILDERS[module_name] = builder


def module_batch(module: Module) -> int:
    """The batch size of a module: the most common leading dim of its placeholders (or graph inputs).

    Raises:
        PassError: no input has a static leading dimension.
    """
    leading: Counter[int] = Counter()
    for node in module.graph.nodes:
        if node.op == "tf.Placeholder" and node.outputs:
            shape = node.outputs[0].type.shape
            if shape and isinstance(shape[0], int):
                leading[shape[0]] += 1
    for value in module.graph.inputs:
        shape = value.type.shape
        if shape and isinstance(shape[0], int):
            leading[shape[0]] += 1
    if not leading:
        raise PassError(f"module '{module.name}' has no input with a static batch (leading) dimension")
    return max(leading.items(), key=lambda item: (item[1], item[0]))[0]


def rebatch_graphdef(graph_def: Any, old_batch: int, batch: int) -> Any:
    """A copy of ``graph_def`` whose placeholders with leading dim ``old_batch`` have leading dim ``batch``.

    Raises:
        PassError: no placeholder has that leading dimension.
    """
    from tensorflow.core.framework import graph_pb2

    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    changed = 0
    for node in out.node:
        if node.op != "Placeholder" or "shape" not in node.attr:
            continue
        dims = node.attr["shape"].shape.dim
        if dims and dims[0].size == old_batch:
            dims[0].size = batch
            changed += 1
    if not changed:
        raise PassError(f"no placeholder has the leading dimension {old_batch}: cannot change the batch")
    return out


def graphdef_at_batch(module: Module, base_graph_def: Any, batch: int) -> tuple[Any, str]:
    """A GraphDef of ``module``'s model at ``batch``, and how it was made (``builder`` or ``placeholders``).

    Args:
        module: the module being profiled (its name selects a registered or zoo builder).
        base_graph_def: the module re-exported as a GraphDef, re-batched when no builder applies.
        batch: the wanted batch size.
    """
    builder = _BUILDERS.get(module.name) or _provided_builder(module.name)
    if builder is not None:
        return builder(batch), "builder"
    return rebatch_graphdef(base_graph_def, module_batch(module), batch), "placeholders"
