"""Fusion benchmark: writes ``benchmarks/results/fuse.md``.

Measures, on this machine:

1. ``fuse{algo=cpd-topo}`` (defaults R=200, M=0.25) on a 100k-node synthetic graph (budget 3 s);
2. ``fuse{algo=acyclic-batch target=200}`` on synthetic graphs (budget 10 s);
3. every zoo *training* graph already built in the zoo folder (``tools/zoo.py``; this script never
   builds one): nodes and CCR before and after ``profile,fuse{algo=cpd-topo}`` (issue goal: at
   least 20x fewer nodes and 2x lower CCR).

The pass timings cover ``Fuse.run`` alone (array extraction, quotient, order, programme, writing
the groups); the graph index is built beforehand and reported on its own line. Synthetic graphs
come from ``devtools/synth.py`` (seeded layered DAGs with costs) or, when it is missing, from a small
generator in this file.

Usage::

    python -m devtools.bench_fuse [--nodes 100000] [--out benchmarks/results/fuse.md] [--no-zoo]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from graphir.driver import load_builtin_passes
from graphir.ir import Graph, Module
from graphir.pass_infra import Pass, PassContext
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.types import DType, TensorType

REPO = Path(__file__).resolve().parents[1]


def _fallback_synthetic(num_nodes: int, seed: int) -> Module:
    """A layered random DAG with log-normal costs and sizes (used when devtools/synth.py is absent)."""
    rng = np.random.default_rng(seed)
    graph = Graph()
    x = graph.add_input("x", TensorType(DType.F32, (1024,)))
    outputs = [x]
    for i in range(num_nodes):
        k = int(rng.integers(1, 3))
        lo = max(0, len(outputs) - 80)
        inputs = [outputs[int(rng.integers(lo, len(outputs)))] for _ in range(k)]
        size = int(np.clip(rng.lognormal(np.log(65536), 2.0), 1, 1 << 26))
        node = graph.add_node("synth.Op", inputs, [TensorType(DType.F32, (size,))], name=f"n{i}")
        node.cost = float(rng.lognormal(np.log(20e-6), 1.6))
        outputs.append(node.outputs[0])
    graph.set_outputs([outputs[-1]])
    return Module(f"fallback_{num_nodes}", graph, "4xV100")


def synthetic(num_nodes: int, seed: int = 0) -> tuple[Module, str]:
    """A synthetic module and the name of its generator."""
    try:
        sys.path.insert(0, str(REPO))
        from devtools.synth import make_synthetic_module
    except ImportError:
        return _fallback_synthetic(num_nodes, seed), "bench_fuse fallback generator"
    return make_synthetic_module(num_nodes, seed), "devtools/synth.py"


def timed(fn: Callable[[], object], repeats: int = 1) -> tuple[float, object]:
    """Best wall-clock seconds of ``repeats`` runs, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def run_pass(module_factory: Callable[[], Module], pass_: Pass, repeats: int) -> tuple[float, dict]:
    """Best time of ``pass_.run`` on fresh modules whose index is already built."""
    best, stats = float("inf"), {}
    for _ in range(repeats):
        module = module_factory()
        module.graph.index().quotient()
        started = time.perf_counter()
        stats = pass_.run(module, PassContext()).stats
        best = min(best, time.perf_counter() - started)
    return best, stats


def zoo_rows() -> tuple[list[str], list[str]]:
    """Table rows for every built zoo training graph, and the names of those not built."""
    sys.path.insert(0, str(REPO))
    from graphir.importers import load_module
    from graphir.tools.zoo import ENTRIES, zoo_dir

    rows, missing = [], []
    for entry in ENTRIES.values():
        if entry.mode != "train":
            continue
        path = entry.path(zoo_dir())
        if not path.exists():
            missing.append(entry.name)
            continue
        module = load_module(path)
        manager = PassManager(parse_pipeline("profile,fuse{algo=cpd-topo}"), verify_each=False)
        started = time.perf_counter()
        records = manager.run(module, PassContext())
        seconds = time.perf_counter() - started
        stats = next(r.result.stats for r in records if r.pass_.name == "fuse")
        fuse_seconds = next(r.seconds for r in records if r.pass_.name == "fuse")
        before, after = stats["nodes-before"], stats["nodes-after"]
        ccr_before, ccr_after = stats["ccr-before"], stats["ccr-after"]
        node_ratio = before / after
        ccr_ratio = ccr_before / ccr_after if ccr_after else float("inf")
        ok = "yes" if node_ratio >= 20 and ccr_ratio >= 2 else "**no**"
        rows.append(
            f"| {entry.name} | {before} | {after} | {node_ratio:.1f}x | {ccr_before:.3f} | {ccr_after:.3f} "
            f"| {ccr_ratio:.2f}x | {fuse_seconds:.3f} | {seconds:.1f} | {ok} |"
        )
    return rows, missing


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the Markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "fuse.md")
    parser.add_argument("--no-zoo", action="store_true", help="skip the zoo table")
    args = parser.parse_args(argv)
    load_builtin_passes()
    (cpd,) = parse_pipeline("fuse{algo=cpd-topo}")
    (batch,) = parse_pipeline("fuse{algo=acyclic-batch target=200}")
    (dce,) = parse_pipeline("dce")

    gen_seconds, made = timed(lambda: synthetic(args.nodes))
    module, generator = made
    index_seconds, index = timed(lambda: module.graph.index())
    edges = index.num_edges
    print(f"synthetic {args.nodes} nodes, {edges} edges ({generator}) in {gen_seconds:.2f} s", flush=True)

    def fresh(n: int, prune: bool = False) -> Callable[[], Module]:
        def build() -> Module:
            m, _ = synthetic(n)
            if prune:
                dce.run(m, PassContext())
            return m

        return build

    rows = []
    cpd_seconds, cpd_stats = run_pass(fresh(args.nodes), cpd, repeats=3)
    rows.append(("cpd-topo (R=200, M=0.25)", args.nodes, cpd_seconds, cpd_stats, 3.0))
    print(f"cpd-topo: {cpd_seconds:.3f} s {cpd_stats}", flush=True)
    for n, prune in ((20_000, True), (args.nodes, False), (args.nodes, True)):
        seconds, stats = run_pass(fresh(n, prune), batch, repeats=1)
        label = "acyclic-batch target=200" + (" (after dce)" if prune else "")
        rows.append((label, n, seconds, stats, 10.0))
        print(f"{label} on {n}: {seconds:.3f} s {stats}", flush=True)

    lines = [
        "# Fusion benchmark",
        "",
        f"Generated by `devtools/bench_fuse.py` on {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC "
        f"({platform.machine()}, {platform.processor() or 'unknown processor'}, Python {platform.python_version()}).",
        "",
        f"Synthetic graph: `{generator}`, seed 0, **{args.nodes} nodes**, **{edges} edges**, cluster 4xV100 "
        f"(PCIe links). Index build: {index_seconds:.3f} s (not included below). Times are `Fuse.run` wall-clock "
        "seconds (best of 3 for cpd-topo, one run for acyclic-batch).",
        "",
        "| pass | nodes | seconds | budget | nodes after | CCR before | CCR after | details |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, n, seconds, stats, budget in rows:
        if "rounds" in stats:
            per_round = str(stats["merges-per-round"]).split(",")
            shown = ",".join(per_round[:8]) + (f",... ({len(per_round)} rounds)" if len(per_round) > 8 else "")
            details = f"stopped: {stats['stopped']}; merges per round {shown}"
        else:
            details = f"{stats['clusters']} clusters"
        verdict = "ok" if seconds <= budget else "**over**"
        lines.append(
            f"| {label} | {n} | {seconds:.3f} | {budget:.0f} s ({verdict}) | {stats['nodes-after']} "
            f"| {stats['ccr-before']} | {stats['ccr-after']} | {details} |"
        )
    lines += [
        "",
        "`acyclic-batch` merges only along edges (Pesto §3.3). `devtools/synth.py` leaves some variables unused "
        "(isolated nodes), and an isolated node can never be merged, so on the raw graph the rounds stop at "
        "the number of weakly connected components (`stopped: no-feasible-edge`); after `dce` removes them "
        "the target is reached.",
        "",
        "## Zoo training graphs (`profile,fuse{algo=cpd-topo}`, defaults)",
        "",
    ]
    if args.no_zoo:
        lines.append("Skipped (`--no-zoo`).")
    else:
        try:
            zoo, missing = zoo_rows()
        except ImportError as exc:
            zoo, missing = [], []
            lines.append(f"The zoo is not available ({exc}).")
        if zoo:
            lines += [
                "| model | nodes | after | reduction | CCR | CCR after | CCR reduction | fuse s | total s | goal met |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
                *zoo,
            ]
        if missing:
            lines += ["", f"Not built when this ran (build with `python tools/zoo.py NAME`): {', '.join(missing)}."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
