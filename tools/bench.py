r"""``graphir-bench``: run a matrix of models x clusters x pipelines and tabulate the simulated results.

Every cell imports the model (cached, see below), attaches the cluster, runs the pipeline with the
pass manager (verification on unless ``--no-verify``) and scores the result with the simulator
(:func:`graphir.simulator.simulate`, the one ruler). Per cell it records:

* ``makespan``: simulated seconds of one step;
* ``ratio``: makespan / the best makespan of that model on that cluster, the best taken over the
  cells without error and without an out-of-memory device (over all cells without error when every
  cell is OOM); 1.0 marks the best;
* ``placement_s``: wall-clock seconds of the ``fuse`` and ``place`` passes (the pass manager's
  records), ``pipeline_s`` of every pass the cell ran;
* ``peak_memory`` and ``memory_limit`` per device, and ``oom``: the devices whose peak exceeds
  their memory;
* ``error``: one line when the cell failed (import, pipeline, placer or simulation error, or the
  per-cell ``--timeout``); the other cells still run.

Caching: each model is imported once and kept as ``.gir`` text; each cell parses a fresh copy
(``parse(print(m))`` is exact). When a pipeline starts with ``profile``, the profiled text is
cached per (model, cluster, profile options) and the cell runs the rest of the pipeline, so the
placers are compared on identical costs and profiling is paid once.

The matrix comes from a TOML file (``--matrix``) and/or flags, flags overriding the file::

    name = "placement"                      # title of the tables
    out = "benchmarks/results/placement"    # writes placement.md and placement.json
    seed = 0
    timeout = 1800                          # seconds per cell (optional)
    models = ["zoo:inception_v3_train", "examples/squeezenet.onnx"]
    clusters = ["celeritas", "4xV100"]
    [pipelines]                             # label = pipeline, in table order
    adjusting = "profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate"
    single = "profile,place{algo=single},simulate"

``pipelines`` may also be a list of strings; on the command line a pipeline may be given as
``label=pipeline``. An unlabelled pipeline is labelled by its ``place`` algorithm (or its text when
that is ambiguous). Relative model paths are relative to the current directory.

Command line::

    graphir-bench --matrix benchmarks/matrix.toml
    graphir-bench --models zoo:inception_v3_train,examples/squeezenet.onnx --clusters celeritas,4xV100 \\
        --pipelines 'profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate' 'single=profile,place,simulate' \\
        --out benchmarks/results/mine

Code: the matrix and cell results in :mod:`graphir.tools.bench_matrix`, running the cells in
:mod:`graphir.tools.bench_run`, the Markdown and JSON output in :mod:`graphir.tools.bench_tables`;
this module is the command line and re-exports their public names.

Progress goes to stderr, one line per cell; the Markdown table goes to ``OUT.md`` (and stdout when
no ``--out`` is given), the JSON to ``OUT.json``. Exit status: 0 when the matrix ran (failed cells
included), 1 on a bad matrix or command line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from graphir.driver.clusters import resolve_cluster
from graphir.errors import GraphIRError
from graphir.tools.bench_matrix import (
    BenchError,
    CellResult,
    Matrix,
    build_matrix,
    label_pipelines,
    load_matrix_file,
    split_label,
)
from graphir.tools.bench_run import CachedPrefix, CellTimeout, ModuleCache, one_line_error, run_cell, run_matrix
from graphir.tools.bench_tables import machine_line, markdown_table, results_json, write_output

__all__ = [
    "BenchError",
    "CachedPrefix",
    "CellResult",
    "CellTimeout",
    "Matrix",
    "ModuleCache",
    "build_arg_parser",
    "build_matrix",
    "label_pipelines",
    "load_matrix_file",
    "machine_line",
    "main",
    "markdown_table",
    "one_line_error",
    "results_json",
    "run",
    "run_cell",
    "run_matrix",
    "split_label",
]

# --------------------------------------------------------------------------- command line


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors in one line with exit status 1, like graphir-opt."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def build_arg_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = _ArgumentParser(
        prog="graphir-bench",
        description="Run models x clusters x pipelines through graphir and tabulate the simulated makespans.",
        epilog="Flags override the --matrix file. Progress goes to stderr; failed cells are recorded, not fatal.",
    )
    parser.add_argument("--matrix", metavar="FILE.toml", help="matrix file (models, clusters, [pipelines], out, ...)")
    parser.add_argument("--models", action="append", metavar="M,M", help="model files or zoo:<name>, comma-separated")
    parser.add_argument("--clusters", action="append", metavar="C,C", help="cluster specs, comma-separated")
    parser.add_argument(
        "--pipelines",
        nargs="+",
        action="extend",
        metavar="[LABEL=]PIPELINE",
        help="pipelines (one per argument, or separated by ';'), optionally labelled",
    )
    parser.add_argument("--out", metavar="PATH", help="write PATH.md and PATH.json (default: Markdown to stdout)")
    parser.add_argument("--name", help="title of the tables (default: the matrix's name or the --out file name)")
    parser.add_argument("--seed", type=int, help="pipeline seed (default: the matrix's, else 0)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds per cell before it is recorded as an error")
    parser.add_argument("--no-verify", action="store_true", help="do not run the verifier after each pass")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    try:
        args = build_arg_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    try:
        matrix = build_matrix(args)
        for cluster in matrix.clusters:
            resolve_cluster(cluster)  # a bad cluster is a matrix error, reported before any work
        started = time.perf_counter()
        date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        results = run_matrix(matrix, None if args.quiet else sys.stderr)
        seconds = time.perf_counter() - started
        table = markdown_table(matrix, results, date, seconds)
        if matrix.out is None:
            sys.stdout.write(table)
        else:
            write_output(matrix.out.with_name(matrix.out.name + ".md"), table)
            data = results_json(matrix, results, date, seconds)
            write_output(matrix.out.with_name(matrix.out.name + ".json"), json.dumps(data, indent=1) + "\n")
        failed = sum(1 for cell in results if cell.error)
        if not args.quiet:
            where = f"; wrote {matrix.out}.md and {matrix.out}.json" if matrix.out else ""
            print(f"graphir-bench: {len(results)} cells, {failed} failed, {seconds:.1f} s{where}", file=sys.stderr)
        return 0
    except GraphIRError as exc:
        print(f"graphir-bench: {exc.one_line()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("graphir-bench: interrupted", file=sys.stderr)
        return 130


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
