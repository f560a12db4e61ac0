"""Scaling benchmark: synthetic graphs of 10k, 100k and 1M nodes through the whole graphir-opt job.

For each size ``n`` (a seeded :mod:`devtools.synth` module, written once to ``build/scale/``):

* **stages**, timed one by one in a child process: ``parse`` (the `.gir` text), ``verify`` (the
  pass manager's checks: the full one before the first pass plus the incremental ones after each),
  each pass of ``fuse{algo=cpd-topo},place{algo=adjusting},simulate``, and ``print`` (the result
  as `.gir` text);
* **commands**, the issue's two, run as a user would: ``graphir-opt s.gir
  --passes='fuse{algo=cpd-topo},place{algo=adjusting}' -o out.gir`` and ``graphir-opt s.gir
  --emit=summary``, each ``--repeat`` times (default 3): the median wall and CPU seconds (user +
  system, ``wait4``'s rusage of the child) and the largest peak RSS (``ru_maxrss``). The package's
  modules are compiled to bytecode first (``compileall``), as ``pip install`` does, so no run pays
  for compiling them (an environment with ``PYTHONDONTWRITEBYTECODE`` would otherwise compile
  them on every start).

* **importers**, at each size up to ``--import-max`` (default 100k): the same kind of seeded graph as
  an ONNX file (:mod:`devtools.synth_onnx`) and as a TensorFlow GraphDef
  (:mod:`devtools.synth_tf`), each read by :func:`graphir.importers.load_module` in a fresh
  process after its framework is imported (CPU and wall seconds of the call alone, the collector set
  up as ``graphir-opt`` sets it), and by the whole ``graphir-opt FILE --emit=summary`` (which also
  pays for starting Python and importing the framework: ``import tensorflow`` alone is seconds).

The results go to ``benchmarks/results/scale.md`` with a log-log plot of seconds against nodes
per stage (``scale.png``) and, per stage, the exponent ``k`` of the least-squares fit
``t ~ n**k`` over the sizes (1 is linear; n log n over 10k..1M fits as about 1.1).

Command line::

    python -m devtools.bench_scale                      # 10k, 100k, 1M (a few minutes on 2 cores)
    python -m devtools.bench_scale --sizes 10000 100000 --out /tmp/scale.md
"""

from __future__ import annotations

import argparse
import compileall
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from devtools import child_env

ROOT = Path(__file__).resolve().parents[1]
PIPELINE = "fuse{algo=cpd-topo},place{algo=adjusting},simulate"
COMMAND_PIPELINE = "fuse{algo=cpd-topo},place{algo=adjusting}"
"""The issue's command: the pipeline a user runs on the 100k and 1M graphs (no simulate)."""
TARGETS = {
    (100_000, "passes"): (5.0, None),
    (100_000, "summary"): (2.0, None),
    (1_000_000, "passes"): (60.0, 6.0),
    (1_000_000, "summary"): (20.0, 4.0),
}
"""(nodes, command) -> (wall seconds, peak RSS GB or None): the issue's targets."""
PACKAGE_DIRS = ("graphir", "passes", "backends", "tools")
SIZES = (10_000, 100_000, 1_000_000)
SEED = 0
STAGES = ("parse", "verify", "fuse", "place", "simulate", "print")
IMPORTERS = {"onnx": ("ONNX", "synth_onnx.py", ".onnx"), "tf": ("TF GraphDef", "synth_tf.py", ".pb")}
"""Importer -> (its name on the page, the devtools/ script writing its seeded synthetic file, the file's suffix)."""
IMPORT_TARGET = (100_000, 5.0)
"""The issue's importer target: (nodes, seconds of the import)."""
IMPORT_MAX = 100_000


def _bin(name: str) -> str:
    """A console script of the running interpreter's environment (the venv's graphir-opt)."""
    return str(Path(sys.executable).with_name(name))


def synthetic_file(num_nodes: int, directory: Path, script: str = "synth.py", suffix: str = ".gir") -> Path:
    """The seeded synthetic graph of ``num_nodes`` nodes that ``devtools/<script>`` writes, written once.

    ``synth.py`` writes `.gir` text; the importers' inputs come from ``synth_onnx.py`` and
    ``synth_tf.py`` (:data:`IMPORTERS`).
    """
    path = directory / f"synth_{num_nodes}_{SEED}{suffix}"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        subprocess.run(
            [sys.executable, "-m", f"devtools.{Path(script).stem}", str(num_nodes), str(partial), "--seed", str(SEED)],
            check=True,
            env=child_env(),
        )
        partial.rename(path)
    return path


def _child_runs(mode: str, path: Path, repeat: int) -> list[dict]:
    """What this script prints in child mode ``mode`` (``--stages-of``, ``--import-of``) for ``path``.

    Run in ``repeat`` fresh processes: one run is noisy, the caller takes medians.
    """
    argv = [sys.executable, __file__, mode, str(path)]
    return [
        json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        for _ in range(max(1, repeat))
    ]


def measure_import(path: Path) -> dict[str, float]:
    """CPU and wall seconds of :func:`~graphir.importers.load_module` on ``path``; call it in a fresh child.

    The framework the importer needs is imported first (its import is a fixed cost of seconds
    that the whole command below includes), and the collector is set up as ``graphir-opt`` sets
    it.
    """
    import gc

    from graphir.gcpause import freeze_after_pauses
    from graphir.importers import load_module

    if path.suffix == ".pb":
        import tensorflow  # noqa: F401
    else:
        import onnx  # noqa: F401
    gc.freeze()
    freeze_after_pauses()
    cpu, wall = time.process_time(), time.perf_counter()
    module = load_module(path)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu": cpu, "wall": wall, "nodes": len(module.graph)}


def measure_importers(num_nodes: int, work: Path, repeat: int) -> dict[str, dict]:
    """Per importer: the median of ``repeat`` fresh-process imports, and the whole ``--emit=summary`` command."""
    found: dict[str, dict] = {}
    for kind, (_, script, suffix) in IMPORTERS.items():
        path = synthetic_file(num_nodes, work, script, suffix)
        runs = _child_runs("--import-of", path, repeat)
        found[kind] = {
            "cpu": statistics.median(r["cpu"] for r in runs),
            "wall": statistics.median(r["wall"] for r in runs),
            "runs": runs,
            "summary": run_repeated([_bin("graphir-opt"), str(path), "--emit=summary"], repeat),
        }
    return found


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
    from graphir.driver import load_builtin_passes
    from graphir.gcpause import freeze_after_pauses
    from graphir.parser import parse_module
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline
    from graphir.printer import PRINT_JOBS, print_module

    load_builtin_passes()
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
    pass_manager_module.time = types.SimpleNamespace(perf_counter=clock)
    started = clock()
    records = manager.run(module, PassContext(seed=SEED))
    total = clock() - started
    pass_manager_module.time = time
    for record in records:
        times[record.pass_.name] = times.get(record.pass_.name, 0.0) + record.seconds
    times["verify"] = total - sum(record.seconds for record in records)
    # One printing process: a forked job's CPU time would not be on this process's clock.
    token = PRINT_JOBS.set(1)
    started = clock()
    with open(os.devnull, "w") as sink:
        print_module(module, sink)
    times["print"] = clock() - started
    PRINT_JOBS.reset(token)
    return times


class _Slots:
    __slots__ = ("name", "table", "items")


def yardstick() -> float:
    """CPU seconds of a fixed pure-Python workload, the best of 3 in this process; call it in a fresh child.

    Sessions of this project run on machines of one kind but not of one speed: the same code has
    taken 1.4 times as long on one 2-core machine as on another. The workload builds what the
    parser builds per node (an object with slots, a dict, a list, a tuple, a float, a string) for
    300,000 items, so a page's yardstick says how fast its machine was at this kind of work, and
    two pages' stage times compare after dividing by their yardsticks.
    """
    best = math.inf
    for _ in range(3):
        started = time.process_time()
        kept: list[_Slots] = []
        for i in range(300_000):
            item = _Slots()
            item.name = "v" + str(i)
            item.table = {"cost": i * 1e-6, "mem": (i, i)}
            item.items = [item.name, i]
            kept.append(item)
        best = min(best, time.process_time() - started)
        del kept
    return best


def machine_text() -> str:
    """The processor's model name (Linux's /proc/cpuinfo), or what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown processor"


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


def run_repeated(argv: list[str], repeat: int) -> dict[str, float]:
    """The median wall and CPU seconds and the largest peak RSS of ``repeat`` runs of a command."""
    runs = [run_command(argv) for _ in range(max(1, repeat))]
    return {
        "wall": statistics.median(r[0] for r in runs),
        "rss": max(r[1] for r in runs),
        "cpu": statistics.median(r[2] for r in runs),
        "walls": [r[0] for r in runs],
        "cpus": [r[2] for r in runs],
    }


def compile_package() -> None:
    """Bytecode for every module of the package, as an installed (non-editable) package has."""
    for name in PACKAGE_DIRS:
        compileall.compile_dir(str(ROOT / name), quiet=1)


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
    passes_cpu = [results[n]["passes_cpu"] for n in sizes]
    axes.plot(sizes, passes_cpu, marker="s", linestyle="--", label="fuse,place command (CPU)")
    summary_cpu = [results[n]["summary_cpu"] for n in sizes]
    axes.plot(sizes, summary_cpu, marker="s", linestyle=":", label="--emit=summary (CPU)")
    imported = [n for n in sizes if "importers" in results[n]]
    if len(imported) >= 2:
        for kind, style in (("onnx", "-."), ("tf", (0, (1, 3)))):
            seconds = [results[n]["importers"][kind]["cpu"] for n in imported]
            axes.plot(imported, seconds, marker="^", linestyle=style, label=f"{kind} import (CPU)")
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


def _load_text(load: Sequence[float] | None) -> str:
    return " / ".join(f"{x:.1f}" for x in load) if load else "n/a"


def report(
    results: dict[int, dict], plot_name: str, elapsed: float, repeat: int, machine: dict[str, object] | None = None
) -> str:
    """The Markdown page (``machine``: the processor and the yardstick's seconds before and after the runs)."""
    sizes = sorted(results)
    header = "| stage | " + " | ".join(f"{n:,} nodes" for n in sizes) + " | fitted exponent |"
    rule = "|---|" + "---:|" * (len(sizes) + 1)
    lines = [
        "# Scaling: synthetic graphs through parse, fuse, place, simulate, print",
        "",
        "Written by `make bench-scale` (`python -m devtools.bench_scale`). Inputs: `devtools/synth.py N --seed 0`",
        f"(layered random DAGs, ~1.5 edges per node, cost and mem annotations). Stage pipeline: `{PIPELINE}`;",
        f"the whole commands are the issue's: `graphir-opt s.gir --passes='{COMMAND_PIPELINE}' -o out.gir` and",
        f"`graphir-opt s.gir --emit=summary`, each run {repeat} times (median wall and CPU, largest peak RSS),",
        "from bytecode compiled beforehand (as `pip install` leaves a package).",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; whole run:"
        f" {elapsed / 60:.1f} min. CPU seconds (user + system) are given beside wall seconds: on a shared machine"
        " the wall clock also measures the other jobs (see the load averages).",
        *_machine_lines(machine),
        "",
        "## Stages (CPU seconds, user + system, in one process)",
        "",
        f"Each stage's time is the median over {repeat} runs of the stage pipeline, each in a fresh process.",
        "`verify` is the pass manager's checking: one full check before the first pass, then only what",
        "each pass may have invalidated (`--verify-each` restores a full check after every pass).",
        "`print` is one process (`--jobs 1`); the whole `-o` command below prints a graph of 20,000 to",
        "400,000 nodes in two forked processes when two cores are free (`--jobs`), its CPU including the",
        "child's; a larger graph in one.",
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
        "",
        "## Whole commands (median of the runs; peak RSS the largest)",
        "",
        header.replace("stage", "command"),
        rule,
    ]
    for key, label in (("passes", "`--passes=... -o out.gir`"), ("summary", "`--emit=summary`")):
        walls = [results[n][key]["wall"] for n in sizes]
        k = fitted_exponent(sizes, walls)
        lines.append(f"| {label} wall | " + " | ".join(f"{w:.2f} s" for w in walls) + f" | {k:.2f} |")
        cpus = [results[n][key]["cpu"] for n in sizes]
        k = fitted_exponent(sizes, cpus)
        lines.append(f"| {label} CPU (user + sys) | " + " | ".join(f"{c:.2f} s" for c in cpus) + f" | {k:.2f} |")
        rss = [results[n][key]["rss"] / 2**30 for n in sizes]
        lines.append(f"| {label} peak RSS | " + " | ".join(f"{r:.2f} GiB" for r in rss) + " | |")
    lines.append(
        "| *load average (1, 5, 15 min) before the commands* | "
        + " | ".join(_load_text(results[n].get("load_before")) for n in sizes)
        + " | |"
    )
    lines.append(
        "| *load average after* | " + " | ".join(_load_text(results[n].get("load_after")) for n in sizes) + " | |"
    )
    lines += ["", "## The issue's targets", ""]
    lines.append("| command | nodes | target | wall (median) | CPU (median) | peak RSS |")
    lines.append("|---|---:|---|---:|---:|---:|")
    for (n, key), (wall_target, rss_target) in sorted(TARGETS.items()):
        if n not in results:
            continue
        r = results[n][key]
        target = f"<= {wall_target:g} s wall" + (f", <= {rss_target:g} GB RSS" if rss_target else "")
        label = "fuse,place -o" if key == "passes" else "--emit=summary"
        wall_ok = "met" if r["wall"] <= wall_target else "not met"
        cpu_ok = "within" if r["cpu"] <= wall_target else "over"
        rss_text = f"{r['rss'] / 1e9:.2f} GB"
        if rss_target:
            rss_text += " (met)" if r["rss"] / 1e9 <= rss_target else " (not met)"
        wall_text = f"{r['wall']:.2f} s ({wall_ok})"
        cpu_text = f"{r['cpu']:.2f} s ({cpu_ok})"
        lines.append(f"| `{label}` | {n:,} | {target} | {wall_text} | {cpu_text} | {rss_text} |")
    lines += _importer_lines(results, repeat)
    lines += ["", f"![seconds against nodes, log-log]({plot_name})", ""]
    return "\n".join(lines)


def _importer_lines(results: dict[int, dict], repeat: int) -> list[str]:
    sizes = [n for n in sorted(results) if "importers" in results[n]]
    if not sizes:
        return []
    lines = [
        "",
        "## Importers",
        "",
        "The same kind of layered graph as an ONNX file (`devtools/synth_onnx.py N --seed 0`) and as a TF",
        "GraphDef (`devtools/synth_tf.py N --seed 0`). `load_module` is the import alone, in a fresh process",
        f"after `import onnx` / `import tensorflow` (median of {repeat} processes); the whole command",
        "`graphir-opt FILE --emit=summary` also starts Python and imports the framework",
        "(`import tensorflow` alone takes seconds) and prints the summary.",
        "",
        "| importer | " + " | ".join(f"{n:,} nodes" for n in sizes) + " | fitted exponent |",
        "|---|" + "---:|" * (len(sizes) + 1),
    ]
    for kind, (name, _, _) in IMPORTERS.items():
        row = [results[n]["importers"][kind] for n in sizes]
        k = fitted_exponent(sizes, [r["cpu"] for r in row]) if len(sizes) > 1 else float("nan")
        lines.append(f"| {name} `load_module` CPU | " + " | ".join(f"{r['cpu']:.2f} s" for r in row) + f" | {k:.2f} |")
        lines.append(f"| {name} `load_module` wall | " + " | ".join(f"{r['wall']:.2f} s" for r in row) + " | |")
        lines.append(
            f"| {name} `--emit=summary` wall (whole command) | "
            + " | ".join(f"{r['summary']['wall']:.2f} s" for r in row)
            + " | |"
        )
        lines.append(
            f"| {name} `--emit=summary` peak RSS | "
            + " | ".join(f"{r['summary']['rss'] / 2**30:.2f} GiB" for r in row)
            + " | |"
        )
    n, target = IMPORT_TARGET
    if n in sizes:
        lines.append("")
        for kind, (name, _, _) in IMPORTERS.items():
            wall = results[n]["importers"][kind]["wall"]
            verdict = "met" if wall <= target else "not met"
            lines.append(f"- {name} import of {n:,} nodes: {wall:.2f} s wall, target <= {target:g} s: {verdict}.")
    return lines


def _machine_lines(machine: dict[str, object] | None) -> list[str]:
    if not machine:
        return []
    before, after = machine["yardstick_before"], machine["yardstick_after"]
    return [
        f"Processor: {machine['processor']}. Yardstick ({yardstick.__name__} in `devtools/bench_scale.py`: a fixed"
        f" pure-Python loop building 300,000 small objects, best of 3, CPU seconds): {before:.3f} s before the"
        f" runs, {after:.3f} s after. Divide by it to compare pages written on different machines.",
    ]


def _child_yardstick() -> float:
    """:func:`yardstick` in a fresh interpreter (its heap as a new process's)."""
    run = subprocess.run([sys.executable, __file__, "--yardstick"], check=True, capture_output=True, text=True)
    return float(run.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and write the page and the plot."""
    parser = argparse.ArgumentParser(prog="bench_scale", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="node counts (default 10k 100k 1M)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of the stage pipeline and of each whole command (median; default 3)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.md")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "scale", help="where inputs and outputs go")
    parser.add_argument(
        "--import-max",
        type=int,
        default=IMPORT_MAX,
        help="time the ONNX and TF importers at the sizes up to this many nodes (default 100k; 0: none)",
    )
    parser.add_argument("--stages-of", type=Path, help=argparse.SUPPRESS)  # child mode: print stage times
    parser.add_argument("--import-of", type=Path, help=argparse.SUPPRESS)  # child mode: print an import's times
    parser.add_argument("--yardstick", action="store_true", help=argparse.SUPPRESS)  # child mode: print it
    args = parser.parse_args(argv)
    if args.stages_of is not None:
        print(json.dumps(measure_stages(args.stages_of)))
        return 0
    if args.yardstick:
        print(f"{yardstick():.6f}")
        return 0
    if args.import_of is not None:
        print(json.dumps(measure_import(args.import_of)))
        return 0
    if len(set(args.sizes)) < 2:
        print("bench_scale: error: --sizes needs at least two different sizes for a fit", file=sys.stderr)
        return 1
    started = time.perf_counter()
    compile_package()
    machine: dict[str, object] = {"processor": machine_text(), "yardstick_before": _child_yardstick()}
    results: dict[int, dict] = {}
    for n in sorted(set(args.sizes)):
        path = synthetic_file(n, args.work)
        stage_runs = _child_runs("--stages-of", path, args.repeat)
        stages = {stage: statistics.median(run[stage] for run in stage_runs) for stage in stage_runs[0]}
        opt = _bin("graphir-opt")
        load_before = list(os.getloadavg())
        passes = run_repeated(
            [opt, str(path), f"--passes={COMMAND_PIPELINE}", "-o", str(args.work / "out.gir")], args.repeat
        )
        summary = run_repeated([opt, str(path), "--emit=summary"], args.repeat)
        results[n] = {
            "load_before": load_before,
            "load_after": list(os.getloadavg()),
            "stages": stages,
            "stage_runs": stage_runs,
            "passes": passes,
            "summary": summary,
            "passes_cpu": passes["cpu"],
            "summary_cpu": summary["cpu"],
        }
        if n <= args.import_max:
            results[n]["importers"] = measure_importers(n, args.work, args.repeat)
        print(f"bench_scale: {n} nodes: {json.dumps(results[n])}", file=sys.stderr)
    machine["yardstick_after"] = _child_yardstick()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    plot_path = args.out.with_suffix(".png")
    plot(results, plot_path)
    args.out.write_text(report(results, plot_path.name, time.perf_counter() - started, args.repeat, machine))
    saved = {**{str(n): result for n, result in results.items()}, "machine": machine}
    args.out.with_suffix(".json").write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    print(f"bench_scale: wrote {args.out}, {plot_path} and {args.out.with_suffix('.json')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
