"""``parallelize`` on a 100k-node training graph: wall time and peak memory (issue 37: <= 60 s).

The graph is the zoo's GPT at 160 layers (d_model 256, 4 heads, d_ff 1024, vocabulary 50257, batch 8,
sequence 128): one Adam training step traced by TensorFlow (``build_train_graphdef``), 99,191 nodes.
It is built once into ``build/parallelize/`` (about 95 s) and profiled once (``profile``, analytical)
into a ``.gir`` file; then each run times, in a fresh process,

    graphir-opt build/parallelize/gpt160_train.gir --cluster=CLUSTER --passes=parallelize --stats

(wall time, and the peak resident memory of the child), and the page records the plan it chose
and every candidate. A budget is modelled work (deterministic), so every run judges the same
candidates; the wall time varies with the machine's load, which the page records.

Usage::

    python devtools/bench_parallelize.py [--cluster 4xV100] [--repeats 1] [--out PAGE]   # PAGE: parallelize-scale.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "parallelize"
CONFIG = "(('layers', 160), ('d_model', 256), ('heads', 4), ('d_ff', 1024), ('vocab', 50257), ('seq', 128))"
BATCH = 8
TARGET_S = 60.0

BUILD_SCRIPT = f"""
from pathlib import Path
from graphir.importers.tf import load_tensorflow
from graphir.tools.zoo_convert import build_train_graphdef
load_tensorflow("building the benchmark's GPT")
graph_def, _ = build_train_graphdef("gpt", {BATCH}, {CONFIG})
Path(r"{{path}}").write_bytes(graph_def.SerializeToString(deterministic=True))
"""


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def prepare(cluster: str) -> Path:
    """The profiled ``.gir`` of the benchmark's graph (built and profiled when missing)."""
    BUILD.mkdir(parents=True, exist_ok=True)
    graph_def = BUILD / "gpt160_train.pb"
    if not graph_def.exists():
        print(f"bench-parallelize: tracing the 160-layer GPT into {graph_def} (about 95 s)", file=sys.stderr)
        subprocess.run([sys.executable, "-c", BUILD_SCRIPT.format(path=graph_def)], check=True)
    profiled = BUILD / f"gpt160_train.{cluster}.gir"
    if not profiled.exists():
        subprocess.run(
            [_bin("graphir-opt"), str(graph_def), f"--cluster={cluster}", "--passes=profile", "-o", str(profiled)],
            check=True,
        )
    return profiled


@dataclasses.dataclass
class Run:
    """One timed run: wall and CPU (user + sys) seconds, the child's peak RSS, the load at its start, the statistics."""

    wall_s: float
    peak_rss_mb: float
    load: float
    stats: dict[str, str]
    cpu_s: float = 0.0


def count_nodes(path: Path, cluster: str) -> int:
    """Nodes of the module at ``path`` (``graphir-opt --emit=summary``)."""
    done = subprocess.run(
        [_bin("graphir-opt"), str(path), f"--cluster={cluster}", "--emit=summary"], capture_output=True, text=True
    )
    for line in done.stdout.splitlines():
        if line.strip().startswith("nodes:"):
            return int(line.split()[-1])
    return 0


def run_once(path: Path, cluster: str) -> Run:
    """One timed ``parallelize`` in a fresh process."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(
        [_bin("graphir-opt"), str(path), f"--cluster={cluster}", "--passes=parallelize", "--stats", "--emit=summary"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)  # less noisy than wall
    peak = after.ru_maxrss / 1024  # the largest child so far
    stats = {}
    for line in done.stderr.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.startswith("parallelize."):
            stats[key.removeprefix("parallelize.")] = value
    return Run(wall, peak, load, stats, cpu)


def render(runs: list[Run], cluster: str, nodes: int) -> str:
    """The Markdown page."""
    walls = sorted(run.wall_s for run in runs)
    median = walls[len(walls) // 2]
    stats = runs[-1].stats
    loads = ", ".join(f"{run.load:.1f}" for run in runs)
    lines = [
        "# `parallelize` on a 100k-node training graph",
        "",
        f"Written by `python devtools/bench_parallelize.py --cluster {cluster}` on "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC ({platform.machine()}, {os.cpu_count()} logical "
        f"CPUs, Python {platform.python_version()}). Graph: the zoo's GPT at 160 layers (d_model 256, batch {BATCH}, "
        f"seq 128; {nodes} nodes), profiled analytically once; each run is a fresh "
        "`graphir-opt FILE --passes=parallelize --emit=summary`.",
        "",
        f"- wall time: median **{median:.1f} s** over {len(runs)} run(s) (target <= {TARGET_S:.0f} s: "
        f"{'met' if median <= TARGET_S else 'missed'}); runs: {', '.join(f'{w:.1f}' for w in walls)} s",
        f"- CPU time (user + sys) of each run: {', '.join(f'{run.cpu_s:.1f}' for run in runs)} s (the machine is "
        "shared: CPU time varies less with its load than wall time)",
        f"- peak RSS: {max(run.peak_rss_mb for run in runs):.0f} MB; load average at each start: {loads}",
        f"- chosen: `{stats.get('chosen')}` at {stats.get('makespan-ms')} ms simulated; "
        f"{stats.get('simulated')} of {stats.get('candidates')} candidates simulated",
        "",
        "| candidate | verdict |",
        "|---|---|",
        *[f"| {k.removeprefix('cand.')} | {v} |" for k, v in stats.items() if k.startswith("cand.")],
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="4xV100")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "parallelize-scale.md")
    args = parser.parse_args(argv)
    path = prepare(args.cluster)
    nodes = count_nodes(path, args.cluster)
    runs = []
    for k in range(args.repeats):
        run = run_once(path, args.cluster)
        print(
            f"bench-parallelize: run {k + 1}: {run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU, {run.peak_rss_mb:.0f} MB",
            file=sys.stderr,
        )
        runs.append(run)
    args.out.write_text(render(runs, args.cluster, nodes))
    print(f"bench-parallelize: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
