"""Pesto coarsening on a DenseNet121 training graph (issue 15, item 3).

Builds the training step of Keras's ``DenseNet121`` (224x224, 1000 classes, ``weights=None``,
forward + GradientTape backward + one ``ResourceApplyAdam`` per variable, as every zoo training
graph: :func:`graphir.tools.zoo_convert.build_train_graphdef`) once into ``--cache`` (the zoo has
no DenseNet entry, so the builder is registered here for this process only), imports it, and
times ``profile,fuse{algo=acyclic-batch target=T}``. Prints one Markdown table row per run with
the nodes after, the wall time of ``fuse`` alone and the pass statistics (component joins,
rounds of Theorem 3.5 batch merging and the first merges per round).

Usage::

    python -m devtools.bench_fuse_densenet [--batch 32] [--target 200] [--cache zoo/densenet121_train.pb]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def build_graphdef(batch: int, path: Path) -> None:
    """Trace DenseNet121's training step and write its GraphDef to ``path`` (deterministic bytes)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from graphir.tools import zoo_convert, zoo_models

    def densenet121(batch: int) -> zoo_models.ModelSpec:
        # Same builder as the zoo's vision applications (tools/zoo_models.py::_vision).
        return zoo_models._vision("DenseNet121", 224, batch)  # noqa: SLF001 - the zoo's own builder

    zoo_models.MODELS.setdefault("densenet121", densenet121)
    graph_def, _ = zoo_convert.build_train_graphdef("densenet121", batch)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(graph_def.SerializeToString(deterministic=True))
    tmp.replace(path)


def measure(path: Path, target: int) -> dict[str, object]:
    """Import ``path``, profile it, and time ``fuse{algo=acyclic-batch target=...}`` alone."""
    from graphir.driver import load_builtin_passes
    from graphir.importers.tf import import_graphdef_file
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
    module = import_graphdef_file(path)
    PassManager(parse_pipeline("profile"), verify_each=False).run(module)
    module.graph.index()  # built beforehand: the timing below covers Fuse.run alone
    (fuse,) = parse_pipeline(f"fuse{{algo=acyclic-batch target={target}}}")
    started = time.perf_counter()
    result = fuse.run(module, PassContext())
    seconds = time.perf_counter() - started
    return {"nodes": module.graph.index().num_nodes, "seconds": seconds, **result.stats}


def _first(merges: str, count: int = 10) -> str:
    parts = merges.split(",")
    return ",".join(parts[:count]) + (",..." if len(parts) > count else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Build (once) and measure; print a Markdown row."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--target", type=int, action="append", help="targets (default 200)")
    parser.add_argument("--cache", type=Path, default=REPO / "zoo" / "densenet121_train.pb")
    args = parser.parse_args(argv)
    if not args.cache.exists():
        started = time.perf_counter()
        build_graphdef(args.batch, args.cache)
        print(f"built {args.cache} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    print("| target | nodes | nodes after | fuse s | stopped | component joins | rounds | merges per round |")
    print("|---:|---:|---:|---:|---|---:|---:|---|")
    for target in args.target or [200]:
        row = measure(args.cache, target)
        print(
            f"| {target} | {row['nodes']} | {row['nodes-after']} | {row['seconds']:.3f} | {row['stopped']} "
            f"| {row.get('component-joins', 0)} | {row['rounds']} | {_first(str(row['merges-per-round']))} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
