"""Baechi and Expert placement benchmark: writes ``benchmarks/results/place_baechi.md``.

Builds a layered synthetic graph (``devtools/synth.py``: seeded, with ``cost`` and ``mem``; 30k nodes
by default), then times each placer of ``place{algo=m-topo|m-etf|m-sct|expert}`` on it: the wall
time of the placer function itself (the coarse problem is built once beforehand and reported on
its own line), plus the simulated makespan of the result for context. For reference, Celeritas
§6 reports 129.5 s for the published m-SCT on a 36k-node Transformer.

Usage::

    python -m devtools.bench_place_baechi [--nodes 30000] [--cluster 4xV100] [--out benchmarks/results/place_baechi.md]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from devtools.synth import make_synthetic_module
from graphir.driver import load_builtin_passes
from graphir.ir import Module
from graphir.passes.place import PLACERS, PlacementContext
from graphir.passes.place.problem import PlacementProblem, list_schedule, write_placement
from graphir.simulator import simulate

ALGOS = ("m-topo", "m-etf", "m-sct", "expert")


def bench(num_nodes: int, cluster: str, seed: int = 0) -> tuple[list[str], list[dict[str, object]]]:
    """Time every placer on one synthetic graph; returns header lines and one row per placer."""
    load_builtin_passes()
    module: Module = make_synthetic_module(num_nodes, seed)
    module.cluster_spec = cluster
    index = module.graph.index()
    started = time.perf_counter()
    problem = PlacementProblem.from_module(module)
    problem_seconds = time.perf_counter() - started
    header = [
        f"graph: devtools/synth.py, {index.num_nodes} nodes, {index.num_edges} edges, seed {seed}; cluster {cluster}",
        f"coarse problem (PlacementProblem.from_module): {problem_seconds:.2f} s",
    ]
    rows: list[dict[str, object]] = []
    for algo in ALGOS:
        print(f"bench_place_baechi: {algo} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        placement = PLACERS[algo]().place(problem, PlacementContext())
        seconds = time.perf_counter() - started
        device = np.asarray(placement.device, dtype=np.int64)
        start = placement.start if placement.start is not None else list_schedule(problem, device)[0]
        write_placement(module, problem, device, start)
        result = simulate(module)
        rows.append(
            {
                "algo": algo,
                "seconds": seconds,
                "makespan": result.makespan,
                "oom": ",".join(result.oom_devices) or "-",
                "stats": ", ".join(f"{k}={_fmt(v)}" for k, v in placement.stats.items()),
            }
        )
        print(f"bench_place_baechi: {algo} {seconds:.2f} s", file=sys.stderr, flush=True)
    return header, rows


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render(header: list[str], rows: list[dict[str, object]]) -> str:
    """The Markdown report."""
    lines = [
        "# Baechi and Expert placers: placement wall time",
        "",
        "Written by `python -m devtools.bench_place_baechi`. Placement time is the placer function alone",
        "(m-SCT includes its HiGHS LP). Published reference: m-SCT took 129.5 s on a 36k-node",
        "Transformer (Celeritas §6, Table 4).",
        "",
        f"machine: {platform.machine()}, Python {platform.python_version()}",
        "",
        *[f"- {line}" for line in header],
        "",
        "| placer | placement wall (s) | simulated makespan (s) | OOM | placer statistics |",
        "|---|---:|---:|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['algo']} | {row['seconds']:.2f} | {row['makespan']:.4g} | {row['oom']} | {row['stats']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the Markdown file."""
    parser = argparse.ArgumentParser(prog="bench_place_baechi", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=30000, help="nodes of the synthetic graph (default 30000)")
    parser.add_argument("--cluster", default="4xV100", help="cluster spec (default 4xV100)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic graph seed (default 0)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/place_baechi.md"), help="output file")
    args = parser.parse_args(argv)
    header, rows = bench(args.nodes, args.cluster, args.seed)
    text = render(header, rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
