"""Core benchmark: import, index, print, parse and JSON-export a large synthetic ONNX graph.

Generates a random layered ONNX model of ``--nodes`` ops (default 100,000) with
:func:`devtools.synth_onnx.make_layered_onnx` in a temporary directory, then times, in
wall-clock seconds and as the best of ``--repeat`` runs (default 3):

* ``onnx import``: :func:`graphir.importers.load_module` (load, shape inference, IR build);
* ``index build``: :meth:`graphir.ir.Graph.index` from scratch (the cache is invalidated first);
* ``.gir print``: :func:`graphir.printer.print_module` (with the index already built);
* ``.gir parse``: :func:`graphir.parser.parse_module` of that text;
* ``json export``: ``graphir.backends.json_export.export_json`` (reported as skipped when that
  module is not available).

The result is a Markdown table written to ``benchmarks/results/core.md`` (``--out``) and printed.
The index build of 100k nodes must take under 1 s (``INDEX_BUDGET_S``, scaled linearly above
100k nodes); the report says whether it does and the exit status is 1 when it does not.

Command line::

    python -m devtools.bench_core [--nodes 100000] [--seed 0] [--repeat 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from devtools.synth_onnx import make_layered_onnx
from graphir.importers import load_module
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.printer import print_module

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "core.md"
INDEX_BUDGET_S = 1.0
"""Upper bound for building the index of a 100k-node graph (scaled linearly for larger graphs)."""


def index_budget(num_nodes: int) -> float:
    """Seconds allowed for the index build of a ``num_nodes`` graph."""
    return INDEX_BUDGET_S * max(1.0, num_nodes / 100_000)


def best_of(repeat: int, step: Callable[[], Any], before: Callable[[], None] | None = None) -> tuple[float, Any]:
    """The smallest wall-clock time of ``repeat`` runs of ``step`` and the last result.

    ``before`` runs untimed ahead of each run (to invalidate caches).
    """
    best = float("inf")
    result: Any = None
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        result = step()
        best = min(best, time.perf_counter() - start)
    return best, result


def _json_exporter() -> Callable[[Module], str] | None:
    try:
        from graphir.backends.json_export import export_json
    except ImportError:
        return None
    return export_json


def machine_info() -> list[tuple[str, str]]:
    """Facts about the machine and software the numbers were measured on."""
    return [
        ("machine", f"{platform.machine()}, {os.cpu_count()} logical CPUs"),
        ("processor", platform.processor() or "unknown"),
        ("os", platform.platform()),
        ("python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("numpy / onnx", f"{np.__version__} / {onnx.__version__}"),
        ("load average at start (1/5/15 min)", " / ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


def run(num_nodes: int, seed: int, repeat: int) -> tuple[list[tuple[str, float | None, str]], dict[str, Any]]:
    """Measure every step; returns the rows ``(step, seconds or None, note)`` and graph facts."""
    rows: list[tuple[str, float | None, str]] = []
    with tempfile.TemporaryDirectory(prefix="graphir-bench-") as tmp:
        path = Path(tmp) / f"layered_{num_nodes}.onnx"
        start = time.perf_counter()
        model = make_layered_onnx(num_nodes, seed)
        onnx.save_model(model, str(path))
        generate = time.perf_counter() - start
        del model
        rows.append(("generate (synth_onnx, not graphir)", generate, f"{path.stat().st_size / 2**20:.1f} MiB file"))
        seconds, module = best_of(repeat, lambda: load_module(path))
        rows.append(("onnx import", seconds, "load + shape inference + IR build"))
    graph = module.graph
    seconds, index = best_of(repeat, graph.index, before=graph._touch)
    budget = index_budget(num_nodes)
    verdict = "within" if seconds < budget else "OVER"
    rows.append(("index build", seconds, f"{verdict} the {budget:g} s budget"))
    seconds, text = best_of(repeat, lambda: print_module(module))
    rows.append((".gir print", seconds, f"{len(text) / 2**20:.1f} MiB of text"))
    seconds, _ = best_of(repeat, lambda: parse_module(text, "bench.gir"))
    rows.append((".gir parse", seconds, ""))
    export_json = _json_exporter()
    if export_json is None:
        rows.append(("json export", None, "skipped: graphir.backends.json_export not available"))
    else:
        seconds, data = best_of(repeat, lambda: export_json(module))
        rows.append(("json export", seconds, f"{len(data) / 2**20:.1f} MiB of JSON"))
    facts = {
        "nodes": index.num_nodes,
        "edges": index.num_edges,
        "values": len(index.values),
        "index_seconds": next(s for name, s, _ in rows if name == "index build"),
    }
    return rows, facts


def render(
    rows: list[tuple[str, float | None, str]],
    facts: dict[str, Any],
    machine: list[tuple[str, str]],
    seed: int,
    repeat: int,
) -> str:
    """The Markdown report."""
    lines = [
        "# Core benchmark",
        "",
        f"Generated by `devtools/bench_core.py` on {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}.",
        f"Graph: `devtools/synth_onnx.py` layered DAG, seed {seed}: **{facts['nodes']} nodes**, "
        f"**{facts['edges']} edges**, {facts['values']} node results, all `f32[1,64]`.",
        f"Times are wall-clock seconds, best of {repeat} runs (generation: one run).",
        "",
        "| step | seconds | nodes | edges | note |",
        "|---|---:|---:|---:|---|",
    ]
    for step, seconds, note in rows:
        shown = "skipped" if seconds is None else f"{seconds:.3f}"
        lines.append(f"| {step} | {shown} | {facts['nodes']} | {facts['edges']} | {note} |")
    lines += ["", "| machine | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in machine]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000, help="ONNX ops in the synthetic graph (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic graph seed (default 0)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per step, the best is kept (default 3)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"report file (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.repeat < 1:
        parser.error("--nodes and --repeat must be positive")
    machine = machine_info()  # before the run, so the load average is other processes' load
    rows, facts = run(args.nodes, args.seed, args.repeat)
    report = render(rows, facts, machine, args.seed, args.repeat)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report, end="")
    budget = index_budget(args.nodes)
    if facts["index_seconds"] >= budget:
        print(f"index build over budget: {facts['index_seconds']:.3f} s >= {budget:g} s", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
