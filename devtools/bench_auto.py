"""Speed of ``place{algo=auto}`` on a 30,000-node synthetic graph (issue 15): ``benchmarks/results/auto.md``.

The graph is :func:`devtools.synth.make_synthetic_module` (30,000 nodes, seed 0) on the
Celeritas testbed. Measured, each once after a warm-up of the imports:

* end to end: ``graphir-opt FILE --cluster=celeritas --passes=PIPELINE -o /dev/null`` in a fresh
  process (import, parse, verify, passes, output), for the pipelines listed in :data:`PIPELINES`,
  :data:`RUNS` times each: median wall and median CPU (user + system of the child) seconds; the
  same for ``place{algo=single}``, the floor every pipeline pays (parse, verify, print);
* the portfolio's members separately, on the problem ``place`` builds from the same graph (after
  ``fuse`` when the pipeline fuses): each placer's CPU seconds and one simulation of its answer,
  next to the :class:`~graphir.passes.place.auto.WorkModel`'s modelled seconds.

The machine is shared: CPU seconds are the figure to compare with the target; the load average is
recorded with the table.

Command line::

    python -m devtools.bench_auto [--nodes 30000] [--runs 3] [--out benchmarks/results/auto.md]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from devtools.synth import make_synthetic_module
from graphir.driver.clusters import resolve_cluster
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.place import PLACERS, placement_context
from graphir.passes.place.auto import PORTFOLIO, Auto, WorkModel, default_budget
from graphir.passes.place.problem import PlacementProblem, list_schedule
from graphir.pipeline import parse_pipeline
from graphir.printer import print_module

PIPELINES = (
    "place{algo=single}",
    "fuse,place{algo=auto mem-model=liveness}",
    "place{algo=auto mem-model=liveness}",
)
RUNS = 3
MEMBER_CAP = 5.0
"""Members whose modelled time exceeds this many seconds are not timed (reported with their modelled time)."""


def end_to_end(path: Path, pipeline: str) -> tuple[float, float]:
    """(wall, CPU) seconds of ``graphir-opt`` on ``path`` with ``pipeline`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [
            str(Path(sys.executable).with_name("graphir-opt")),
            str(path),
            "--cluster=celeritas",
            f"--passes={pipeline}",
            "-o",
            os.devnull,
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def members(path: Path, fuse: bool) -> tuple[PlacementProblem, list[tuple[str, float, float, float, float]]]:
    """Per portfolio member: (name, placer CPU s, simulation CPU s, modelled s, simulated ms); NaN: not run."""
    from graphir.parser import parse_module

    module = parse_module(path.read_text())
    module.set_cluster(resolve_cluster("celeritas"))
    if fuse:
        PassManager(parse_pipeline("fuse"), verify_each=False).run(module, PassContext())
    problem = PlacementProblem.from_module(module)
    ctx = placement_context(module, PassContext())
    auto = Auto(mem_model="liveness")
    model = WorkModel.of(problem)
    rows = []
    for name in PORTFOLIO:
        modelled = model.member(name, True)
        if modelled > MEMBER_CAP:
            rows.append((name, float("nan"), float("nan"), modelled, float("nan")))
            continue
        began = time.process_time()
        answer = PLACERS[name](**auto._options(name, problem)).place(problem, ctx)
        placed = time.process_time() - began
        start = answer.start if answer.start is not None else list_schedule(problem, answer.device)[0]
        began = time.process_time()
        result = ctx.simulator()(problem, np.asarray(answer.device), np.asarray(start), auto.congestion)
        simulated = time.process_time() - began
        rows.append((name, placed, simulated, modelled, result.makespan * 1e3))
    return problem, rows


def main(argv: Sequence[str] | None = None) -> int:
    """Build the graph, time the pipelines and the members, write the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/auto.md"))
    args = parser.parse_args(argv)
    path = Path("build/bench_auto") / f"synth_{args.nodes}.gir"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(print_module(make_synthetic_module(args.nodes, 0)))
    load = os.getloadavg()[0]
    lines = [
        f"# place{{algo=auto}} on a {args.nodes:,}-node synthetic graph",
        "",
        f"Generated by `python -m devtools.bench_auto --nodes {args.nodes} --runs {args.runs}` "
        "(graph: devtools/synth.py, seed 0; cluster: celeritas, 4x V100 32 GB) on a 2-core machine shared with "
        "other jobs "
        f"(1-minute load average {load:.1f} at the start). Medians of {args.runs} runs; CPU = user + system "
        "seconds of the graphir-opt process.",
        "",
        "| pipeline (graphir-opt, fresh process) | wall (s) | CPU (s) |",
        "|---|--:|--:|",
    ]
    for pipeline in PIPELINES:
        runs = [end_to_end(path, pipeline) for _ in range(args.runs)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        lines.append(f"| `{pipeline}` | {wall:.2f} | {cpu:.2f} |")
        print(pipeline, f"wall {wall:.2f} s, cpu {cpu:.2f} s", flush=True)
    for fuse in (True, False):
        problem, rows = members(path, fuse)
        lines += [
            "",
            f"Members {'after `fuse`' if fuse else 'on the unfused graph'}: {problem.num_nodes:,} coarse nodes, "
            f"default budget {default_budget(problem):.2f} modelled s (a simulation: "
            f"{WorkModel.of(problem).simulation:.3f} s modelled).",
            "",
            "| member | placer CPU (s) | one simulation CPU (s) | modelled (s) | simulated makespan (ms) |",
            "|---|--:|--:|--:|--:|",
        ]
        for name, placed, simulated, modelled, makespan in rows:
            if placed != placed:  # NaN: too slow to time here, as auto's default budget would skip it
                lines.append(f"| {name} | not run (modelled > {MEMBER_CAP:g} s) | | {modelled:.3f} | |")
                continue
            lines.append(f"| {name} | {placed:.3f} | {simulated:.3f} | {modelled:.3f} | {makespan:.1f} |")
            print(name, fuse, f"{placed:.3f} {simulated:.3f} {modelled:.3f} {makespan:.1f}", flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
