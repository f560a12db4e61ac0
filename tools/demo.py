"""Build the demo's model: a GPT training step too big for one GPU of ``examples/demo_cluster.toml``.

``make demo`` runs ``python -m graphir.tools.demo build/demo/gpt_train.pb`` and then places the
file with ``graphir-opt --compare=...`` (see the Makefile). The model is the zoo's GPT
(:mod:`graphir.tools.zoo_models`: token and position embeddings, pre-softmax LM head, causal
self-attention blocks with GELU MLPs) at a size TensorFlow traces in seconds — :data:`DEMO_CONFIG`,
batch :data:`DEMO_BATCH` — one Adam step (forward, backward, ``ResourceApplyAdam`` per variable) as a
self-contained GraphDef (:func:`graphir.tools.zoo_convert.build_train_graphdef`). Its weights, Adam
slots and the batch's activations need about 1.7 GiB at the peak on one device: more than a 1 GiB
GPU of the demo cluster holds, so the placers have something to do.

The file is written atomically and deterministically; an existing file is kept (delete it or pass
``--force`` to rebuild), so a second ``make demo`` skips the build. Needs the ``tf`` extra.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from graphir.errors import GraphIRError
from graphir.fileio import write_atomically

DEMO_MODEL = "gpt"
"""The zoo model the demo trains."""
DEMO_BATCH = 16
"""Sequences per training step."""
DEMO_CONFIG = (("layers", 4), ("d_model", 512), ("heads", 8), ("d_ff", 2048), ("vocab", 32000), ("seq", 128))
"""GPT with 4 layers, 512 hidden, 8 heads, a 32k vocabulary and 128-token sequences (about 45 M parameters)."""


def describe() -> str:
    """``GPT training step (4 layers, d_model 512, ...)``."""
    config = ", ".join(f"{key} {value}" for key, value in DEMO_CONFIG)
    return f"GPT training step ({config}, batch {DEMO_BATCH}, Adam)"


def build(path: Path) -> str:
    """Trace the demo training step and write its GraphDef to ``path``; returns a one-line summary."""
    from graphir.importers.tf import load_tensorflow
    from graphir.tools.zoo_convert import build_train_graphdef

    started = time.perf_counter()
    load_tensorflow("building the demo model")  # first import with TensorFlow's start-up banners silenced
    graph_def, concrete = build_train_graphdef(DEMO_MODEL, DEMO_BATCH, DEMO_CONFIG)
    parameters = sum(int(v.shape.num_elements() or 0) for v in concrete.graphir_keepalive[0].trainable_variables)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, graph_def.SerializeToString(deterministic=True))
    seconds = time.perf_counter() - started
    return (
        f"demo: built the {describe()}: {len(graph_def.node)} TensorFlow ops, {parameters / 1e6:.1f} M parameters, "
        f"in {seconds:.1f} s -> {path}"
    )


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m graphir.tools.demo OUTPUT.pb [--force]``."""
    parser = argparse.ArgumentParser(prog="python -m graphir.tools.demo", description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the GraphDef file to write (.pb)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the file exists")
    args = parser.parse_args(argv)
    if args.output.exists() and not args.force:
        print(f"demo: {args.output} exists (the {describe()}); --force rebuilds it")
        return 0
    try:
        print(build(args.output), flush=True)
    except GraphIRError as exc:  # no TensorFlow (the tf extra), or an unwritable output
        print(f"demo: error: {exc.one_line()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
