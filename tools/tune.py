"""``graphir-tune``: FastT's online loop on real TensorFlow — place, run, re-profile, activate or roll back.

::

    graphir-tune MODEL --cluster 2xcpu-workers --rounds 6 -o DIR [--placer dpos|os-dpos|...] [--store FILE]

MODEL is anything ``graphir-opt`` reads (a training step ``.pb``, ``.onnx``, ``.gir``, ``zoo:<entry>``).
The cluster must name TensorFlow workers (``/job:worker/task:k``, e.g. ``Nxcpu-workers``: local
``tf.distribute.Server`` processes pinned one per core, :mod:`graphir.backends.tf.rig`). The loop
starts as FastT does (:func:`graphir.tools.tune_loop.fastt_start`): when the model fits one device
it tunes FastT's data-parallel input graph (one replica per worker on ``1/n`` of the batch), whose
first strategy is plain data parallelism; ``--replica-graph FILE`` gives the model at that batch
when TensorFlow cannot rebuild it (``zoo:<entry>`` models are rebuilt by the zoo's builder). Each round
prints one line (strategy, estimated and measured step time, decision; the loop is described in
:mod:`graphir.tools.tune_loop`) and the run writes into DIR:

* ``rounds.json``: ``{"model", "cluster", "options", "start", "nodes", "rounds": [...], "active", "first",
  "first_measured_s", "final_measured_s", "first_median_s", "final_median_s", "paired", "strategies",
  "store"}`` (first/final: the first round's strategy and the active one at the end, measured in
  its first and last run and as the median over every run of it, trial baselines included;
  ``paired``: the verify round, ``{"candidate", "candidate_s", "first_s", "decision"}``: the
  strategy active before it and the first one, measured back to back, and whether the loop kept
  the candidate (``keep``) or went back to the first (``rollback``); ``null`` when no verify round
  ran (the loop was on its first strategy, or ``--no-verify``); ``strategies``: per id,
  its source, rounds and measurements; ``start``: the starting rule's outcome, ``{"strategy",
  "replicas", "fits", "reason"}``; ``nodes``: nodes of the graph the loop placed). Each round
  has ``index``, ``strategy`` (id), ``source`` (the placer or the bootstrap rule), ``ran``
  (``bootstrap``/``trial``/``active``/``verify``), ``estimated_s`` (of what ran), ``candidate`` and
  ``candidate_estimated_s`` (what the placer proposed), ``measured_s``, ``baseline`` and
  ``baseline_s`` (the strategy also run in the round and its measurement: a trial's active strategy,
  the verify round's first strategy), ``decision`` (``activate``/``rollback``/``keep``/``stop``),
  ``active`` (the id in force after the round), ``change`` (relative change of the cost table),
  ``new_entries``, ``coverage``, ``devices`` (nodes per device), ``transfers``, ``loss`` (the last
  step's), ``steps``, ``wall_s``;
* ``rounds.png``: measured (and estimated) step time per round, decisions marked;
* ``placement.json``: the active strategy at the end, ``{node: device}``;
* the cost store (``--store``, default ``DIR/costs.json``): a second run with the same store starts
  warm; ``profile{mode=cost-table path=FILE}`` annotates a module from it.

Exit status 1 with one line for bad input (unknown model, a cluster without workers, bad options).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphir.errors import GraphIRError
from graphir.fileio import write_atomically
from graphir.runguard import DEFAULT_RUN_TIMEOUT_S, IO_FLAG, allowing_io_ops, check_runnable
from graphir.tools.tune_loop import Round, TuneOptions, TuneResult, rig_runner, tune

__all__ = ["main", "plot_rounds", "rounds_document"]

DECISION_STYLE = {
    "activate": ("o", "tab:green"),
    "rollback": ("X", "tab:red"),
    "keep": ("s", "tab:blue"),
    "stop": ("*", "black"),
}


def _delays(specs: Sequence[str]) -> dict[int, float]:
    delays = {}
    for spec in specs:
        head, sep, tail = spec.partition(":")
        try:
            if not sep:
                raise ValueError
            delays[int(head)] = float(tail)
        except ValueError:
            raise GraphIRError(f"--inject-delay expects ROUND:SECONDS (e.g. 1:0.2), got '{spec}'") from None
    return delays


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="graphir-tune",
        description=(
            "FastT's online loop on real TensorFlow: each round places the model with the measured cost model "
            "(unknown costs 0, so new placements get explored), trains a few steps on the cluster's TF workers, "
            "harvests RunMetadata into the cost store, and activates the strategy or rolls it back."
        ),
        epilog=(
            "each round prints: what ran (bootstrap | trial = the placer's new strategy, then the active one again "
            "| active | verify = the final strategy, then the first one), estimated and measured step time, and the "
            "decision: activate (the trial measured faster than the active strategy right after it), rollback "
            "(slower: the previous strategy stays; verify: the first strategy was faster), keep, or stop (cost "
            "table stable).\n\n"
            "example: graphir-tune zoo/batches/resnet50_train_b1.pb --cluster 2xcpu-workers --rounds 6 "
            "-o build/tune/resnet50\n"
            "then:    graphir-opt MODEL --cluster 2xcpu-workers "
            "--passes='profile{mode=cost-table path=build/tune/resnet50/costs.json},place{algo=dpos},simulate'"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="model: .pb training step, .onnx, .gir, or zoo:<entry>")
    parser.add_argument("--cluster", required=True, help="a cluster of TF workers, e.g. 2xcpu-workers")
    parser.add_argument("--rounds", type=int, default=6, help="rounds at most (default 6)")
    parser.add_argument("-o", "--output", required=True, help="directory for rounds.json, rounds.png, placement.json")
    parser.add_argument("--store", help="cost store JSON, read when present and rewritten (default DIR/costs.json)")
    parser.add_argument(
        "--placer",
        default="dpos",
        help="place algorithm with options, e.g. dpos, 'm-etf', or os-dpos (FastT's DPOS + operation splitting)",
    )
    parser.add_argument(
        "--start",
        default="auto",
        help="starting strategy: auto (FastT: data parallelism if the model fits one device, else m-topo), "
        "data-parallel, or a placer on the graph as given",
    )
    parser.add_argument(
        "--replica-graph",
        metavar="FILE",
        help="the model at the per-replica batch (batch / workers), same node names, for the data-parallel start",
    )
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per round (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first in each round (default 1)")
    parser.add_argument("--trace-steps", type=int, default=2, help="traced steps per round (default 2)")
    parser.add_argument("--min-rounds", type=int, default=3, help="rounds before a stable model may stop (default 3)")
    parser.add_argument(
        "--tolerance", type=float, default=0.10, help="cost-table change below which the model is stable (0.10)"
    )
    parser.add_argument("--margin", type=float, default=0.0, help="a candidate's estimate must be this much better")
    parser.add_argument(
        "--calibrated-links", action="store_true", help="unmeasured links use the cluster's links, not cost 0"
    )
    parser.add_argument(
        "--congestion", default="task", help="congestion rule of the estimates (default task: the rig's rule)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the fed batch and the initial variables")
    parser.add_argument(
        "--inject-delay",
        action="append",
        default=[],
        metavar="ROUND:SECONDS",
        help="add SECONDS to every timed step of ROUND, as a slow link would (testing the rollback)",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the verify round (the final strategy measured back to back with the first one)",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-round lines")
    parser.add_argument(
        IO_FLAG,
        action="store_true",
        help="train a model whose ops read or write files, use the network, call Python or are not registered "
        "in TensorFlow (refused by default, before any worker starts)",
    )
    parser.add_argument(
        "--round-timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit of each round's run on the workers (default {DEFAULT_RUN_TIMEOUT_S:g}); a round still "
        "going is ended, the workers stopped, and the run reported in one line",
    )
    return parser


def _options(args: argparse.Namespace) -> TuneOptions:
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            raise GraphIRError(f"--{name} must be at least 1, got {getattr(args, name)}")
    for name in ("warmup", "trace_steps", "min_rounds"):
        if getattr(args, name) < 0:
            raise GraphIRError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(args, name)}")
    if args.trace_steps < 1:
        raise GraphIRError("--trace-steps must be at least 1: the cost model is updated from traced steps")
    if not 0 < args.round_timeout < float("inf"):
        raise GraphIRError(f"--round-timeout must be a positive number of seconds, got {args.round_timeout}")
    from graphir.pipeline import parse_pipeline
    from graphir.tools.tune_loop import placer_pipeline

    for flag, placer in (("--placer", args.placer), ("--start", args.start)):
        if flag == "--start" and placer in ("auto", "data-parallel"):
            continue
        if flag == "--start" and placer.split(" ", 1)[0] == "os-dpos":
            raise GraphIRError("--start os-dpos: the first strategy needs no split search; use --placer os-dpos")
        try:
            parse_pipeline(
                placer_pipeline(placer, args.congestion) if flag == "--placer" else f"place{{algo={placer}}}"
            )
        except GraphIRError as exc:
            raise GraphIRError(f"{flag} '{placer}': {exc.message}") from None
    return TuneOptions(
        rounds=args.rounds,
        min_rounds=args.min_rounds,
        placer=args.placer,
        steps=args.steps,
        warmup=args.warmup,
        trace_steps=args.trace_steps,
        tolerance=args.tolerance,
        margin=args.margin,
        explore_links=not args.calibrated_links,
        congestion=args.congestion,
        seed=args.seed,
        delays=_delays(args.inject_delay),
        start=args.start,
        verify=not args.no_verify,
        round_timeout=args.round_timeout,
    )


def rounds_document(model: str, cluster: str, options: TuneOptions, result: TuneResult) -> dict[str, Any]:
    """The content of ``rounds.json`` (see the module docstring)."""
    strategies: dict[str, dict[str, Any]] = {}
    sources = {r.strategy: r.source for r in result.rounds}
    for r in result.rounds:
        for strategy, seconds in ((r.strategy, r.measured_s), (r.baseline, r.baseline_s)):
            if strategy:
                entry = strategies.setdefault(strategy, {"source": sources[strategy], "rounds": [], "measured_s": []})
                entry["rounds"].append(r.index)
                entry["measured_s"].append(seconds)
    for entry in strategies.values():
        entry["median_s"] = statistics.median(entry["measured_s"])
    first = result.rounds[0].strategy
    final = strategies[result.active.id]
    verify = [r for r in result.rounds if r.ran == "verify"]
    paired = None
    if verify:
        row = verify[-1]
        paired = {"candidate": row.strategy, "candidate_s": row.measured_s, "first_s": row.baseline_s}
        paired["decision"] = row.decision
    option_values = {k: v for k, v in vars(options).items() if k != "delays"}
    option_values["delays"] = {str(k): v for k, v in options.delays.items()}
    return {
        "model": model,
        "cluster": cluster,
        "options": option_values,
        "start": result.start.as_json() if result.start is not None else None,
        "nodes": len(result.active.assignment),
        "rounds": [r.as_json() for r in result.rounds],
        "active": result.active.id,
        "first": first,
        "first_measured_s": result.rounds[0].measured_s,
        "final_measured_s": final["measured_s"][-1],
        "first_median_s": strategies[first]["median_s"],
        "final_median_s": final["median_s"],
        "paired": paired,
        "strategies": strategies,
        "store": result.store.summary(),
    }


def plot_rounds(rounds: Sequence[Round], path: Path, title: str) -> None:
    """Measured step time per round, the estimate dashed, each decision marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(6.4, 3.6))
    x = [r.index for r in rounds]
    axis.plot(x, [r.measured_s * 1e3 for r in rounds], color="0.4", linewidth=1, label="measured")
    estimated = [(r.index, r.estimated_s * 1e3) for r in rounds if math.isfinite(r.estimated_s)]
    if estimated:
        axis.plot(*zip(*estimated, strict=True), "--", color="tab:orange", linewidth=1, label="estimated")
    for decision, (marker, colour) in DECISION_STYLE.items():
        points = [(r.index, r.measured_s * 1e3) for r in rounds if r.decision == decision]
        if points:
            axis.scatter(*zip(*points, strict=True), marker=marker, color=colour, s=60, zorder=3, label=decision)
    for r in rounds:
        axis.annotate(r.ran, (r.index, r.measured_s * 1e3), textcoords="offset points", xytext=(0, 8), fontsize=7)
    axis.set_xlabel("round")
    axis.set_ylabel("step time (ms)")
    axis.set_xticks(x)
    axis.set_title(title, fontsize=9)
    top = max([r.measured_s * 1e3 for r in rounds] + [e for _, e in estimated])
    axis.set_ylim(0, top * 1.25)  # room for the labels
    axis.legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run(argv: Sequence[str] | None = None) -> int:
    """The command line; user errors raise :class:`GraphIRError`."""
    args = _parser().parse_args(argv)
    options = _options(args)
    from graphir.backends.tf.rig import rig
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers import load_module
    from graphir.passes.profile.cost_store import CostStore

    cluster = resolve_cluster(args.cluster)
    if not all("/job:" in d.tf_device for d in cluster.devices):
        raise GraphIRError(
            f"cluster '{args.cluster}' has no TensorFlow workers (/job:worker/task:k devices): "
            "graphir-tune trains on them (e.g. --cluster 2xcpu-workers)"
        )
    module = load_module(args.model)
    module.set_cluster(cluster)
    check_runnable(module, "graphir-tune", args.allow_io_ops)
    replica = None
    if args.replica_graph:
        replica = load_module(args.replica_graph)
        replica.name = module.name
        check_runnable(replica, "graphir-tune", args.allow_io_ops)
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GraphIRError(f"cannot create directory '{out}': {exc.strerror or exc}") from None
    store_path = Path(args.store) if args.store else out / "costs.json"
    store = CostStore.open(store_path, module.name)
    log = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    start = "warm" if store.updates else "cold"
    log(f"tune: {module.name} ({len(module.graph)} nodes) on {cluster.spec}, {start} cost store {store_path}")
    with allowing_io_ops(args.allow_io_ops), rig(cluster) as servers:
        result = tune(
            module,
            store,
            rig_runner(servers, options),
            options,
            log=log,
            save=lambda s: s.save(store_path),
            replica=replica,
        )
    document = rounds_document(module.name, cluster.spec, options, result)
    write_atomically(out / "rounds.json", json.dumps(document, indent=1) + "\n", GraphIRError)
    placement = {name: device for name, (device, _) in sorted(result.active.assignment.items())}
    write_atomically(out / "placement.json", json.dumps(placement, indent=0) + "\n", GraphIRError)
    plot_rounds(result.rounds, out / "rounds.png", f"graphir-tune {module.name} on {cluster.spec}")
    first, final = document["first_measured_s"] * 1e3, document["final_measured_s"] * 1e3
    log(
        f"tune: active {result.active.id} ({result.active.source}); first round {first:.2f} ms, final {final:.2f} ms; "
        f"wrote {out}/rounds.json, rounds.png, placement.json"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``graphir-tune``: one line and exit status 1 on a user error."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        return run(argv)
    except GraphIRError as exc:
        print(f"graphir-tune: {exc.one_line()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
