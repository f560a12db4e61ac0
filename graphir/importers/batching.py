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

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphir.errors import PassError
from graphir.ir import Module

__all__ = [
    "BatchBuilder",
    "graphdef_at_batch",
    "module_batch",
    "rebatch_graphdef",
    "register_batch_builder",
    "zoo_builder",
]

BatchBuilder = Callable[[int], Any]
"""``batch -> tf GraphDef`` with the node names of the registered module."""

_BUILDERS: dict[str, BatchBuilder] = {}


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


def zoo_builder(entry_name: str) -> BatchBuilder | None:
    """The builder of a zoo training entry (None when ``entry_name`` is not one)."""
    from graphir.tools import zoo

    entry = zoo.ENTRIES.get(entry_name)
    if entry is None or entry.mode != "train":
        return None

    def build(batch: int) -> Any:
        from tensorflow.core.framework import graph_pb2

        main = entry.path()
        path = zoo.zoo_dir() / "batches" / f"{entry_name}_b{batch}.pb"
        stale = path.exists() and main.exists() and path.stat().st_mtime < main.stat().st_mtime
        if not path.exists() or stale:
            _build_zoo_batch(entry_name, batch, path)
        graph_def = graph_pb2.GraphDef()
        graph_def.ParseFromString(path.read_bytes())
        return graph_def

    return build


_BUILD_SCRIPT = """
import sys
from pathlib import Path
from graphir.tools import zoo
entry = zoo.ENTRIES[sys.argv[1]]
graph_def, _ = zoo.build_train_graphdef(entry.model, int(sys.argv[2]), entry.config)
path = Path(sys.argv[3])
path.parent.mkdir(parents=True, exist_ok=True)
tmp = path.with_name(path.name + ".tmp")
tmp.write_bytes(graph_def.SerializeToString(deterministic=True))
tmp.replace(path)
"""


def _build_zoo_batch(entry_name: str, batch: int, path: Path) -> None:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow")
    command = [sys.executable, "-c", _BUILD_SCRIPT, entry_name, str(batch), str(path)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0 or not path.exists():
        lines = [line for line in result.stderr.strip().splitlines() if line.strip() and line[:1] not in "IWE"]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        raise PassError(f"rebuilding zoo entry '{entry_name}' at batch {batch} failed: {last}")


def graphdef_at_batch(module: Module, base_graph_def: Any, batch: int) -> tuple[Any, str]:
    """A GraphDef of ``module``'s model at ``batch``, and how it was made (``builder`` or ``placeholders``).

    Args:
        module: the module being profiled (its name selects a registered or zoo builder).
        base_graph_def: the module re-exported as a GraphDef, re-batched when no builder applies.
        batch: the wanted batch size.
    """
    builder = _BUILDERS.get(module.name) or zoo_builder(module.name)
    if builder is not None:
        return builder(batch), "builder"
    return rebatch_graphdef(base_graph_def, module_batch(module), batch), "placeholders"
