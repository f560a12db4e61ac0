"""Benchmark ``place{algo=ilp}`` against the list schedulers it warm-starts from.

For each zoo model and cluster preset, runs (one at a time, in a subprocess)::

    graphir-opt zoo:<model> --cluster=<preset> \
        --passes='profile,fuse{algo=acyclic-batch target=150},place{algo=ilp time-limit=60},simulate' --stats

and writes ``benchmarks/results/ilp.md``: the simulated makespan of every heuristic (recorded by the
ILP's warm start as ``place.heuristic.<algo>-s``), the ILP's simulated makespan, its solver status,
objective, best bound and gap. Usage::

    python -m devtools.bench_ilp [--models lstm_train,resnet50_train] [--time-limit 60] [-o FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

PRESETS = ("pesto", "moirai-inter", "moirai-intra")
MODELS = ("lstm_train", "vgg19_train", "resnet50_train", "gpt_train")
HEURISTICS = ("heft", "dpos", "adjusting", "m-etf")
PIPELINE = "profile,fuse{{algo=acyclic-batch target={target}}},place{{algo=ilp time-limit={limit}}},simulate"


def run_one(model: str, preset: str, limit: float, target: int) -> dict[str, str]:
    """Run the pipeline once; return its ``--stats`` as ``{key: value}`` (``error`` on failure)."""
    command = [
        str(Path(sys.executable).with_name("graphir-opt")),
        f"zoo:{model}",
        f"--cluster={preset}",
        f"--passes={PIPELINE.format(target=target, limit=limit)}",
        "--stats",
        "-o",
        "/dev/null",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    stats: dict[str, str] = {}
    for line in done.stderr.splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            stats[key.strip()] = value.strip()
    if done.returncode != 0:
        stats["error"] = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return stats


def ms(text: str | None) -> str:
    """Seconds as milliseconds with 3 decimals ('-' when missing)."""
    return "-" if text is None else f"{float(text) * 1e3:.3f}"


def table(rows: list[tuple[str, str, dict[str, str]]], limit: float, target: int) -> str:
    """The markdown report."""
    lines = [
        "# place{algo=ilp}: CP-SAT joint placement and scheduling vs. list schedulers",
        "",
        f"`graphir-opt zoo:<model> --cluster=<preset> --passes='{PIPELINE.format(target=target, limit=limit)}'"
        " --stats` (written by `python -m devtools.bench_ilp`). Makespans are simulated (ms).",
        "`ilp` is the simulated makespan of the returned placement: never worse than the warm start (the best",
        "heuristic), which is returned when the solver's schedule simulates worse (`result = warm-start`).",
        "`objective`/`bound` are the CP-SAT model's (coarse-graph semantics, integer time units); gap =",
        "(objective - bound) / objective. `fifo = 0`: too many transfer pairs for the FIFO channel-order",
        "constraints, the channel order was left free (Pesto's relaxation).",
        "",
        "| model | preset | groups | "
        + " | ".join(HEURISTICS)
        + " | ilp | status | objective | bound | gap | fifo | result |",
        "|---|---|---:|" + "---:|" * len(HEURISTICS) + "---:|---|---:|---:|---:|---:|---|",
    ]
    for model, preset, s in rows:
        if "error" in s:
            lines.append(f"| {model} | {preset} | error: {s['error']} |")
            continue
        heuristics = " | ".join(ms(s.get(f"place.heuristic.{h}-s")) for h in HEURISTICS)
        gap = s.get("place.gap")
        lines.append(
            f"| {model} | {preset} | {s.get('place.coarse-nodes', '-')} | {heuristics} | "
            f"{ms(s.get('simulate.makespan-s'))} | {s.get('place.status', '-')} | {ms(s.get('place.objective-s'))} | "
            f"{ms(s.get('place.bound-s'))} | {'-' if gap is None else f'{float(gap):.2%}'} | "
            f"{s.get('place.fifo', '-')} | {s.get('place.result', '-')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--target", type=int, default=150, help="groups for fuse{algo=acyclic-batch}")
    parser.add_argument("-o", "--output", default="benchmarks/results/ilp.md")
    args = parser.parse_args(argv)
    rows = []
    for model in args.models.split(","):
        for preset in args.presets.split(","):
            stats = run_one(model, preset, args.time_limit, args.target)
            rows.append((model, preset, stats))
            print(f"{model} {preset}: {stats.get('simulate.makespan-s', stats.get('error'))}", file=sys.stderr)
            Path(args.output).write_text(table(rows, args.time_limit, args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
