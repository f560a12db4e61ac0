"""``make bench-online``: graphir-tune on zoo training graphs on the 2-worker rig; ``benchmarks/results/online.md``.

Each model runs ``graphir-tune`` in a fresh process (``--rounds`` rounds, at least ``--min-rounds``
before the loop may stop) and the table lists every round (strategy, what ran, estimated and measured
step time, decision, cost-table change), then per model: the first and the final active strategy's
measured step time, the rounds, and the plot (copied next to the results as ``online_<model>.png``).

Models (small enough to run a step in about a second on one pinned core; the zoo's own builder,
:func:`graphir.tools.zoo.build_train_graphdef`, traces them at these sizes, cached in ``build/online/``,
each also at the per-replica batch (batch / workers), given to ``graphir-tune --replica-graph`` for
FastT's data-parallel start):

* ``resnet50``: the zoo's ``resnet50_train`` builder at batch 2 (two replicas of batch 1);
* ``lstm``: the zoo's LSTM language model (``lstm_train``'s builder) with 2 layers of 256 units,
  vocabulary 2000, 24 steps, batch 8 (the zoo entry, 4 × 2048 units and 32 000 words, holds ~3 GB of
  variables with Adam: more than a worker of this shared machine may take);
* ``gpt``: the zoo's GPT builder with 2 layers, d_model 256, 4 heads, d_ff 1024, vocabulary 2000,
  sequence 64, batch 4 (GPT-2 small at batch 1 takes ~3.5 s per step on one core: six rounds of it
  would take most of an hour here).

Usage: ``python -m devtools.bench_online [--models resnet50,lstm,gpt,gpt+os-dpos] [--rounds 6] [--reuse]``
(``NAME@PLACER``: that model started from PLACER's strategy instead of FastT's default rule;
``NAME+PLACER``: the loop's placer is PLACER, e.g. ``os-dpos``, instead of ``--placer``;
``--reuse``: runs already in the scratch folder are tabulated, not rerun).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphir.driver.clusters import resolve_cluster

__all__ = ["MODELS", "main"]

ROOT = Path(__file__).resolve().parents[1]

MODELS: dict[str, tuple[str, int, tuple[tuple[str, Any], ...]] | str] = {
    "resnet50": ("resnet50", 2, ()),
    "lstm": ("lstm", 8, (("layers", 2), ("units", 256), ("vocab", 2000), ("seq", 24))),
    "gpt": ("gpt", 4, (("layers", 2), ("d_model", 256), ("heads", 4), ("d_ff", 1024), ("vocab", 2000), ("seq", 64))),
}
"""Benchmark name -> a GraphDef file under the repository, or ``(zoo model, batch, config)`` to build."""

_BUILD = """
import json, sys
from graphir.tools.zoo import build_train_graphdef
model, batch, config, path = json.loads(sys.argv[1])
graph_def, _ = build_train_graphdef(model, batch, [tuple(c) for c in config])
open(path, "wb").write(graph_def.SerializeToString(deterministic=True))
"""


def model_file(name: str, scratch: Path, batch: int = 0) -> Path:
    """The GraphDef of benchmark model ``name`` at its batch, or at ``batch`` (built once into ``scratch``)."""
    spec = MODELS[name]
    if isinstance(spec, str):
        return ROOT / spec
    model, own, config = spec
    batch = batch or own
    path = scratch / f"{name}_train_b{batch}.pb"
    if not path.exists():
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        argument = json.dumps([model, batch, [list(c) for c in config], str(path)])
        subprocess.run([sys.executable, "-c", _BUILD, argument], env=env, check=True, timeout=900)
    return path


NOTES_MARKER = "<!-- notes: written by hand, kept when the benchmark rewrites the tables above -->"

_STANDARD_EVAL = """
import json, sys, time
from graphir.driver.clusters import resolve_cluster
from graphir.importers.tf import import_graphdef
from graphir.pass_infra import PassContext
from graphir.passes.profile import Profile
from graphir.passes.transform.batching import register_batch_builder
from graphir.tools.zoo import build_train_graphdef

model, batch, config, batches = json.loads(sys.argv[1])
config = [tuple(c) for c in config]
name = f"{model}_se"
register_batch_builder(name, lambda b: build_train_graphdef(model, b, config)[0])
module = import_graphdef(build_train_graphdef(model, batch, config)[0], name=name)
module.set_cluster(resolve_cluster("2xcpu-workers"))
begin = time.time()
stats = Profile.of("standard-eval", batches=tuple(batches), iterations=3).run(module, PassContext()).stats
print(json.dumps({"stats": stats, "wall_s": time.time() - begin}))
"""

SE_KEYS = (
    ("se2-mem-deviation-mean", "memory deviation, mean", "pct"),
    ("se2-mem-total-deviation", "memory deviation of the total", "pct"),
    ("se2-mem-compared-ops", "nodes compared (memory)", "int"),
    ("se2-time-deviation-median", "time deviation, median", "pct"),
    ("se2-time-10us-deviation-median", "time deviation, median over nodes >= 10 us", "pct"),
    ("se2-time-10us-compared-ops", "nodes >= 10 us", "int"),
    ("se2-time-total-deviation", "time deviation of the total", "pct"),
    ("se2-replaced-time-ops", "nodes whose time was replaced (> 20 %)", "int"),
    ("se2-replaced-mem-ops", "nodes whose memory was replaced (> 20 %)", "int"),
    ("se2-devices", "devices of the sequential placement", "int"),
)


def standard_eval(name: str, log: Any) -> dict[str, Any]:
    """``profile{mode=standard-eval}`` on a builder model at its own batch, fitted at 1/4 and 1/2 of it."""
    spec = MODELS[name]
    assert not isinstance(spec, str), "Standard Evaluation needs a model the zoo's builder can re-batch"
    model, batch, config = spec
    batches = [max(batch // 4, 1), max(batch // 2, 2)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    argument = json.dumps([model, batch, [list(c) for c in config], batches])
    log(f"bench-online: standard evaluation of {name} (batches {batches}, target {batch})")
    process = subprocess.run([sys.executable, "-c", _STANDARD_EVAL, argument], env=env, capture_output=True, text=True)
    if process.returncode != 0:
        raise SystemExit(f"bench-online: standard evaluation of {name} failed:\n{process.stderr[-2000:]}")
    result = json.loads(process.stdout.splitlines()[-1])
    result.update(batches=batches, target=batch)
    return result


def render_standard_eval(results: dict[str, dict[str, Any]]) -> list[str]:
    """The Standard Evaluation section of ``online.md``."""
    names = list(results)
    lines = [
        "",
        "## Celeritas Standard Evaluation, step 2",
        "",
        "`profile{mode=standard-eval iterations=3}` on the small LSTM and GPT above: step 1 runs the model on one "
        "rig worker at the batches shown (3 traced steps each) and fits a line per node (time, output + temporary "
        "bytes) to predict the model's own batch; step 2 places the model sequentially (`m-topo`: devices filled in "
        "topological order up to an equal memory share) on the two rig workers, runs it (3 traced steps) and "
        "compares per node. Deviation = |predicted − measured| / measured over nodes with a positive measurement "
        "(memory: every node but variables and constants, without the BFC allocator's padding). Bounds asserted by "
        "`tests/unit/test_standard_eval.py` (slow) on these two models: memory mean < 10 %; time median over nodes "
        "≥ 10 µs ≤ 50 %; time deviation of the total ≤ 25 %.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
        "| batches fitted → target | " + " | ".join(f"{r['batches']} → {r['target']}" for r in results.values()) + " |",
    ]
    for key, label, kind in SE_KEYS:
        cells = []
        for r in results.values():
            value = r["stats"].get(key)
            cells.append("—" if value is None else (f"{value:.1%}" if kind == "pct" else str(value)))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| wall (s) | " + " | ".join(f"{r['wall_s']:.0f}" for r in results.values()) + " |")
    return lines


def describe(name: str) -> str:
    """How the model is built, for the table."""
    spec = MODELS[name]
    if isinstance(spec, str):
        return f"`{spec}`"
    model, batch, config = spec
    return ", ".join([f"zoo builder `{model}`", f"batch {batch}", *(f"{k} {v}" for k, v in config)])


def parse_run(run: str) -> tuple[str, str, str]:
    """``NAME[@START][+PLACER]`` -> (name, start or "", placer or "")."""
    head, _, placer = run.partition("+")
    name, _, start = head.partition("@")
    return name, start, placer


def run_model(run: str, args: argparse.Namespace, scratch: Path, log: Any) -> dict[str, Any]:
    """graphir-tune on one model (``NAME[@START][+PLACER]``); its rounds.json plus wall time and load."""
    name, start, placer = parse_run(run)
    placer = placer or args.placer
    out = scratch / slug(run)
    if args.reuse and (out / "rounds.json").exists():
        document = json.loads((out / "rounds.json").read_text())
        sidecar = out / "bench.json"
        extra = json.loads(sidecar.read_text()) if sidecar.exists() else {}
        document["wall_s"] = extra.get("wall_s", sum(r["wall_s"] for r in document["rounds"]))
        document["load"] = extra.get("load")
        document.update(plot=out / "rounds.png", graph=describe(name), placer=placer)
        log(f"bench-online: {run}: reusing {out}/rounds.json")
        return document
    graph = model_file(name, scratch)
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "graphir.tools.tune", str(graph), "--cluster", args.cluster]
    command += ["--rounds", str(args.rounds), "--min-rounds", str(args.min_rounds), "-o", str(out)]
    command += ["--steps", str(args.steps), "--placer", placer, "--start", start or args.start]
    spec = MODELS[name]
    workers = len(resolve_cluster(args.cluster).devices)
    if not isinstance(spec, str) and spec[1] % workers == 0 and (start or args.start) in ("auto", "data-parallel"):
        command += ["--replica-graph", str(model_file(name, scratch, spec[1] // workers))]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    begin, load = time.time(), os.getloadavg()[0]
    log(f"bench-online: {run}: {' '.join(command[3:])}")
    process = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    for line in process.stderr.splitlines():
        if line.startswith(("round ", "tune:", "graphir-tune:")):
            log(f"  {line}")
    if process.returncode != 0:
        tail = [line for line in process.stderr.splitlines() if line.strip()][-5:]
        raise SystemExit(f"bench-online: {run} failed:\n" + "\n".join(tail))
    document = json.loads((out / "rounds.json").read_text())
    document["wall_s"] = time.time() - begin
    document["load"] = max(load, os.getloadavg()[0])
    (out / "bench.json").write_text(json.dumps({"wall_s": document["wall_s"], "load": document["load"]}) + "\n")
    document["plot"] = out / "rounds.png"
    document["graph"] = describe(name)
    document["placer"] = placer
    return document


def slug(run: str) -> str:
    """A file-name form of a run name (``gpt@m-etf+os-dpos`` -> ``gpt-m-etf-os-dpos``)."""
    return run.replace("@", "-").replace("+", "-")


def _start(doc: dict[str, Any]) -> str:
    start = doc.get("start") or {}
    if not start:
        return "—"
    replicas = start.get("replicas", 1)
    return start["strategy"] + (f" ×{replicas}" if replicas > 1 else "")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value * 1e3:.1f}"


def render(results: dict[str, dict[str, Any]], args: argparse.Namespace, when: str) -> str:
    """The markdown of ``online.md``."""
    lines = [
        "# Online tuning: FastT's profile → place → run → re-profile loop on the 2-worker rig",
        "",
        f"Command: `python -m devtools.bench_online --rounds {args.rounds} --min-rounds {args.min_rounds}` "
        "(`make bench-online`). Each model: `graphir-tune MODEL --cluster 2xcpu-workers --replica-graph "
        "MODEL_AT_HALF_BATCH` (placer as listed, "
        f"{args.steps} timed + 1 warm-up + 2 traced training steps per round), starting from an empty cost store "
        "with FastT's rule (start `data-parallel ×2`: the model fits a worker, so the loop tunes its 2-replica "
        "data-parallel graph and the first strategy is data parallelism; `m-etf`: started from that placer). "
        "Measured: median wall time of the round's timed steps on the rig "
        "(TF workers pinned one per core). Estimated: the simulator's makespan of the strategy under the cost model "
        "the round started with (unmeasured costs 0, so estimates of unexplored strategies are optimistic by "
        "design). A trial round runs the candidate, then the active strategy again (its baseline, same load): "
        "activate when the candidate is faster, else roll back. When the loop ends on a strategy other than its "
        "first, a verify round runs that strategy and then the first one back to back and keeps the faster "
        "(`rollback`: back to the first). Final ≤ first is read from that paired verify round (or holds "
        "trivially when the loop ends on its first strategy); the medians over all runs of a strategy are listed "
        "for reference (one round's median moves with the machine's load). Change: relative L1 change of the "
        "per-(op, device) cost table over the entries it had.",
        "",
        f"Run {when}, commit `{_commit()}`.",
        "",
        "| run | graph | start | placer | nodes | rounds | first strategy: first round / median (ms) | "
        "final strategy: last run / median (ms) | verify: candidate / first, back to back (ms) | final ≤ first | "
        "decisions | wall (s) | load |",
        "|---|---|---|---|---:|---:|---:|---:|---:|:-:|---|---:|---:|",
    ]
    for name, doc in results.items():
        rounds = doc["rounds"]
        first, final = doc["first_measured_s"], doc["final_measured_s"]
        first_median, final_median = doc["first_median_s"], doc["final_median_s"]
        decisions = ", ".join(r["decision"] for r in rounds)
        paired = doc.get("paired")
        verify = "—" if paired is None else f"{_ms(paired['candidate_s'])} / {_ms(paired['first_s'])}"
        if rounds[0]["strategy"] == doc["active"]:
            ok = "yes (rolled back to the first)" if paired is not None else "yes (same strategy)"
        elif paired is not None:
            ok = "yes (paired)" if paired["candidate_s"] <= paired["first_s"] else "**no** (paired)"
        else:
            ok = "yes (medians)" if final_median <= first_median else "**no** (medians)"
        nodes = doc.get("nodes") or sum(rounds[0]["devices"].values())
        cells = [name, doc["graph"], _start(doc), doc["placer"], str(nodes), str(len(rounds))]
        cells += [f"{_ms(first)} / {_ms(first_median)}", f"{_ms(final)} / {_ms(final_median)}", verify, ok]
        cells += [decisions]
        cells += [f"{doc['wall_s']:.0f}", "—" if doc["load"] is None else f"{doc['load']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    for name, doc in results.items():
        plot = f"online_{slug(name)}.png"
        lines += ["", f"## {name}", "", f"![{name}]({plot})", ""]
        lines += [
            "| round | ran | strategy | source | nodes per device | estimated (ms) | candidate (estimate ms) | "
            "measured (ms) | then ran: strategy (ms) | decision | active after | table change | new entries | "
            "coverage | transfers | loss |",
            "|---:|---|---|---|---|---:|---|---:|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for r in doc["rounds"]:
            devices = ", ".join(f"{d} {c}" for d, c in r["devices"].items())
            candidate = (
                f"{r['candidate']} ({_ms(r['candidate_estimated_s'])})" if r["candidate"] != r["strategy"] else ""
            )
            change = "—" if r["change"] is None else f"{r['change']:.1%}"
            loss = "—" if r["loss"] is None else f"{r['loss']:.4f}"
            baseline = f"{r['baseline']} ({_ms(r.get('baseline_s'))})" if r.get("baseline") else ""
            cells = [
                str(r["index"]), r["ran"], r["strategy"], r["source"], devices, _ms(r["estimated_s"]), candidate,
                _ms(r["measured_s"]), baseline, r["decision"], r["active"], change, str(r["new_entries"]),
                f"{r['coverage']:.0%}", str(r["transfers"]), loss,
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="bench_online", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default="resnet50,lstm,gpt,gpt+os-dpos",
        help=f"comma-separated, of {', '.join(MODELS)}; NAME@PLACER starts that run from PLACER's strategy, "
        "NAME+PLACER tunes with PLACER (e.g. os-dpos)",
    )
    parser.add_argument("--cluster", default="2xcpu-workers")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--min-rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--placer", default="dpos")
    parser.add_argument("--start", default="auto", help="bootstrap strategy (graphir-tune --start)")
    parser.add_argument(
        "--standard-eval", default="lstm,gpt", help="models whose Standard Evaluation step 2 is reported ('': none)"
    )
    parser.add_argument("--reuse", action="store_true", help="include runs already in the scratch folder, not rerun")
    parser.add_argument("--scratch", default=str(ROOT / "build" / "online"))
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "online.md"))
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if parse_run(m)[0] not in MODELS]
    if unknown:
        print(f"bench-online: unknown model(s) {', '.join(unknown)} (known: {', '.join(MODELS)})", file=sys.stderr)
        return 1
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    output = Path(args.output)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {name: run_model(name, args, scratch, log) for name in names}
    for name, doc in results.items():
        shutil.copyfile(doc["plot"], output.parent / f"online_{slug(name)}.png")
    text = render(results, args, when)
    if args.standard_eval:
        evaluated = {name: standard_eval(name, log) for name in args.standard_eval.split(",") if name}
        text += "\n".join(render_standard_eval(evaluated)) + "\n"
    if output.exists() and NOTES_MARKER in output.read_text():
        text += "\n" + NOTES_MARKER + output.read_text().split(NOTES_MARKER, 1)[1]
    output.write_text(text)
    log(f"bench-online: wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
