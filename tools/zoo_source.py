"""The model zoo as a model source: ``graphir-opt zoo:<name>`` and re-batched training entries.

Importing this module registers two plugins with the core (the core never names the zoo: this module
is the ``zoo`` entry point of the group ``graphir.sources`` in graphir's ``pyproject.toml``, loaded by
:func:`graphir.importers.load_source_plugins`):

* the ``zoo:`` source scheme of :func:`graphir.importers.load_module` (build on first use, then
  import; :func:`graphir.tools.zoo.load_entry`);
* a batch-builder provider for :mod:`graphir.passes.transform.batching`: a module named like a
  ``*_train`` entry is rebuilt at another batch by the zoo's own builder
  (:func:`graphir.tools.zoo.build_train_graphdef`), in a fresh Python process (Keras layer names
  and TF function names then match the entry's), cached as ``<zoo dir>/batches/<entry>_b<batch>.pb``
  (rebuilt when older than the entry itself).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from graphir.errors import PassError
from graphir.importers import register_source
from graphir.passes.transform.batching import BatchBuilder, register_builder_provider
from graphir.tools.zoo import load_entry


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


register_source("zoo", load_entry)
register_builder_provider(zoo_builder)
