"""Pesto Figure 7 / Table 2 on the zoo: Expert vs m-SCT vs the ILP on 2 GPUs with congestion.

Set-up (Pesto §5): the ``pesto`` preset (two V100 16 GB joined by NVLink, each with its own PCIe link
to a Xeon Silver 4116 CPU), judged by the default ruler (``simulate``: ``congestion=topology``, a
transfer holds its sender's and receiver's ports and the wire between them; Pesto's own model, one
FIFO channel per ordered device pair, is ``simulate{congestion=pair}``). Models: the zoo's training graphs closest to
Pesto's four families (RNNLM/NMT -> ``lstm_train``, Transformer -> ``bert_large_train``, NASNet ->
``nasnet_mobile_train`` and ``nasnet_large_train``). Placers:

* **Expert** (``place{algo=expert}``): consecutive layers per GPU, balanced, on the original graph.
* **m-SCT** (``place{algo=m-sct}``): Baechi's best heuristic on the original graph (Pesto ran
  Baechi's open-source placer on the full graph); also on Pesto's coarse graph, for reference.
* **Pesto** (``fuse{algo=acyclic-batch target=200},place{algo=ilp}``): acyclic batch merging to about
  200 vertices (Pesto §3.3) and the exact joint placement and scheduling (CP-SAT) with a time limit.

Placement time: wall seconds of ``fuse`` + ``place``. Run:
``python -m devtools.replicate.pesto [--out DIR] [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from devtools.replicate.common import (
    QUICK_MODEL,
    Run,
    Runner,
    cell,
    generated_line,
    ms,
    run_main,
    secs,
    table,
    write_text,
)

PAPER = "pesto"
CLUSTER = "pesto"
MODELS = ("zoo:lstm_train", "zoo:bert_large_train", "zoo:nasnet_mobile_train", "zoo:nasnet_large_train")
"""Zoo stand-ins for RNNLM/NMT, Transformer and NASNet (Pesto §5.2).

BERT-large stands in for Pesto's Transformers: like them it does not fit one 16 GB GPU but fits two
(27 GB simulated peak); the zoo's ``transformer_train`` (253 GB) fits no two-GPU machine."""
TARGET = 200
"""Coarse vertices for the ILP (Pesto §3.3: "coarsening the graph to ~200 vertices")."""
TIME_LIMIT = 60.0
"""CP-SAT seconds per model (Pesto solved for up to an hour with Gurobi on a server)."""
QUICK_TARGET = 12
QUICK_TIME_LIMIT = 2.0

PAPER_TABLE2 = (  # model, spec, Baechi, RNN-based, Placeto, Pesto (minutes)
    ("NMT", "2-layer", "1", "2859", "788", "30"),
    ("NMT", "4-layer", "3", "2714", "4120", "51"),
    ("NASNet", "6-cells", "3", "241", "50", "24"),
)


def pipelines(target: int, limit: float) -> tuple[tuple[str, str], ...]:
    """``(label, pipeline after profile)`` in table order.

    The placers keep their papers' memory rules (``mem-model=paper``: Baechi's device model for m-SCT,
    Pesto's per-vertex sum for the ILP), whatever the default (``liveness`` since issue 15).
    """
    coarse = f"fuse{{algo=acyclic-batch target={target}}}"
    return (
        ("Expert", "place{algo=expert}"),
        ("m-SCT", "place{algo=m-sct mem-model=paper}"),
        ("m-SCT (coarse)", f"{coarse},place{{algo=m-sct mem-model=paper}}"),
        ("Pesto ILP", f"{coarse},place{{algo=ilp time-limit={limit:g} mem-model=paper}}"),
    )


def short(model: str) -> str:
    """``zoo:x`` -> ``x``; a path -> its file name."""
    return model.removeprefix("zoo:").rsplit("/", 1)[-1]


def _vertices(ilp: Run) -> str:
    """The ILP's vertex count, with the reason the merging stopped when it missed the target."""
    count = ilp.stats.get("place", {}).get("coarse-nodes", "-")
    stopped = ilp.stats.get("fuse", {}).get("stopped")
    return f"{count} ({stopped})" if stopped and stopped != "target" else str(count)


def reduction(base: Run, ours: Run) -> str:
    """Pesto's metric: ``1 - ours / base`` of the step time (positive: ours is faster)."""
    if base.makespan is None or ours.makespan is None or base.makespan <= 0:
        return "-"
    return f"{1 - ours.makespan / base.makespan:+.1%}"


def experiment(args: argparse.Namespace, runner: Runner) -> Path:
    """Run the experiment and write ``replicate_pesto.md``; return its path."""
    started = time.perf_counter()
    if args.quick:
        models: Sequence[str] = (QUICK_MODEL,)
        target, limit = QUICK_TARGET, QUICK_TIME_LIMIT
    else:
        models, target, limit = MODELS, TARGET, TIME_LIMIT
    plan = pipelines(target, limit)
    runs: dict[str, dict[str, Run]] = {}
    for model in models:
        runner.log(f"replicate pesto: {short(model)}")
        runs[model] = {"single": runner.run(model, CLUSTER, "place{algo=single device=gpu0}")}
        for label, pipe in plan:
            runs[model][label] = runner.run(model, CLUSTER, pipe)
    command = "python -m devtools.replicate" + (" --quick" if args.quick else "") + " --only=pesto"
    lines = [
        "# Pesto (Figure 7, Table 2) replicated on the zoo",
        "",
        generated_line(command, time.perf_counter() - started),
        *_body(models, runs, plan, target, limit),
    ]
    path = Path(args.out) / f"replicate_{PAPER}.md"
    write_text(path, "\n".join(lines) + "\n")
    return path


def _body(
    models: Sequence[str], runs: dict[str, dict[str, Run]], plan: Sequence[tuple[str, str]], target: int, limit: float
) -> list[str]:
    labels = [label for label, _ in plan]
    out = [
        "",
        "## Set-up",
        "",
        "Cluster `pesto`: 2x V100 16 GB over NVLink plus the Xeon Silver 4116 CPU (PCIe to each GPU), Pesto §5.1. "
        "Step times are simulated (graphir's analytical roofline costs) under the default ruler, "
        "`simulate{congestion=topology}`: a transfer holds its sender's and receiver's ports and the wire between "
        "them (Pesto's own model, one FIFO channel per ordered device pair, is `congestion=pair`). "
        "`OOM (x)`: a device's peak memory exceeds its capacity, x is the simulated "
        f"time regardless. Pesto ILP: acyclic batch merging to {target} vertices and CP-SAT joint placement and "
        f"scheduling with a {limit:g} s limit, warm-started from the best list scheduler (heft, dpos, adjusting, "
        "m-etf); it returns the warm start when its own schedule simulates worse (`result = warm-start`).",
        "",
        "| label | pipeline (after `profile`) |",
        "|---|---|",
        *[f"| {label} | `{cell(pipe)}` |" for label, pipe in plan],
        "",
        "## Figure 7: per-step training time",
        "",
    ]
    rows = []
    for model in models:
        r = runs[model]
        ilp = r["Pesto ILP"]
        fits = "-" if r["single"].error else ("no" if r["single"].oom else "yes")
        place = ilp.stats.get("place", {})
        status = f"{place.get('status', '-')}, gap {float(place.get('gap', 0.0)):.1%}, {place.get('result', '-')}"
        rows.append(
            [
                short(model),
                str(r["single"].nodes),
                fits,
                *(ms(r[label]) for label in labels),
                "-" if ilp.error else status,
                reduction(r["Expert"], ilp),
                reduction(r["m-SCT"], ilp),
            ]
        )
    out += table(
        ["model", "nodes", "fits 1 GPU", *(f"{label} (ms)" for label in labels), "ILP status", "vs Expert", "vs m-SCT"],
        rows,
        "lrl" + "r" * len(labels) + "lrr",
    )
    out += [
        "",
        "`vs Expert` / `vs m-SCT`: reduction of the step time by the Pesto ILP (Pesto's metric; positive: Pesto is "
        "faster). `fits 1 GPU`: `place{algo=single device=gpu0}` simulated without OOM.",
        "",
        "## Table 2: placement time",
        "",
    ]
    rows = []
    for model in models:
        r = runs[model]
        rows.append(
            [short(model)]
            + [secs(r[label].placement_s) if r[label].error is None else "error" for label in labels]
            + [_vertices(r["Pesto ILP"])]
        )
    out += table(["model", *(f"{label} wall (s)" for label in labels), "ILP vertices"], rows)
    out += [
        "",
        "Wall seconds of `fuse` + `place` on this machine (2 shared cores). The ILP's time is its warm start plus "
        "the solver, bounded by the limit. `ILP vertices`: the merged graph's size; `(no-feasible-edge)`: acyclic "
        f"batch merging stopped above the target of {target} because no remaining edge meets Theorem 3.5's "
        "cycle-free conditions (Pesto §3.3 stops there too).",
        "",
        "The paper's Table 2 (minutes):",
        "",
        *table(["model", "spec", "Baechi", "RNN-based", "Placeto", "Pesto"], [list(r) for r in PAPER_TABLE2], "llrrrr"),
        *_claims(models, runs),
    ]
    return out


def _claims(models: Sequence[str], runs: dict[str, dict[str, Run]]) -> list[str]:
    out = ["", "## Do the paper's claims reproduce?", ""]
    gains: dict[str, list[float]] = {"Expert": [], "m-SCT": []}
    for model in models:
        r = runs[model]
        ilp = r["Pesto ILP"]
        if ilp.makespan is None:
            out.append(f"- **{short(model)}**: the ILP failed ({ilp.error}).")
            continue
        parts = []
        for name, bucket in gains.items():
            base = r[name]
            if base.makespan is None:
                parts.append(f"{name} failed")
                continue
            gain = 1 - ilp.makespan / base.makespan
            if not base.oom and not ilp.oom:
                bucket.append(gain)
            oom = ", which is OOM" if base.oom else ""
            parts.append(f"{abs(gain):.1%} {'faster' if gain >= 0 else 'slower'} than {name}{oom}")
        text = f"- **{short(model)}**: the Pesto ILP is {'; '.join(parts)}."
        if ilp.oom:
            text += " " + _oom_reason(ilp)
        elif not r["m-SCT"].oom and r["m-SCT"].makespan is not None and r["m-SCT"].makespan < ilp.makespan:
            coarse = r["m-SCT (coarse)"]
            if coarse.makespan is not None and coarse.makespan <= ilp.makespan * (1 + 1e-9):
                text += (
                    f" m-SCT on the ILP's merged graph gets {coarse.makespan * 1e3:.1f} ms too, so the loss comes "
                    "from merging the graph for the solver, not from the solver."
                )
        text += f" Coarse nodes on the CPU: {_cpu_share(r)}."
        out.append(text)
    for name, bucket in gains.items():
        if bucket:
            paper = "15.5%" if name == "Expert" else "23.4%"
            out.append(
                f"- **Average reduction vs {name}** over the {len(bucket)} model(s) where both placements fit: "
                f"{sum(bucket) / len(bucket):+.1%} (paper: {paper})."
            )
        else:
            out.append(f"- **vs {name}**: no model where both placements fit: the paper's average is not reproduced.")
    out += ["", *NOTES]
    return out


def _oom_reason(ilp: Run) -> str:
    """Why the ILP's placement overflows, read off its statistics."""
    rule = ilp.stats.get("place", {}).get("memory-constraint", "?")
    worst = max(range(len(ilp.peak)), key=lambda k: ilp.peak[k] / max(ilp.capacity[k], 1))
    peak = f"{ilp.peak[worst] / (1 << 30):.1f} of {ilp.capacity[worst] / (1 << 30):.0f} GiB"
    if rule == "persistent":
        why = (
            "no warm start fits the GPUs with every activation held for the whole step, so the ILP bounds only "
            "persistent bytes per device"
        )
    elif rule == "none":
        why = "no warm start fits even the persistent bytes, so the ILP has no memory constraint"
    else:
        why = f"the ILP's memory rule (`{rule}`) counts bytes per coarse vertex, not live activations over time"
    return (
        f"Its placement overflows {', '.join(ilp.oom)} ({peak} at peak): {why}, and its optimum keeps most work on "
        "one GPU, which the simulator (live activations) rejects. Not comparable to the paper, whose placements fit."
    )


def _cpu_share(r: dict[str, Run]) -> str:
    """``label a/b`` per placer: coarse nodes placed on the CPU device out of all."""
    parts = []
    for label in ("Expert", "m-SCT", "Pesto ILP"):
        place = r[label].stats.get("place", {})
        total = place.get("coarse-nodes")
        cpu = sum(int(v) for k, v in place.items() if k.startswith("nodes.cpu"))
        if isinstance(total, int):
            parts.append(f"{label} {cpu}/{total}")
    return ", ".join(parts) or "-"


NOTES = [
    "Why our numbers differ from the paper's:",
    "",
    "- **The ruler and the memory rules.** Since issue 14 every cell is judged by the default ruler, "
    "`simulate{congestion=topology}` (see the set-up); the table of 2026-11-22 used one FIFO channel per "
    "device pair. The placers keep their papers' memory rules (`mem-model=paper`, pinned in the pipelines), "
    "not the placers' default since issue 15 (`mem-model=liveness`).",
    "- **Simulated, analytical costs** instead of TensorFlow r1.15 on two V100 SXM2: the simulator has no "
    "kernel-launch contention or executor jitter, and the roofline costs differ from measured kernels.",
    "- **Different graphs and batch sizes.** Our `lstm_train` (4 layers x 2048, batch 512) stands in for "
    "RNNLM/NMT (batch 128), `bert_large_train` (24-layer encoder, batch 32) for Pesto's 6-12-layer "
    "encoder-decoder Transformers (batch 32), the zoo's NASNet-A mobile/large (batch 128/32) for Pesto's "
    "NASNet variants. Our `transformer_train` needs 253 GB and fits no two-GPU machine, so it is not used.",
    "- **The solver.** Pesto solved a Gurobi MILP for up to an hour per model; we give CP-SAT a fixed, much "
    "shorter limit on 2 shared cores. When it stops at the limit (`feasible`), its incumbent depends on "
    "machine speed, so that cell may change between runs; `optimal` cells are reproducible. The ILP never "
    "returns worse than its best warm start.",
    "- **Memory.** The ILP's memory rule (persistent + activation bytes per coarse vertex, nothing freed) is "
    "stricter than the simulator's; when the warm start violates it, a looser rule is used (see "
    "`place.memory-constraint` in `graphir-opt --stats`), as Pesto only balances memory approximately.",
    "- **The CPU device** is part of the preset (Pesto's host, 64 GB). Expert and the list schedulers hold "
    "every activation for the whole step in their memory rules, so on these training graphs the two 16 GB GPUs "
    "look full early and many nodes spill onto the CPU (counts above), which dominates their step times. "
    "Pesto's own runs kept the DNN on the GPUs.",
    "- **Placement time.** Minutes in the paper (Gurobi on the coarse graph); seconds here, bounded by the "
    "time limit. Baechi (m-SCT) is faster than the ILP in both.",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: run the experiment, write the table, return the exit status."""
    return run_main(PAPER, experiment, argv, "Pesto Figure 7 / Table 2 on the zoo (simulated).")


if __name__ == "__main__":
    raise SystemExit(main())
