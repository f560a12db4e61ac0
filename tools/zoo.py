"""The benchmark model zoo: real inference and training graphs, built offline and deterministically.

Every entry is built from Keras 3 (``weights=None``, random initialisation under fixed seeds) into
the git-ignored folder ``zoo/`` at the repository root (override with ``GRAPHIR_ZOO_DIR``):

* ``<model>_infer``: inference ONNX converted by tf2onnx (``tf2onnx.convert.from_function`` on a
  ``tf.function`` wrapping ``model(x, training=False)``, opset :data:`OPSET`), file ``<name>.onnx``.
  The models of :data:`EXTERNAL_WEIGHT_MODELS` (over 500 MB of weights) keep their weights in
  ``<name>.onnx.data`` (ONNX external data) and are converted without freezing the weights
  (:func:`build_infer_onnx_external`): a frozen conversion needs about ten times the weight bytes
  of memory, more than this machine has for BERT-large or the Transformer.
* ``<model>_train``: one training step (forward, ``tf.GradientTape`` backward, Adam update) traced
  into one ``tf.function`` and stored as a **GraphDef** (``<name>.pb``, with its function library).
  GraphDef rather than SavedModel because a SavedModel would have to write every variable's
  values (gigabytes for BERT-large with Adam slots), while the GraphDef records each variable as a
  ``VarHandleOp`` carrying its ``dtype`` and ``shape``
  (:func:`graphir.importers.tf.concrete_function_graphdef`): building needs no execution and no
  weight is written. Import it with ``graphir-opt zoo/<name>.pb`` or ``graphir-opt zoo:<name>``.

Batch sizes follow the papers where they state one (Celeritas: InceptionV3 512, 4-layer LSTM NMT
with 2048 units 512, Transformer 256; Pesto/FastT: 32-128 for the CNNs and BERT); inference
entries use the same batch. Sizes: see ``benchmarks/results/zoo.md`` (written by ``make zoo``).

Files are written atomically: single files through :mod:`graphir.fileio` (mode 0666 less the umask),
an ONNX model and its external-data file staged together with mode 0644 (:data:`FILE_MODE`).

Determinism: each entry is built in a fresh Python process (Keras layer-name counters and TF
function names depend on what the process built before) with ``keras.utils.set_random_seed``, so
building an entry twice gives byte-identical files and `.gir` text.

Code: the entries in :mod:`graphir.tools.zoo_entries`, the Keras models in
:mod:`graphir.tools.zoo_models`, one entry's build in :mod:`graphir.tools.zoo_convert`, the size
table in :mod:`graphir.tools.zoo_table`; this module builds entries in fresh processes, loads them
(``zoo:<name>``) and holds the command line. Its public names stay importable from here.

Command line::

    python tools/zoo.py                       # build every missing entry (2 worker processes)
    python tools/zoo.py resnet50_infer --force
    python tools/zoo.py --list
    python tools/zoo.py --table benchmarks/results/zoo.md   # build, then write the size table
    python tools/zoo.py gru_lm_infer --table benchmarks/results/zoo.md   # update (or add) that row only
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from graphir.errors import GraphIRError, ImportError_
from graphir.ir import Module
from graphir.tools.zoo_convert import (
    FILE_MODE,
    OPSET,
    build_in_process,
    build_infer_onnx,
    build_infer_onnx_external,
    build_train_graphdef,
    canonicalize_constants,
    fold_constant_nodes,
)
from graphir.tools.zoo_entries import ENTRIES, EXTERNAL_WEIGHT_MODELS, ZOO_DIR_ENV, Entry, zoo_dir
from graphir.tools.zoo_models import DROPOUT, MODELS, SEED
from graphir.tools.zoo_table import entry_stats, write_table

__all__ = [
    "DROPOUT",
    "ENTRIES",
    "EXTERNAL_WEIGHT_MODELS",
    "FILE_MODE",
    "MODELS",
    "OPSET",
    "SEED",
    "ZOO_DIR_ENV",
    "Entry",
    "build_entry",
    "build_in_process",
    "build_infer_onnx",
    "build_infer_onnx_external",
    "build_train_graphdef",
    "canonicalize_constants",
    "entry_stats",
    "fold_constant_nodes",
    "load_entry",
    "main",
    "write_table",
    "zoo_dir",
]

# --------------------------------------------------------------------------------- building


def build_entry(name: str, directory: Path | None = None, *, force: bool = False, quiet: bool = False) -> Path:
    """Build the entry ``name`` in a fresh Python process (unless already built) and return its file.

    Raises:
        ImportError_: unknown entry, or the build failed (its last error line is in the message).
    """
    entry = ENTRIES.get(name)
    if entry is None:
        raise ImportError_(f"unknown zoo entry '{name}' (known: {', '.join(ENTRIES)})")
    directory = directory or zoo_dir()
    path = entry.path(directory)
    if all(p.exists() for p in entry.files(directory)) and not force:
        return path
    if not quiet:
        print(f"zoo: building {name} into {path} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow")
    command = [sys.executable, "-m", "graphir.tools.zoo", "--build-one", name, "--dir", str(directory)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if result.returncode != 0 or not all(p.exists() for p in entry.files(directory)):
        lines = [line for line in result.stderr.strip().splitlines() if line.strip() and line[:1] not in "IWE"]
        last = lines[-1] if lines else f"exit status {result.returncode}"
        if result.returncode < 0:
            last = f"killed by signal {-result.returncode} (out of memory?)"
        raise ImportError_(f"building zoo entry '{name}' failed: {last}")
    if not quiet:
        size = sum(p.stat().st_size for p in entry.files(directory)) / 2**20
        print(f"zoo: built {name} ({size:.1f} MiB) in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    return path


def load_entry(name: str) -> Module:
    """``graphir-opt zoo:<name>``: build the entry on first use, then import it."""
    from graphir.importers import load_module

    path = build_entry(name)
    module = load_module(path)
    module.name = name
    return module


# --------------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """Build zoo entries; see the module docstring."""
    parser = argparse.ArgumentParser(prog="zoo", description="Build the graphir model zoo.")
    parser.add_argument("names", nargs="*", help="entries to build (default: all)")
    parser.add_argument("--dir", type=Path, help=f"zoo folder (default: ${ZOO_DIR_ENV} or zoo/ in the repository)")
    parser.add_argument("--force", action="store_true", help="rebuild entries that exist")
    parser.add_argument("--jobs", type=int, default=2, help="parallel build processes (default 2)")
    parser.add_argument("--list", action="store_true", help="list the entries and exit")
    parser.add_argument(
        "--table",
        type=Path,
        help="after building, import the named entries (default: all) and write their rows of the size table "
        "(the other rows are kept)",
    )
    parser.add_argument("--build-one", metavar="NAME", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    directory = args.dir or zoo_dir()
    if args.list:
        for entry in ENTRIES.values():
            print(f"{entry.name}: {entry.model} {entry.mode}, batch {entry.batch}; {entry.note}")
        return 0
    if args.build_one:
        try:
            build_in_process(ENTRIES[args.build_one], directory)
        except GraphIRError as exc:  # a missing extra: its one line becomes the parent's error
            print(exc.message, file=sys.stderr)
            return 1
        return 0
    names = args.names or list(ENTRIES)
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        print(f"zoo: error: unknown entries {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 1
    # Biggest builds first, so the two workers finish together.
    order = sorted(names, key=lambda n: (ENTRIES[n].model not in ("transformer", "bert_large", "nasnet_large"), n))
    existed = [n for n in names if all(p.exists() for p in ENTRIES[n].files(directory))]
    start = time.perf_counter()
    failed = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {
            pool.submit(build_entry, n, directory, force=args.force): n for n in order if not ENTRIES[n].exclusive
        }
        for future in concurrent.futures.as_completed(futures):
            try:
                future.result()
            except ImportError_ as exc:
                print(f"zoo: error: {exc.message}", file=sys.stderr)
                failed = True
    for name in (n for n in order if ENTRIES[n].exclusive):
        try:
            build_entry(name, directory, force=args.force)
        except ImportError_ as exc:
            print(f"zoo: error: {exc.message}", file=sys.stderr)
            failed = True
    elapsed = time.perf_counter() - start
    from_scratch = len(names) == len(ENTRIES) and (args.force or not existed)
    print(f"zoo: {len(names)} entries ready in {elapsed:.0f}s", file=sys.stderr)
    if failed:
        return 1
    if args.table:
        rows = []
        for name in sorted(names):
            print(f"zoo: importing {name} ...", file=sys.stderr, flush=True)
            rows.append(entry_stats(name, directory))
        write_table(rows, args.table, time.perf_counter() - start if from_scratch else None)
        print(f"zoo: wrote {args.table}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
