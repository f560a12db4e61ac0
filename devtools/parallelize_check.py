r"""Issue 37's checks: ``fuse,place`` and ``parallelize`` on the zoo's training graphs against the bounds.

Reads the JSON ``graphir-bench`` writes for ``benchmarks/matrix-parallelize.toml`` (the card's default
``fuse,place`` and ``parallelize``) and the placement table's (``benchmarks/matrix-liveness.toml``:
every op placer and ``auto``, the same simulator and congestion rule) and writes, per (model,
cluster):

* the **work bound**: one device's compute (one device's simulated step: its compute with nothing to
  wait for) divided by the cluster's accelerators (its ``gpu`` devices); the smaller of the table's
  ``single`` column and the run's ``single-merged`` (one device after ``merge-constants``, which
  ``parallelize`` applies to every candidate); the **critical path** (``auto.bound-ms``: the
  longest path with one device's durations);
  the **best op placement** of the placement table that fits memory (any placer or ``auto``);
* ``fuse,place`` and ``parallelize`` (with the plan it chose) and each one's ratio to the work bound.

Checks (issue 37's "Must show"):

* ``fuse,place`` fits wherever a placer of the table fits, and is never slower than the best fitting
  op placement (relative :data:`TOLERANCE`);
* ``parallelize`` fits wherever a placer fits, and is never slower than the best fitting op placement;
* on ``gpt_train``, ``bert_large_train`` and ``transformer_train`` on ``celeritas`` and ``fastt``:
  ``parallelize`` within :data:`WORK_BOUND_TARGET` times the work bound;
* on a graph one device holds (the table's ``single`` fits): ``parallelize`` no slower than the
  better of ``auto`` (the table's) and data parallelism (the ``data-parallel`` column: one replica
  per accelerator, TF-slim's shared variables, ``place{algo=data-parallel}``), where that fits.

The page also shows plain METIS on the unfused graph (the ``metis`` column), a bound the brief names.

Command line::

    python -m devtools.parallelize_check benchmarks/results/parallelize.json \
        --table benchmarks/results/placement-liveness.json --out benchmarks/results/parallelize-check.md
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOLERANCE = 1e-6
"""Relative slack of the "never slower" comparisons."""
WORK_BOUND_TARGET = 1.5
"""``parallelize`` <= this times the work bound on the large language models (issue 37)."""
TARGET_MODELS = ("zoo:gpt_train", "zoo:bert_large_train", "zoo:transformer_train")
TARGET_CLUSTERS = ("celeritas", "fastt")
MERGED_SINGLE = "single-merged"
"""The matrix's pipeline of one device after ``merge-constants`` (the graph ``parallelize`` judges has its
equal constants merged per device, so one device's compute is taken on that graph too)."""

KERNELS_PLAN = "parallelize-xla"
KERNELS_SINGLE = "single-xla"
"""The pipelines of benchmarks/matrix-kernels.toml: ``parallelize{kernels=xla}`` and one fused device."""

Cell = dict[str, Any]


def _fits(cell: Cell | None) -> bool:
    return cell is not None and cell.get("error") is None and cell.get("makespan") is not None and not cell.get("oom")


def _ms(cell: Cell | None) -> str:
    if cell is None or cell.get("makespan") is None:
        return "error" if cell is not None and cell.get("error") else "-"
    text = f"{cell['makespan'] * 1e3:.1f}"
    return text if _fits(cell) else f"{text} (OOM)"


def _accelerators(cell: Cell) -> int:
    gpus = [name for name in cell.get("memory_limit", {}) if name.startswith("gpu")]
    return len(gpus) or len(cell.get("memory_limit", {})) or 1


def _row(cells: Sequence[str]) -> str:
    """One markdown table row."""
    return "| " + " | ".join(cells) + " |"


def _groups(results: Sequence[Cell]) -> dict[tuple[str, str], dict[str, Cell]]:
    groups: dict[tuple[str, str], dict[str, Cell]] = {}
    for cell in results:
        groups.setdefault((cell["model"], cell["cluster"]), {})[cell["label"]] = cell
    return groups


def check(new: Sequence[Cell], table: Sequence[Cell]) -> tuple[list[str], list[str]]:
    """Markdown rows and the failed checks (empty: every check holds)."""
    ours, theirs = _groups(new), _groups(table)
    rows: list[str] = []
    failures: list[str] = []
    for (model, cluster), cells in ours.items():
        placers = theirs.get((model, cluster), {})
        default, plan = cells.get("fuse,place"), cells.get("parallelize")
        single = placers.get("single")
        bound = _bound(cells, placers)  # the merged graph's one device, when the run has it, is the stricter bound
        auto = placers.get("auto", {}).get("auto", {})
        critical = auto.get("auto.bound-ms")
        fitting = [c for c in placers.values() if _fits(c)]
        best = min(fitting, key=lambda c: c["makespan"]) if fitting else None
        where = f"{model} on {cluster}"
        notes: list[str] = []
        for label, cell in (("fuse,place", default), ("parallelize", plan)):
            if best is None:
                continue
            if not _fits(cell):
                failures.append(f"{where}: {label} does not fit where {best['label']} fits")
                notes.append(f"{label} OOM")
            elif cell["makespan"] > best["makespan"] * (1 + TOLERANCE):
                failures.append(
                    f"{where}: {label} {cell['makespan'] * 1e3:.1f} ms slower than {best['label']} "
                    f"{best['makespan'] * 1e3:.1f} ms"
                )
                notes.append(f"{label} slower")
        if _fits(single) and _fits(plan):
            rivals = [c for c in (placers.get("auto"), cells.get("data-parallel")) if _fits(c)]
            better = min(rivals, key=lambda c: c["makespan"]) if rivals else None
            if better is not None and plan is not None and plan["makespan"] > better["makespan"] * (1 + TOLERANCE):
                name = "auto" if better is placers.get("auto") else "data-parallel"
                failures.append(
                    f"{where}: parallelize {plan['makespan'] * 1e3:.1f} ms slower than {name} "
                    f"{better['makespan'] * 1e3:.1f} ms on a graph one device holds"
                )
                notes.append(f"slower than {name}")
        ratio = plan["makespan"] / bound if bound and plan is not None and plan.get("makespan") else None
        if model in TARGET_MODELS and cluster in TARGET_CLUSTERS and (ratio is None or ratio > WORK_BOUND_TARGET):
            failures.append(f"{where}: parallelize at {ratio or float('nan'):.2f}x the work bound")
            notes.append(f"> {WORK_BOUND_TARGET}x bound")
        chosen = (plan or {}).get("auto", {}).get("parallelize.chosen", "?")
        default_ratio = default["makespan"] / bound if bound and default and default.get("makespan") else None
        rows.append(
            _row(
                [
                    model.removeprefix("zoo:"),
                    cluster,
                    f"{bound * 1e3:.1f}" if bound else "-",
                    f"{critical:.1f}" if critical is not None else "-",
                    f"{best['label']} {_ms(best)}" if best else "none fits",
                    _ms(default),
                    f"{default_ratio:.2f}" if default_ratio else "-",
                    _ms(cells.get("data-parallel")),
                    _ms(cells.get("metis")),
                    f"**{_ms(plan)}**",
                    str(chosen),
                    f"{ratio:.2f}" if ratio else "-",
                    "; ".join(notes) or "ok",
                ]
            )
        )
    return rows, failures


def _bound(cells: dict[str, Cell], placers: dict[str, Cell]) -> float | None:
    """The work bound of one (model, cluster): the least one-device compute over its accelerators (see ``check``)."""
    computes = [c for c in (placers.get("single"), cells.get(MERGED_SINGLE)) if c and c.get("makespan") is not None]
    if not computes:
        return None
    least = min(computes, key=lambda c: c["makespan"])
    return least["makespan"] / _accelerators(least)


def check_kernels(kernels: Sequence[Cell], new: Sequence[Cell], table: Sequence[Cell]) -> tuple[list[str], list[str]]:
    """Rows and failed checks of ``parallelize{kernels=xla}`` (benchmarks/matrix-kernels.toml).

    Each cell's ratio is given against the work bound of the main table and against the *fused* work
    bound: one device's step with its own fused-kernel sets (``single-xla``), over the accelerators.
    Fusion shortens one device's step too, so the like-for-like ratio (fused against fused) is the
    one checked against :data:`WORK_BOUND_TARGET`.
    """
    mine, ours, theirs = _groups(kernels), _groups(new), _groups(table)
    rows: list[str] = []
    failures: list[str] = []
    for (model, cluster), cells in mine.items():
        bound = _bound(ours.get((model, cluster), {}), theirs.get((model, cluster), {}))
        single = cells.get(KERNELS_SINGLE)
        fused_bound = single["makespan"] / _accelerators(single) if single and single.get("makespan") else None
        plan = cells.get(KERNELS_PLAN)
        plain = ours.get((model, cluster), {}).get("parallelize")
        span = plan.get("makespan") if plan else None
        ratio = span / bound if span and bound else None
        fused_ratio = span / fused_bound if span and fused_bound else None
        notes = []
        if not _fits(plan):
            failures.append(f"{model} on {cluster}: parallelize{{kernels=xla}} does not fit")
            notes.append("OOM")
        if fused_ratio is None or fused_ratio > WORK_BOUND_TARGET:
            failures.append(
                f"{model} on {cluster}: parallelize{{kernels=xla}} at {fused_ratio or float('nan'):.2f}x the fused "
                "work bound"
            )
            notes.append(f"> {WORK_BOUND_TARGET}x fused bound")
        chosen = (plan or {}).get("auto", {}).get("parallelize.chosen", "?")
        rows.append(
            _row(
                [
                    model.removeprefix("zoo:"),
                    cluster,
                    f"{bound * 1e3:.1f}" if bound else "-",
                    f"{fused_bound * 1e3:.1f}" if fused_bound else "-",
                    _ms(plain),
                    f"**{_ms(plan)}**",
                    str(chosen),
                    f"{ratio:.2f}" if ratio else "-",
                    f"{fused_ratio:.2f}" if fused_ratio else "-",
                    "; ".join(notes) or "ok",
                ]
            )
        )
    return rows, failures


def render(new_path: Path, table_path: Path, kernels_path: Path | None = None) -> tuple[str, list[str]]:
    """The page and the failed checks."""
    new = json.loads(new_path.read_text())
    table = json.loads(table_path.read_text())
    rows, failures = check(new["results"], table["results"])
    machine = new.get("machine", "")
    head = [
        "# Issue 37 checks: `fuse,place` and `parallelize` on the zoo's training graphs",
        "",
        f"Written by `python -m devtools.parallelize_check {new_path} --table {table_path}` from the run of "
        f"{new.get('date', '?')} ({new.get('seconds', 0):.0f} s{', ' + machine if machine else ''}). Makespans in ms, "
        "simulated (congestion=topology). `work bound`: one device's compute over the cluster's GPUs, the smaller of "
        "the table's `single` column and this run's `single-merged` (one device after `merge-constants`, which "
        "`parallelize` applies to its candidates); `critical path`: `auto.bound-ms` (no placement of the "
        "unrewritten graph is faster; "
        "micro-batches shorten it); `best op placement`: the fastest placer of the placement table "
        f"({table_path.name}) that fits memory; `x bound`: makespan / work bound; `data-parallel`: one replica per "
        "accelerator with TF-slim's shared variables (`place{algo=data-parallel}`); `metis (unfused)`: plain METIS "
        "on the unfused graph; `chosen`: the plan `parallelize` kept (`D<replicas>xS<stages>xM<micro-batches>."
        "<schedule>`; `allreduce`: one stage, mirrored variables and a ring all-reduce; or `auto`: op placement).",
        "",
        "| model | cluster | work bound | critical path | best op placement | fuse,place | x bound | data-parallel | "
        "metis (unfused) | parallelize | chosen | x bound | check |",
        "|---|---|--:|--:|---|--:|--:|--:|--:|--:|---|--:|---|",
        *rows,
        "",
        f"- cells: {len(rows)}; failed checks: {len(failures)}",
        *[f"  - {failure}" for failure in failures],
        "",
    ]
    if kernels_path is not None:
        fused = json.loads(kernels_path.read_text())
        fused_rows, fused_failures = check_kernels(fused["results"], new["results"], table["results"])
        head += [
            "## With fused kernels: `parallelize{kernels=xla}`",
            "",
            f"From `graphir-bench --matrix benchmarks/matrix-kernels.toml` ({kernels_path.name}, run of "
            f"{fused.get('date', '?')}, {fused.get('seconds', 0):.0f} s). Every candidate `parallelize` judges gets "
            "its fused-kernel sets (`fuse-kernels`, passes/fuse/kernels.py: convex per-device sets of "
            "XLA-compilable ops, each run as one XLA cluster by the TF lowering) before it is simulated. "
            "`work bound` is the table's above (the graph as given); `fused bound` is one device's step with its "
            "own fused-kernel sets (`fuse-kernels{order=dynamic}`) over the GPUs: fusion shortens one device's "
            "step too, so the check compares like with like (`x fused bound` <= 1.5).",
            "",
            "| model | cluster | work bound | fused bound | parallelize | parallelize{kernels=xla} | chosen | "
            "x work bound | x fused bound | check |",
            "|---|---|--:|--:|--:|--:|---|--:|--:|---|",
            *fused_rows,
            "",
            f"- cells: {len(fused_rows)}; failed checks: {len(fused_failures)}",
            *[f"  - {failure}" for failure in fused_failures],
            "",
        ]
        failures = failures + fused_failures
    return "\n".join(head), failures


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.parallelize_check", description=__doc__)
    parser.add_argument("results", type=Path, help="graphir-bench JSON of benchmarks/matrix-parallelize.toml")
    parser.add_argument("--table", type=Path, required=True, help="the placement table's JSON (placement-liveness)")
    parser.add_argument("--out", type=Path, help="write the page here (default: stdout)")
    parser.add_argument(
        "--kernels", type=Path, help="graphir-bench JSON of benchmarks/matrix-kernels.toml (adds the fused section)"
    )
    args = parser.parse_args(argv)
    page, failures = render(args.results, args.table, args.kernels)
    if args.out:
        args.out.write_text(page)
    else:
        print(page)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
