r"""Issue 15's checks on the placement tables: ``auto`` against every placer, and the paper-rule regression.

Reads the JSON that ``graphir-bench`` writes for ``benchmarks/matrix-liveness.toml`` and, per
(model, cluster), checks what issue 15 asks of ``place{algo=auto}`` (the column labelled ``auto``):

* **never worse than any placer** that fits memory (makespan within a relative 1e-9);
* **never worse than one device** (the ``single`` column) where one device fits;
* **fits memory wherever any placer fits**;
* **the refinement's gain** (``auto.refine-gain-pct``: best portfolio candidate -> refined) in the
  cells where a *spread* placement is best (the fastest fitting cell, ``auto`` included, uses more
  than one device): the target is >= 5 % in at least half of them.

With ``--regress OLD.json NEW.json`` it also compares every (model, cluster, pipeline label) cell
present in both files (``benchmarks/results/placement.json`` against the ``mem-model=paper``
table): the makespans and peak memories must be identical (relative 1e-9).

A ``note`` string in the JSON (how a table was assembled, when not by one run) is printed under the
header.

Command line (``make bench-place`` runs it)::

    python -m devtools.placement_check benchmarks/results/placement-liveness.json \
        [--regress benchmarks/results/placement.json benchmarks/results/placement-paper.json] \
        [--out benchmarks/results/placement-check.md]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOLERANCE = 1e-9
"""Relative tolerance of makespan comparisons (summation order moves the last bits)."""
TARGET_GAIN_PCT = 5.0
"""The refinement's target gain in the spread cells (issue 15)."""

Cell = dict[str, Any]


def _fits(cell: Cell) -> bool:
    return cell.get("error") is None and cell.get("makespan") is not None and not cell.get("oom")


def _devices_used(cell: Cell) -> int:
    return sum(1 for peak in cell.get("peak_memory", {}).values() if peak > 0)


def _ms(cell: Cell | None) -> str:
    if cell is None or cell.get("makespan") is None:
        return "-"
    text = f"{cell['makespan'] * 1e3:.1f}"
    return text if _fits(cell) else f"{text} (OOM)"


def check(results: Sequence[Cell]) -> tuple[list[str], dict[str, int]]:
    """Markdown rows (one per model and cluster) and the summary counts."""
    groups: dict[tuple[str, str], dict[str, Cell]] = {}
    for cell in results:
        groups.setdefault((cell["model"], cell["cluster"]), {})[cell["label"]] = cell
    rows = []
    counts = dict.fromkeys(("cells", "worse", "worse-single", "no-fit", "spread", "spread-gain", "errors"), 0)
    for (model, cluster), cells in groups.items():
        auto = cells.get("auto")
        if auto is None:
            continue
        counts["cells"] += 1
        placers = {label: c for label, c in cells.items() if label != "auto"}
        fitting = {label: c for label, c in placers.items() if _fits(c)}
        best_label = min(fitting, key=lambda label: fitting[label]["makespan"]) if fitting else None
        notes = []
        if not _fits(auto):
            if auto.get("error"):
                counts["errors"] += 1
                notes.append(f"auto failed: {auto['error']}")
            if fitting:
                counts["no-fit"] += 1
                notes.append("**auto does not fit where a placer fits**")
        elif best_label is not None:
            if auto["makespan"] > fitting[best_label]["makespan"] * (1 + TOLERANCE):
                counts["worse"] += 1
                notes.append(f"**worse than {best_label}**")
            single = cells.get("single")
            if single is not None and _fits(single) and auto["makespan"] > single["makespan"] * (1 + TOLERANCE):
                counts["worse-single"] += 1
                notes.append("**worse than one device**")
        everyone = [c for c in cells.values() if _fits(c)]
        fastest = min(everyone, key=lambda c: c["makespan"]) if everyone else None
        spread = fastest is not None and _devices_used(fastest) > 1
        stats = auto.get("auto", {})
        gain = stats.get("auto.refine-gain-pct")
        if spread:
            counts["spread"] += 1
            if isinstance(gain, int | float) and gain >= TARGET_GAIN_PCT:
                counts["spread-gain"] += 1
            else:
                notes.append(why_no_gain(stats))
        best_text = f"{best_label} {_ms(fitting[best_label])}" if best_label else "none fits"
        rows.append(
            f"| {model.removeprefix('zoo:')} | {cluster} | {_ms(cells.get('single'))} | {best_text} | "
            f"**{_ms(auto)}** | {stats.get('auto.chosen', '-')} | {stats.get('auto.portfolio-ms', '-')} | "
            f"{stats.get('auto.refined-ms', '-')} | {gain if gain is not None else '-'} | "
            f"{stats.get('auto.bound-ms', '-')} | "
            f"{'yes' if spread else 'no'} | {stats.get('auto.refine-sims', '-')} | {_offload(stats)} | "
            f"{'; '.join(notes) or 'ok'} |"
        )
    return rows, counts


def _offload(stats: dict[str, Any]) -> str:
    """The refinement's second stage in a cell: ``moves/sims -> ms`` (fine nodes moved), ``-`` when it did not run."""
    if "auto.offload-sims" not in stats:
        return "-"
    return (
        f"{stats['auto.offload-moves']}/{stats['auto.offload-sims']} -> {stats['auto.offload-ms']} "
        f"({stats['auto.offload-nodes']} nodes)"
    )


def why_no_gain(stats: dict[str, Any]) -> str:
    """Why the refinement gained less than the target in a spread cell, from auto's statistics.

    In this order: the best portfolio candidate did not fit and the refinement traded time for
    memory; the portfolio's makespan is already within the target of the critical-path bound
    (``auto.bound-ms``: no placement on the cluster's fastest kind can gain the target); the budget
    allowed few trials (a large graph); the block moves reached a local optimum with trials left
    (``auto.refine-allowance``); else the allowance ran out.
    """
    portfolio = stats.get("auto.portfolio-ms")
    bound = stats.get("auto.bound-ms")
    sims = stats.get("auto.refine-sims", 0)
    if "auto.refine-overflow-B" in stats:
        return f"portfolio best out of memory: refined to fit ({stats['auto.refine-overflow-B']} B over)"
    if isinstance(portfolio, int | float) and isinstance(bound, int | float) and bound > 0:
        room = 100 * (1 - bound / portfolio)
        if room < TARGET_GAIN_PCT:
            return f"portfolio within {room:.1f} % of the critical-path bound {bound} ms"
    starts = stats.get("auto.refine-starts", "?")
    allowance = stats.get("auto.refine-allowance")
    if isinstance(sims, int) and sims < 20:
        return f"budget: {sims} trial simulations on this graph"
    if isinstance(allowance, int) and isinstance(sims, int) and sims < allowance:
        return f"local optimum of the block moves from {starts} after {sims} of {allowance} trials"
    if isinstance(allowance, int):
        return f"the allowance of {allowance} trials ran out (from {starts})"
    return f"{sims} trials from {starts} found no better placement"


def regress(old: Sequence[Cell], new: Sequence[Cell]) -> tuple[int, list[str]]:
    """Cells present in both runs, and one line per cell whose makespan or peak memory differs."""
    before = {(c["model"], c["cluster"], c["label"]): c for c in old}
    compared = 0
    diffs = []
    for cell in new:
        key = (cell["model"], cell["cluster"], cell["label"])
        was = before.get(key)
        if was is None:
            continue
        compared += 1
        a, b = was.get("makespan"), cell.get("makespan")
        same = (a is None) == (b is None) and (a is None or abs(a - b) <= TOLERANCE * max(abs(a), abs(b)))
        if not same or was.get("peak_memory") != cell.get("peak_memory"):
            diffs.append(f"- {' | '.join(key)}: {a} s -> {b} s")
    return compared, diffs


def main(argv: Sequence[str] | None = None) -> int:
    """Write the check as Markdown (stdout or ``--out``); exit status 0 (the table says what failed)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("liveness", type=Path, help="graphir-bench JSON of matrix-liveness.toml")
    parser.add_argument("--regress", nargs=2, type=Path, metavar=("OLD", "NEW"), help="compare two runs' JSON")
    parser.add_argument("--out", type=Path, help="write the Markdown here (default: stdout)")
    args = parser.parse_args(argv)
    data = json.loads(args.liveness.read_text())
    rows, counts = check(data["results"])
    lines = [
        "# Issue 15 checks: `place{algo=auto}` on the placement table",
        "",
        f"Written by `python -m devtools.placement_check {args.liveness}` from the run of {data['date']} "
        f"({data['seconds']:.0f} s, {data['machine']}). Makespans in ms, simulated; `best placer` is the fastest "
        "placer column that fits memory; `portfolio` and `refined` are auto's best candidate before and after its "
        "refinement, `gain` the refinement's gain in %; `bound` the critical-path bound in ms (the fine graph's "
        "longest path with the one-device simulation's durations and free transfers: no placement on that device "
        "kind is faster); `spread` says whether the fastest fitting cell uses more "
        "than one device; `sims` the refinement's trial simulations (both stages); `offload` its second stage "
        "(passes/place/refine_fine.py: moves taken / simulations -> makespan in ms, fine nodes moved; `-`: it did "
        "not run, the first stage's answer did not fit or too few simulations were left).",
        *(["", data["note"]] if data.get("note") else []),
        "",
        "| model | cluster | single | best placer | auto | chosen | portfolio | refined | gain % | bound | spread "
        "| sims | offload | check |",
        "|---|---|--:|---|--:|---|--:|--:|--:|--:|---|--:|---|---|",
        *rows,
        "",
        f"- (model, cluster) cells with an `auto` column: {counts['cells']} ({counts['errors']} failed)",
        f"- `auto` worse than a fitting placer: {counts['worse']}; worse than one device that fits: "
        f"{counts['worse-single']}; out of memory where a placer fits: {counts['no-fit']}",
        f"- spread placement best: {counts['spread']} cells; refinement >= {TARGET_GAIN_PCT:g} % in "
        f"{counts['spread-gain']} of them (target: at least half)",
    ]
    if args.regress:
        old, new = (json.loads(path.read_text())["results"] for path in args.regress)
        compared, diffs = regress(old, new)
        lines += [
            "",
            f"Regression, `{args.regress[1]}` against `{args.regress[0]}`: {compared} cells in both, "
            f"{len(diffs)} differ in makespan or peak memory.",
            *diffs,
        ]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
