"""Moirai Figure 10 / Table V on the zoo: m-SCT vs GETF-like vs the ILP on both heterogeneous presets.

Set-up (Moirai §IV-A): the ``moirai-inter`` preset (RTX 2080 Ti, T4, P4, RTX 3060 Ti in four servers
over InfiniBand) and the ``moirai-intra`` preset (2x V100 32 GB + 2x P100 16 GB over NVLink and
NVSwitch), both with the per-pair bandwidths of Moirai Table III; inference graphs of the zoo's
transformer-family models (Moirai used Swin-Transformer, GPT-3 and AlphaFold2 inference). Each model
runs on its **original** graph and on the graph **coarsened** by Moirai's operator-fusion rules
(``fuse{algo=rules}``, Moirai §III-B), as in Figure 10 (a)-(d). Placers:

* **m-SCT** (``place{algo=m-sct}``): Baechi's heuristic (its SCT LP assumes identical machines and
  uses mean times; its list schedule uses each device's own times).
* **GETF-like** (``place{algo=m-etf}``): GETF extends ETF to related machines (devices of different
  speeds). graphir's m-ETF is that algorithm: the (ready node, device) pair with the earliest start,
  each device with its own compute times and each link with its own transfer time (GETF itself
  ignores machine-dependent communication, Moirai §II, so ours is if anything the stronger
  baseline). GETF's MILP-based rounding is not reproduced. HEFT (earliest finish time over related
  machines) is shown beside it as the other classic heterogeneous list scheduler.
* **Moirai** (``place{algo=ilp}``): the exact joint placement and scheduling (CP-SAT) with per-device
  times and per-channel congestion (Moirai §III-D), on the graph further merged by Pesto's acyclic
  batch merging to :data:`TARGET` vertices (a MILP over thousands of operators is out of reach here).

Placement time: wall seconds of ``fuse`` + ``place``. Run:
``python -m devtools.replicate.moirai [--out DIR] [--quick]``.
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

PAPER = "moirai"
CLUSTERS = ("moirai-inter", "moirai-intra")
MODELS = ("zoo:gpt_infer", "zoo:bert_large_infer", "zoo:transformer_infer")
"""Inference graphs of the zoo's transformer-family models (Moirai §IV-A: GPT-3, Swin, AlphaFold2)."""
GRAPHS = ("original", "coarsened")
TARGET = 200
"""Vertices the ILP's graph is merged to."""
TIME_LIMIT = 40.0
"""CP-SAT seconds per cell (12 cells; Moirai ran Gurobi for minutes per model)."""
QUICK_TARGET = 12
QUICK_TIME_LIMIT = 2.0
LABELS = ("m-SCT", "GETF-like", "HEFT", "Moirai ILP")

PAPER_SPEEDUP = (  # Figure 10: Moirai's best speed-up over each baseline (x), per scenario
    ("inter-server, original graphs", "1.77", "1.33"),
    ("intra-server, original graphs", "1.7", "1.35"),
    ("inter-server, coarsened graphs", "1.9", "1.25"),
    ("intra-server, coarsened graphs", "1.74", "1.34"),
)
PAPER_TABLE5 = (  # model, m-SCT, GETF, Moirai on original graphs; the same on coarsened graphs
    ("GPT-3 330M", "15.92 s", "1.25 min", "1.38 min", "14.4 s", "58.04 s", "1.04 min"),
    ("GPT-3 1.3B", "39.82 s", "8.65 min", "9.02 min", "37.39 s", "5.29 min", "6.88 min"),
    ("Swin 1.8B", "17.63 s", "2 min", "2.15 min", "15.24 s", "1.58 min", "1.64 min"),
    ("AlphaFold2 87M", "20.18 s", "1.78 min", "1.9 min", "18.62 s", "1.24 min", "1.38 min"),
)


def pipelines(graph: str, target: int, limit: float) -> dict[str, str]:
    """``{label: pipeline after profile}`` for the original or the rules-coarsened graph.

    The placers keep their papers' memory rules (``mem-model=paper``), whatever the default
    (``liveness`` since issue 15).
    """
    prefix = "fuse{algo=rules}," if graph == "coarsened" else ""
    return {
        "m-SCT": f"{prefix}place{{algo=m-sct mem-model=paper}}",
        "GETF-like": f"{prefix}place{{algo=m-etf mem-model=paper}}",
        "HEFT": f"{prefix}place{{algo=heft mem-model=paper}}",
        "Moirai ILP": f"{prefix}fuse{{algo=acyclic-batch target={target}}},"
        f"place{{algo=ilp time-limit={limit:g} mem-model=paper}}",
    }


def short(model: str) -> str:
    """``zoo:x`` -> ``x``; a path -> its file name."""
    return model.removeprefix("zoo:").rsplit("/", 1)[-1]


def speedup(base: Run, ours: Run) -> str:
    """Moirai's metric: ``base / ours`` latency (above 1: ours is faster)."""
    if base.makespan is None or ours.makespan is None or ours.makespan <= 0:
        return "-"
    return f"{base.makespan / ours.makespan:.2f}x"


def experiment(args: argparse.Namespace, runner: Runner) -> Path:
    """Run the experiment and write ``replicate_moirai.md``; return its path."""
    started = time.perf_counter()
    if args.quick:
        models: Sequence[str] = (QUICK_MODEL,)
        target, limit = QUICK_TARGET, QUICK_TIME_LIMIT
    else:
        models, target, limit = MODELS, TARGET, TIME_LIMIT
    runs: dict[tuple[str, str, str], dict[str, Run]] = {}
    for model in models:
        for cluster in CLUSTERS:
            for graph in GRAPHS:
                runner.log(f"replicate moirai: {short(model)} on {cluster}, {graph} graph")
                plan = pipelines(graph, target, limit)
                runs[model, cluster, graph] = {label: runner.run(model, cluster, plan[label]) for label in LABELS}
    command = "python -m devtools.replicate" + (" --quick" if args.quick else "") + " --only=moirai"
    lines = [
        "# Moirai (Figure 10, Table V) replicated on the zoo",
        "",
        generated_line(command, time.perf_counter() - started),
        *_body(models, runs, target, limit),
    ]
    path = Path(args.out) / f"replicate_{PAPER}.md"
    write_text(path, "\n".join(lines) + "\n")
    return path


def _body(
    models: Sequence[str], runs: dict[tuple[str, str, str], dict[str, Run]], target: int, limit: float
) -> list[str]:
    out = [
        "",
        "## Set-up",
        "",
        "Clusters `moirai-inter` (2080 Ti 11 GB, T4 16 GB, P4 8 GB, 3060 Ti 8 GB over InfiniBand) and `moirai-intra` "
        "(2x V100 32 GB, 2x P100 16 GB over NVLink + NVSwitch) with Moirai Table III's measured bandwidth per "
        "device pair. Latencies are simulated end-to-end inference latencies (graphir's analytical per-device-kind "
        "costs) under the default ruler, `simulate{congestion=topology}`: each pair keeps Table III's measured "
        "numbers and a transfer also holds its ends' ports and the NICs / network or NVSwitch ports on its route. "
        "`original`: the imported ONNX graph; `coarsened`: after "
        "Moirai's fusion rules. The Moirai ILP additionally merges its graph to "
        f"{target} vertices (acyclic batch merging) and runs CP-SAT for at most {limit:g} s, warm-started from the "
        "best list scheduler.",
        "",
        "| label | pipeline on the original graph (after `profile`) | on the coarsened graph |",
        "|---|---|---|",
    ]
    original, coarsened = pipelines("original", target, limit), pipelines("coarsened", target, limit)
    out += [f"| {label} | `{cell(original[label])}` | `{cell(coarsened[label])}` |" for label in LABELS]
    out += ["", "## Figure 10: end-to-end inference latency", ""]
    rows = []
    for (model, cluster, graph), r in runs.items():
        ilp = r["Moirai ILP"]
        place = ilp.stats.get("place", {})
        status = "-" if ilp.error else f"{place.get('status', '-')}, {place.get('result', '-')}"
        nodes = r["m-SCT"].stats.get("place", {}).get("coarse-nodes", "-")
        rows.append(
            [
                short(model),
                cluster,
                graph,
                str(nodes),
                *(ms(r[label]) for label in LABELS),
                status,
                speedup(r["m-SCT"], ilp),
                speedup(r["GETF-like"], ilp),
            ]
        )
    out += table(
        [
            "model",
            "cluster",
            "graph",
            "nodes",
            *(f"{label} (ms)" for label in LABELS),
            "ILP status",
            "vs m-SCT",
            "vs GETF-like",
        ],
        rows,
        "lllr" + "r" * len(LABELS) + "lrr",
    )
    out += [
        "",
        "`nodes`: vertices the list schedulers place (the ILP's graph has at most "
        f"{target}). `vs m-SCT` / `vs GETF-like`: the baseline's latency over the Moirai ILP's (Moirai's "
        "speed-up; above 1: the ILP is faster).",
        "",
        "The paper's Figure 10 (largest speed-up of Moirai over each baseline across its models):",
        "",
        *table(["scenario", "vs m-SCT", "vs GETF"], [list(r) for r in PAPER_SPEEDUP], "lrr"),
        "",
        "## Table V: placement generation time",
        "",
    ]
    rows = []
    for (model, cluster, graph), r in runs.items():
        rows.append(
            [short(model), cluster, graph]
            + [secs(r[label].placement_s) if r[label].error is None else "error" for label in LABELS]
        )
    out += table(["model", "cluster", "graph", *(f"{label} wall (s)" for label in LABELS)], rows, "lll" + "r" * 4)
    out += [
        "",
        "Wall seconds of `fuse` + `place` on this machine (2 shared cores); the ILP's include its warm start "
        "and are bounded by the limit.",
        "",
        "The paper's Table V (selected rows; original graph, then coarsened graph):",
        "",
        *table(
            ["model", "m-SCT", "GETF", "Moirai", "m-SCT (coarse)", "GETF (coarse)", "Moirai (coarse)"],
            [list(r) for r in PAPER_TABLE5],
        ),
        *_claims(runs),
    ]
    return out


def _claims(runs: dict[tuple[str, str, str], dict[str, Run]]) -> list[str]:
    out = ["", "## Do the paper's claims reproduce?", ""]
    for cluster in CLUSTERS:
        for graph in GRAPHS:
            cells = [r for (_, c, g), r in runs.items() if c == cluster and g == graph]
            ratios: dict[str, list[float]] = {"m-SCT": [], "GETF-like": []}
            for r in cells:
                ilp = r["Moirai ILP"]
                for label, bucket in ratios.items():
                    base = r[label]
                    if base.makespan is not None and ilp.makespan is not None and ilp.makespan > 0:
                        bucket.append(base.makespan / ilp.makespan)
            if not ratios["m-SCT"] or not ratios["GETF-like"]:
                continue
            worse = sum(1 for bucket in ratios.values() for value in bucket if value < 1 - 1e-9)
            total = sum(len(bucket) for bucket in ratios.values())
            verdict = (
                "the ILP is never slower: reproduces"
                if worse == 0
                else f"the ILP is slower in {worse} of {total} comparisons: does not reproduce"
            )
            out.append(
                f"- **{cluster}, {graph} graphs**: the ILP's speed-up is {min(ratios['m-SCT']):.2f}-"
                f"{max(ratios['m-SCT']):.2f}x over m-SCT and {min(ratios['GETF-like']):.2f}-"
                f"{max(ratios['GETF-like']):.2f}x over GETF-like; {verdict}."
            )
    shrink = []
    for (model, cluster, graph), r in runs.items():
        if graph == "coarsened" and cluster == CLUSTERS[0]:
            before = runs[model, cluster, "original"]["m-SCT"].stats.get("place", {}).get("coarse-nodes")
            after = r["m-SCT"].stats.get("place", {}).get("coarse-nodes")
            if isinstance(before, int) and isinstance(after, int) and before > 0:
                shrink.append((f"{short(model)} {before} -> {after}", 1 - after / before))
    if shrink:
        fewer = max(f for _, f in shrink)
        text = (
            f"- **Moirai's fusion rules** remove at most {fewer:.0%} of the operators here "
            f"({', '.join(t for t, _ in shrink)}; paper: Table IV, 20-30% fewer)"
        )
        if fewer < 0.2:
            text += (
                ": the built-in rule table (conv-bn-relu, matmul-add-activation, layer norm, TF training ops) "
                "matches few operator chains in these tf2onnx-converted graphs"
            )
        out.append(text + ".")
    rejected = []
    for (model, cluster, graph), r in runs.items():
        place = r["Moirai ILP"].stats.get("place", {})
        etf, warm = place.get("heuristic.m-etf-s"), place.get("warm-start-makespan-s")
        if isinstance(etf, float) and isinstance(warm, float) and etf < warm * (1 - 1e-9):
            rejected.append(f"{short(model)}/{cluster}/{graph}")
    if rejected:
        out.append(
            "- **Where the ILP loses to a list scheduler**: on its merged graph, m-ETF's placement simulates faster "
            f"than the ILP's warm start in {len(rejected)} cell(s) ({', '.join(rejected)}), but it breaks the ILP's "
            "static memory rule (every activation held for the whole run), so the ILP starts "
            "from, and stays within, a slower placement that obeys it. The simulator frees activations and accepts "
            "m-ETF's placement. The 200-vertex merge also hides parallelism the list schedulers use on the full graph."
        )
    effects = []
    for (model, cluster, graph), r in runs.items():
        if graph != "coarsened":
            continue
        before, after = runs[model, cluster, "original"]["Moirai ILP"], r["Moirai ILP"]
        if before.makespan and after.makespan:
            effects.append(1 - after.makespan / before.makespan)
    if effects:
        out.append(
            f"- **Effect of the fusion rules on the ILP's latency**: {min(effects):+.1%} to {max(effects):+.1%} "
            "lower with the rules than without (negative: higher; paper: up to 5.7% lower inter-server, 3.8% "
            "intra-server)."
        )
    out += ["", *NOTES]
    return out


NOTES = [
    "Why our numbers differ from the paper's:",
    "",
    "- **The ruler and the memory rules.** Since issue 14 every cell is judged by the default ruler, "
    "`simulate{congestion=topology}` (see the set-up); the table of 2026-11-22 used one FIFO channel per "
    "device pair. The placers keep their papers' memory rules (`mem-model=paper`, pinned in the pipelines), "
    "not the placers' default since issue 15 (`mem-model=liveness`).",
    "- **Simulated, analytical costs** per device kind (roofline at each GPU's peak FLOP/s and memory "
    "bandwidth), not PyTorch 1.12 inference measured on the GPUs; bandwidths are Moirai Table III's averages.",
    "- **Different models.** The zoo's GPT-2-small (12 layers), BERT-large (24 layers) and Transformer "
    "(16+16 layers) inference graphs, 0.8k-2.7k ONNX operators, stand in for Moirai's Swin-Transformer, "
    "GPT-3 and AlphaFold2 variants of 5k-50k operators and up to 13B parameters, so there is less parallel "
    "work to spread and communication weighs more.",
    "- **The exact method.** Moirai solves its MILP with Gurobi on the (rules-coarsened) operator graph for "
    "minutes; we merge the graph further to a few hundred vertices and give CP-SAT a short limit. A cell "
    "stopped at the limit (`feasible`) may change between runs (machine speed); the ILP never returns worse "
    "than its best warm start (heft, dpos, adjusting, m-etf) on its own merged graph; the baselines place "
    "the finer graph, so they can still win where the merging hides parallelism.",
    "- **GETF.** Our GETF-like baseline is ETF on related machines (m-ETF with per-device times and per-link "
    "transfers), not GETF's MILP-guided variant.",
    "- **Placement time.** Seconds here (small graphs, a time limit), minutes in the paper (Gurobi on "
    "graphs up to 50k operators); m-SCT is the fastest in both.",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: run the experiment, write the table, return the exit status."""
    return run_main(PAPER, experiment, argv, "Moirai Figure 10 / Table V on the zoo (simulated).")


if __name__ == "__main__":
    raise SystemExit(main())
