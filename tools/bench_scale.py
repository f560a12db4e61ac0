"""Scaling benchmark: synthetic graphs of 10k, 100k and 1M nodes through the whole graphir-opt job.

For each size ``n`` (a seeded :mod:`graphir.tools.synth` module, written once to ``build/scale/``):

* **stages**, timed one by one in a child process: ``parse`` (the `.gir` text), ``verify`` (the
  pass manager's checks: the full one before the first pass plus the incremental ones after each),
  each pass of ``fuse{algo=cpd-topo},place{algo=adjusting},simulate``, and ``print`` (the result
  as `.gir` text);
* **commands**, run as a user would: ``graphir-opt s.gir --passes=... -o out.gir`` and
  ``graphir-opt s.gir --emit=summary``, with their wall time and peak RSS (``wait4``'s
  ``ru_maxrss`` of the child).

The results go to ``benchmarks/results/scale.md`` with a log-log plot of seconds against nodes
per stage (``scale.png``) and, per stage, the exponent ``k`` of the least-squares fit
``t ~ n**k`` over the sizes (1 is linear; n log n over 10k..1M fits as about 1.1).

Command line::

    python tools/bench_scale.py                      # 10k, 100k, 1M (a few minutes on 2 cores)
    python tools/bench_scale.py --sizes 10000 100000 --out /tmp/scale.md
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "fuse{algo=cpd-topo},place{algo=adjusting},simulate"
SIZES = (10_000, 100_000, 1_000_000)
SEED = 0
STAGES = ("parse", "verify", "fuse", "place", "simulate", "print")


def _bin(name: str) -> str:
    """A console script of the running interpreter's environment (the venv's graphir-opt)."""
    return str(Path(sys.executable).with_name(name))


def synthetic_file(num_nodes: int, directory: Path) -> Path:
    """The seeded synthetic module of ``num_nodes`` nodes as `.gir` text, written once."""
    path = directory / f"synth_{num_nodes}_{SEED}.gir"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        subprocess.run(
            [sys.executable, str(ROOT / "tools" / "synth.py"), str(num_nodes), str(partial), "--seed", str(SEED)],
            check=True,
        )
        partial.rename(path)
    return path


def measure_stages(path: Path) -> dict[str, float]:
    """CPU seconds (user + system of this process) per stage for one file; call it in a fresh child.

    CPU time, not wall time: on a shared machine the wall clock mostly measures the other jobs.
    The pass manager's per-pass clock is pointed at the process CPU clock for the run, so each
    pass record (and ``verify``, the rest of the manager's time) is CPU time too. The collector
    is set up as ``graphir-opt`` sets it (:func:`graphir.gcpause.freeze_after_pauses`).
    """
    import gc
    import types

    import graphir.pass_manager as pass_manager_module
    from graphir.gcpause import freeze_after_pauses
    from graphir.parser import parse_module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.printer import print_module

    gc.freeze()
    freeze_after_pauses()
    clock = time.process_time
    text = path.read_text()
    times: dict[str, float] = {}
    started = clock()
    module = parse_module(text, str(path))
    times["parse"] = clock() - started
    del text
    manager = PassManager(parse_pipeline(PIPELINE))
    pass_manager_module.time = types.SimpleNamespace(perf_counter=clock)  # type: ignore[attr-defined]
    started = clock()
    records = manager.run(module, PassContext(seed=SEED))
    total = clock() - started
    pass_manager_module.time = time  # type: ignore[attr-defined]
    for record in records:
        times[record.pass_.name] = times.get(record.pass_.name, 0.0) + record.seconds
    times["verify"] = total - sum(record.seconds for record in records)
    started = clock()
    with open(os.devnull, "w") as sink:
        print_module(module, sink)
    times["print"] = clock() - started
    return times


def run_command(argv: list[str]) -> tuple[float, int, float]:
    """Wall seconds, peak RSS bytes and CPU seconds (user + system) of a command (output discarded)."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    stderr = process.stderr.read().decode() if process.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {stderr.strip()}")
    return wall, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime  # Linux reports KiB


def fitted_exponent(sizes: Sequence[int], seconds: Sequence[float]) -> float:
    """Least-squares slope of log(seconds) against log(nodes)."""
    xs = [math.log(n) for n in sizes]
    ys = [math.log(max(s, 1e-6)) for s in seconds]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / var if var else float("nan")


def plot(results: dict[int, dict], path: Path) -> None:
    """Log-log plot of CPU seconds per stage (and whole commands) against nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    figure, axes = plt.subplots(figsize=(7, 5))
    for stage in STAGES:
        axes.plot(sizes, [results[n]["stages"][stage] for n in sizes], marker="o", label=stage)
    axes.plot(sizes, [results[n]["passes_cpu"] for n in sizes], marker="s", linestyle="--", label="whole command")
    axes.plot(sizes, [results[n]["summary_cpu"] for n in sizes], marker="s", linestyle=":", label="--emit=summary")
    reference = [results[sizes[0]]["passes_cpu"] * n / sizes[0] for n in sizes]
    axes.plot(sizes, reference, color="grey", linewidth=0.8, label="slope 1 (linear)")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("nodes")
    axes.set_ylabel("CPU seconds (user + system)")
    axes.set_title(f"graphir-opt --passes='{PIPELINE}'")
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def report(results: dict[int, dict], plot_name: str, elapsed: float) -> str:
    """The Markdown page."""
    sizes = sorted(results)
    header = "| stage | " + " | ".join(f"{n:,} nodes" for n in sizes) + " | fitted exponent |"
    rule = "|---|" + "---:|" * (len(sizes) + 1)
    lines = [
        "# Scaling: synthetic graphs through parse, fuse, place, simulate, print",
        "",
        "Written by `make bench-scale` (`python tools/bench_scale.py`). Inputs: `tools/synth.py N --seed 0`",
        f"(layered random DAGs, ~1.5 edges per node, cost and mem annotations). Pipeline: `{PIPELINE}`.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()};"
        f" shared with other jobs, so the stages are timed in CPU seconds (the wall clock mostly measures"
        f" the other jobs) and the whole commands in both. Whole run: {elapsed / 60:.1f} min.",
        "",
        "## Stages (CPU seconds, user + system, in one process)",
        "",
        "`verify` is the pass manager's checking: one full check before the first pass, then only what",
        "each pass may have invalidated (`--verify-each` restores a full check after every pass).",
        "The exponent `k` is the least-squares slope of log t against log n over the sizes: 1 is linear,",
        "n log n over 10k..1M fits as about 1.1.",
        "",
        header,
        rule,
    ]
    for stage in STAGES:
        seconds = [results[n]["stages"][stage] for n in sizes]
        k = fitted_exponent(sizes, seconds)
        lines.append(f"| {stage} | " + " | ".join(f"{s:.2f}" for s in seconds) + f" | {k:.2f} |")
    parse_rate = [n / results[n]["stages"]["parse"] for n in sizes]
    print_rate = [n / results[n]["stages"]["print"] for n in sizes]
    lines += [
        "| *parse, nodes per CPU second* | " + " | ".join(f"{r:,.0f}" for r in parse_rate) + " | |",
        "| *print, nodes per CPU second* | " + " | ".join(f"{r:,.0f}" for r in print_rate) + " | |",
        "| *1-min load average before / after the commands* | "
        + " | ".join(f"{results[n].get('load_before', float('nan')):.1f} / {results[n]['load']:.1f}" for n in sizes)
        + " | |",
        "",
        "## Whole commands (wall seconds, peak RSS)",
        "",
        header.replace("stage", "command"),
        rule,
    ]
    for key, label in (("passes", "`graphir-opt s.gir --passes=... -o out.gir`"), ("summary", "`--emit=summary`")):
        walls = [results[n][f"{key}_wall"] for n in sizes]
        k = fitted_exponent(sizes, walls)
        lines.append(f"| {label} wall | " + " | ".join(f"{w:.1f} s" for w in walls) + f" | {k:.2f} |")
        cpus = [results[n].get(f"{key}_cpu", float("nan")) for n in sizes]
        k = fitted_exponent(sizes, cpus)
        lines.append(f"| {label} CPU (user + sys) | " + " | ".join(f"{c:.1f} s" for c in cpus) + f" | {k:.2f} |")
        rss = [results[n][f"{key}_rss"] / 2**30 for n in sizes]
        lines.append(f"| {label} peak RSS | " + " | ".join(f"{r:.2f} GiB" for r in rss) + " | |")
    lines += ["", f"![seconds against nodes, log-log]({plot_name})", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the page and the plot."""
    parser = argparse.ArgumentParser(prog="bench_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="node counts (default 10k 100k 1M)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.md")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "scale", help="where inputs and outputs go")
    parser.add_argument("--stages-of", type=Path, help=argparse.SUPPRESS)  # child mode: print stage times
    args = parser.parse_args(argv)
    if args.stages_of is not None:
        print(json.dumps(measure_stages(args.stages_of)))
        return 0
    if len(set(args.sizes)) < 2:
        print("bench_scale: error: --sizes needs at least two different sizes for a fit", file=sys.stderr)
        return 1
    started = time.perf_counter()
    results: dict[int, dict] = {}
    for n in sorted(set(args.sizes)):
        path = synthetic_file(n, args.work)
        child = subprocess.run(
            [sys.executable, __file__, "--stages-of", str(path)], check=True, capture_output=True, text=True
        )
        stages = json.loads(child.stdout)
        opt = _bin("graphir-opt")
        load_before = os.getloadavg()[0]
        passes_wall, passes_rss, passes_cpu = run_command(
            [opt, str(path), f"--passes={PIPELINE}", "-o", str(args.work / "out.gir")]
        )
        summary_wall, summary_rss, summary_cpu = run_command([opt, str(path), "--emit=summary"])
        results[n] = {
            "load": os.getloadavg()[0],
            "load_before": load_before,
            "stages": stages,
            "passes_wall": passes_wall,
            "passes_rss": passes_rss,
            "passes_cpu": passes_cpu,
            "summary_wall": summary_wall,
            "summary_rss": summary_rss,
            "summary_cpu": summary_cpu,
        }
        print(f"bench_scale: {n} nodes: {json.dumps(results[n])}", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_path = args.out.with_suffix(".png")
    plot(results, plot_path)
    args.out.write_text(report(results, plot_path.name, time.perf_counter() - started))
    print(f"bench_scale: wrote {args.out} and {plot_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
