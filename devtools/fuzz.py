"""Fuzz ``graphir-opt`` with mutated `.gir`, ONNX and TensorFlow GraphDef inputs.

Usage::

    python -m devtools.fuzz --minutes 30 --seed 1 --report benchmarks/results/fuzz.md
    python -m devtools.fuzz --runs 300 --seed 7          # a short, seeded slice

Every input goes through the real command-line driver (:func:`graphir.driver.run`) inside a
long-lived **worker process**; the parent sends one input at a time and watches it. Each run is
classified:

* ``ok``: exit status 0;
* ``error``: exit status 1 with a clean diagnostic (first stderr line ``... error: ...``, no
  traceback, and a pre-existing ``-o`` file left untouched);
* ``crash``: anything else (an exception escaping the driver, exit status 2 = internal error, a
  traceback on stderr, a clobbered output file, a worker killed by a signal);
* ``stray``: a file appeared outside the output path during the run (in the worker's working
  directory, beside its input and output, or in :data:`CANARY_DIR`), whatever the exit status;
* ``hang``: no answer within ``--timeout`` seconds of the worker's CPU time (wall time is bounded
  only loosely, so a machine busy with other work does not make slow inputs "hang"), or the
  worker's resident memory above
  ``--memory-mb`` (the worker is killed and restarted; the input is saved like a crash).

Inputs come from seeds (the golden `.gir` tests, the examples, small ONNX models built with the
``onnx`` API, the GraphDef fixtures) through mutators: for `.gir` a token-level grammar mutator
(numbers replaced by boundary values, names swapped to create cycles and dangling uses, lines
duplicated, dropped or swapped, hostile annotations and deep nesting spliced in) and a byte-level
one; for ONNX structured mutations through the protobuf API (dims, element types, renamed
operands, dropped nodes, invalid UTF-8 written over names) plus byte flips of the serialized
model; for GraphDef the same on ``NodeDef`` messages. A mutant whose outcome (ok, or the error
message with its quoted names and numbers masked) was never seen joins the corpus, a cheap
novelty feedback in place of coverage.

**Run paths** (``--kinds graphdef-run=1,onnx-run=1``, a campaign of its own): small TensorFlow
steps and ONNX models, mutated as above, are *executed* through ``profile{mode=tf}``,
``profile{mode=onnxruntime}`` and ``--run-tf`` on the worker's 2 logical CPUs with
``--run-timeout=10`` (a run that hangs must be ended by graphir itself). Their seeds include models
that write, read, list or print into files, call Python or use a custom ONNX domain, and one
GraphDef mutant in ten has a node turned into such an op: graphir must refuse them in one line
(:mod:`graphir.runguard`), and no file may appear outside the output path.

Each new crash (keyed by exception type and the innermost graphir frame) is minimised (greedy
removal of lines, nodes and tokens while the same crash persists) and saved as a reproducer under
``tests/data/crashes/`` (``<name>.<suffix>`` plus ``<name>.expected``: the arguments and the
expected first stderr line, left empty until the crash is fixed); ``tests/unit/test_crashes.py``
turns every saved reproducer into a regression test.

Everything is deterministic for a given ``--seed``: the mutation stream depends on the seed and on
the outcomes only, and outcomes are deterministic.

Atheris (coverage-guided) is not installed here and has no wheel for every Python; the mutators
are plain seeded Python so the harness runs wherever graphir runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shlex
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devtools.fuzz_mutators import (
    _TOKEN,
    gir_seeds,
    graphdef_run_seeds,
    graphdef_seeds,
    mutate_gir,
    mutate_graphdef,
    mutate_graphdef_run,
    mutate_onnx,
    onnx_run_seeds,
    onnx_seeds,
)
from devtools.fuzz_worker import (
    CANARY_DIR,
    OUTCOMES,
    REPO_ROOT,
    SUFFIX,
    Job,
    Outcome,
    Worker,
    _worker_main,
    classify,
)

CRASH_DIR = REPO_ROOT / "tests" / "data" / "crashes"

# ------------------------------------------------------------------------------------- pipelines

GIR_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=profile,fuse,place,simulate",),
    ("--passes=profile,place{algo=m-etf},simulate", "--emit=json"),
)
ONNX_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=fuse,place",),
)
GRAPHDEF_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--emit=summary",),
    ("--passes=profile,place",),
)
# The run paths: the model is executed, on the worker's 2 logical CPUs, with a time limit and a memory
# limit below the harness's own (a run that hangs or would need too much must be stopped by graphir).
_RUN = ("--cluster=2xcpu", "--run-timeout=10", "--run-memory-mb=1024", "--emit=summary")
GRAPHDEF_RUN_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--passes=profile{mode=tf iterations=2 warmup=1}", *_RUN),
    ("--passes=profile,place{algo=m-topo}", "--run-tf=2", *_RUN),
)
ONNX_RUN_PIPELINES: tuple[tuple[str, ...], ...] = (
    ("--passes=profile{mode=onnxruntime iterations=2 warmup=1}", *_RUN),
    ("--passes=profile,place{algo=m-topo}", "--run-tf=2", *_RUN),
)
RUN_KINDS = frozenset({"graphdef-run", "onnx-run"})
"""Input kinds whose pipelines run the model (measured times vary: no determinism spot check)."""

# Pipelines generated from a grammar of pass specs with boundary option values (one `.gir` run in
# ten): option parsing and passes with hostile options. Passes that measure hardware
# (calibrate-comm, profile modes other than analytical) or solve exact problems (ilp) stay out:
# they are slow by design, not hung.
_INTS = ("0", "-1", "1", "2", "3", "7", "99999999999999999999")
_FLOATS = ("0", "0.5", "1", "-1", "nan", "inf", "1e308", "1e-300")
_PASS_SPECS: tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...] = (
    ("profile", (("target", _INTS),)),
    (
        "fuse",
        (
            ("algo", ("cpd-topo", "rules", "acyclic-batch", "colocation", "bogus")),
            ("window", _INTS),
            ("mem-cap", _FLOATS),
            ("target", _INTS),
        ),
    ),
    ("place", (("algo", ("m-topo", "m-etf", "m-sct", "heft", "expert", "single", "metis", "adjusting", "dpos", "x")),)),
    ("schedule", ()),
    (
        "simulate",
        (
            ("congestion", ("pair", "port", "task", "topology")),
            ("order", ("enforced", "dynamic")),
            ("fail-on-oom", ("true", "false", "2")),
        ),
    ),
    ("critical-path", (("kind", ("", "V100", "nope")),)),
    ("dce", (("keep", ("y", "x,y", '""')), ("prune-constants", ("true", "false")))),
    ("strip-annotations", (("keys", ("device,order", "cost", "group", "nope")),)),
    ("topo-order", (("order", ("m-topo", "dfs-topo", "cpd-topo")), ("parts", _INTS))),
    ("split", (("op", ("y", "a", "nope", "")), ("parts", _INTS), ("axis", ("batch", "0", "1", "-1", "7")))),
    ("verify-acyclic", ()),
    ("os-dpos", ()),
)


def random_pipeline(rng: random.Random) -> str:
    """Two to four pass specs, each option present with probability one half."""
    parts = []
    for _ in range(rng.randint(1, 4)):
        name, options = rng.choice(_PASS_SPECS)
        chosen = [f"{key}={rng.choice(values)}" for key, values in options if rng.random() < 0.5]
        parts.append(name + ("{" + " ".join(chosen) + "}" if chosen else ""))
    text = ",".join(parts)
    if rng.random() < 0.1:  # and now and then a broken one
        k = rng.randrange(len(text) + 1)
        text = text[:k] + rng.choice(("{", "}", ",", "=", '"', " ", "{a=" * 50)) + text[k:]
    return text


# ------------------------------------------------------------------------------------- minimise


def minimise(job: Job, still_fails: Callable[[Job], bool], budget: int = 150) -> Job:
    """Greedy reduction keeping ``still_fails``: lines (or ONNX/GraphDef nodes), then tokens."""
    tries = 0

    def attempt(candidate: Job) -> bool:
        nonlocal tries
        if tries >= budget or candidate.data == job.data:
            return False
        tries += 1
        return still_fails(candidate)

    for phase in range(2):
        split = _units(job, phase)
        if split is None:
            continue
        units, join = split
        k = len(units) - 1
        while k >= 0 and tries < budget:
            if k < len(units):
                trial = units[:k] + units[k + 1 :]
                candidate = Job(job.kind, join(trial), job.args)
                if attempt(candidate):
                    units, job = trial, candidate
            k -= 1
    return job


def _units(job: Job, phase: int) -> tuple[list, Callable[[list], bytes]] | None:
    """The pieces reduction may drop: `.gir` lines then tokens; ONNX nodes then other lists."""
    if job.kind == "gir":
        text = job.data.decode("utf-8", "surrogateescape")

        def join_text(parts: list[str]) -> bytes:
            return "".join(parts).encode("utf-8", "surrogateescape")

        return (text.splitlines(keepends=True) if phase == 0 else _TOKEN.findall(text)), join_text
    if job.kind in ("onnx", "onnx-run"):
        import onnx

        try:
            model = onnx.load_from_string(job.data)
        except Exception:  # noqa: BLE001
            return None
        field_name = ("node", "initializer")[phase]
        base = model.SerializeToString()

        def join_model(parts: list) -> bytes:
            copy = onnx.load_from_string(base)
            getattr(copy.graph, field_name).clear()
            getattr(copy.graph, field_name).extend(parts)
            return copy.SerializeToString()

        return list(getattr(model.graph, field_name)), join_model
    if job.kind in ("graphdef", "graphdef-run") and phase == 0:
        from tensorflow.core.framework import graph_pb2

        graph_def = graph_pb2.GraphDef()
        try:
            graph_def.ParseFromString(job.data)
        except Exception:  # noqa: BLE001
            return None
        base = graph_def.SerializeToString()

        def join_graph(parts: list) -> bytes:
            copy = graph_pb2.GraphDef()
            copy.ParseFromString(base)
            del copy.node[:]
            copy.node.extend(parts)
            return copy.SerializeToString()

        return list(graph_def.node), join_graph
    return None


# ------------------------------------------------------------------------------------- campaign


@dataclass
class Campaign:
    """Counts and state of one fuzzing run."""

    seed: int
    kinds: dict[str, float]
    save: bool = True
    counts: dict[str, Counter[str]] = field(default_factory=dict)
    crashes: dict[str, tuple[Job, Outcome]] = field(default_factory=dict)
    saved: list[Path] = field(default_factory=list)
    nondeterministic: int = 0


MUTATORS: dict[str, Callable[[bytes, random.Random, list[bytes]], bytes]] = {
    "gir": mutate_gir,
    "onnx": mutate_onnx,
    "graphdef": mutate_graphdef,
    "graphdef-run": mutate_graphdef_run,
    "onnx-run": mutate_onnx,
}
PIPELINES = {
    "gir": GIR_PIPELINES,
    "onnx": ONNX_PIPELINES,
    "graphdef": GRAPHDEF_PIPELINES,
    "graphdef-run": GRAPHDEF_RUN_PIPELINES,
    "onnx-run": ONNX_RUN_PIPELINES,
}
SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "gir": gir_seeds,
    "onnx": onnx_seeds,
    "graphdef": graphdef_seeds,
    "graphdef-run": graphdef_run_seeds,
    "onnx-run": onnx_run_seeds,
}


def run_campaign(
    kinds: dict[str, float],
    seed: int,
    seconds: float | None,
    runs: int | None,
    timeout: float = 20.0,
    memory_mb: int = 3072,
    save: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Campaign:
    """Fuzz until ``seconds`` pass or ``runs`` inputs ran; ``kinds`` weighs the input kinds."""
    campaign = Campaign(seed, kinds, save)
    rng = random.Random(seed)
    corpora = {kind: SEEDS[kind]() for kind in kinds}
    seen: dict[str, set[str]] = {kind: set() for kind in kinds}
    worker = Worker(timeout, memory_mb)
    # Inputs that run through every stage: most mutants of a valid parent still fail to parse or
    # verify, so parents come from this pool 70% of the time to keep the passes and emitters busy.
    valid: dict[str, list[bytes]] = {
        kind: [
            seed for seed in corpora[kind] if classify(worker.run(Job(kind, seed, PIPELINES[kind][0]))).outcome == "ok"
        ]
        for kind in kinds
    }
    started = time.monotonic()
    done = 0
    weights = [kinds[k] for k in kinds]
    names = list(kinds)
    last_report = started
    try:
        while True:
            if runs is not None and done >= runs:
                break
            if seconds is not None and time.monotonic() - started >= seconds:
                break
            kind = rng.choices(names, weights)[0]
            corpus = corpora[kind]
            parent = rng.choice(valid[kind] if valid[kind] and rng.random() < 0.7 else corpus)
            data = MUTATORS[kind](parent, rng, corpus)
            args = rng.choice(PIPELINES[kind])
            if kind == "gir" and rng.random() < 0.1:
                args = (f"--passes={random_pipeline(rng)}", rng.choice(("--emit=gir", "--emit=summary")))
            job = Job(kind, data, args)
            outcome = classify(worker.run(job))
            done += 1
            campaign.counts.setdefault(kind, Counter())[outcome.outcome] += 1
            if outcome.outcome == "ok" and done % 97 == 0 and kind not in RUN_KINDS:  # determinism spot check
                first, again = worker.run(job), worker.run(job)
                if isinstance(first, dict) and isinstance(again, dict) and first["output_hash"] != again["output_hash"]:
                    campaign.nondeterministic += 1
            if outcome.outcome == "ok" and len(valid[kind]) < 1000 and rng.random() < 0.2:
                valid[kind].append(data)
            if outcome.key not in seen[kind]:
                seen[kind].add(outcome.key)
                if outcome.outcome in ("ok", "error") and len(corpus) < 2000 and len(data) < 200_000:
                    corpus.append(data)
            if outcome.outcome in ("crash", "hang", "stray") and outcome.key not in campaign.crashes:
                campaign.crashes[outcome.key] = (job, outcome)
                if progress:
                    progress(f"new {outcome.outcome} [{kind}] {outcome.key}: {outcome.line[:200]}")
                if save:
                    campaign.saved.append(_save_crash(job, outcome, worker))
            if progress and time.monotonic() - last_report > 60:
                last_report = time.monotonic()
                progress(f"{done} runs, {time.monotonic() - started:.0f}s: {_totals(campaign)}")
    finally:
        worker.close()
    campaign.counts = {k: campaign.counts.get(k, Counter()) for k in kinds}
    return campaign


def _totals(campaign: Campaign) -> str:
    return "; ".join(
        f"{kind} " + " ".join(f"{o}={campaign.counts.get(kind, Counter())[o]}" for o in OUTCOMES)
        for kind in campaign.kinds
    )


def _save_crash(job: Job, outcome: Outcome, worker: Worker) -> Path:
    """Minimise and write ``tests/data/crashes/<name>.<suffix>`` and ``<name>.expected``."""

    def same(candidate: Job) -> bool:
        return classify(worker.run(candidate)).key == outcome.key

    small = minimise(job, same) if outcome.outcome in ("crash", "stray") else job
    slug = re.sub(r"[^A-Za-z0-9]+", "-", outcome.key).strip("-").lower()[:60]
    digest = hashlib.sha256(small.data).hexdigest()[:8]
    name = f"fuzz-{slug}-{digest}"
    CRASH_DIR.mkdir(parents=True, exist_ok=True)
    path = CRASH_DIR / f"{name}{SUFFIX[small.kind]}"
    path.write_bytes(small.data)
    (CRASH_DIR / f"{name}.expected").write_text(f"args: {shlex.join(small.args)}\nstderr:\n")
    return path


# ------------------------------------------------------------------------------------- CLI


PAGE_TITLE = "# Fuzzing `graphir-opt` (devtools/fuzz.py)"


def _section_title(campaign: Campaign) -> str:
    """The page section a campaign writes: the run paths, or the import, pass and emit paths."""
    if set(campaign.kinds) <= RUN_KINDS:
        return "## Run paths (the model executed: profile{mode=tf}, profile{mode=onnxruntime}, --run-tf)"
    return "## Import, pass and emit paths"


def _markdown(campaign: Campaign, seconds: float, command: str) -> str:
    """The campaign's section of the page (its title first)."""
    lines = [
        _section_title(campaign),
        "",
        f"Command: `{command}` (seed {campaign.seed}), {seconds / 60:.1f} minutes of wall time on this machine "
        "(2 cores shared with other work; one worker process).",
        "",
        "| input kind | pipelines | runs | ok | clean error | crash | hang | stray files |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in campaign.kinds:
        counts = campaign.counts.get(kind, Counter())
        pipes = "; ".join(" ".join(p) for p in PIPELINES[kind])
        total = sum(counts.values())
        lines.append(
            f"| {kind} | `{pipes}` | {total:,} | {counts['ok']:,} | {counts['error']:,} | "
            f"{counts['crash']:,} | {counts['hang']:,} | {counts['stray']:,} |"
        )
    if RUN_KINDS & set(campaign.kinds):
        lines += [
            "",
            "Run inputs: small TensorFlow steps (a dense layer, a convolution, a training step with a variable) and "
            "small ONNX models, plus seeds that write a file (relative, and into the canary directory "
            f"`{CANARY_DIR}`), read one, list one, print into one, call Python, or use an op of a custom ONNX domain; "
            "one mutant in ten of a GraphDef turns a node into such an op. A stray file is any file that appeared "
            "after a run in the worker's directories (its working directory, beside the input and output) or in "
            "the canary directory, whatever the run's status.",
        ]
    else:
        lines += [
            "",
            f"Determinism spot checks (every 97th successful run re-run twice): {campaign.nondeterministic} "
            "mismatches.",
        ]
    if campaign.crashes:
        lines += ["", "Crashes, hangs and stray files found (each saved under tests/data/crashes/):", ""]
        lines += [f"- `{key}`: {outcome.line[:200]}" for key, (_, outcome) in sorted(campaign.crashes.items())]
    else:
        lines += ["", "No crash, no hang and no stray file."]
    return "\n".join(lines) + "\n"


def write_report(path: Path, section: str) -> None:
    """Write ``section`` (its ``## `` title first) into the page at ``path``, keeping the page's other sections."""
    title = section.split("\n", 1)[0].split(" (", 1)[0]
    kept: list[str] = []
    if path.is_file():
        chunks = re.split(r"(?m)^(?=## )", path.read_text())
        kept = [c.rstrip("\n") + "\n" for c in chunks[1:] if c.split("\n", 1)[0].split(" (", 1)[0] != title]
    sections = sorted([*kept, section], key=lambda c: not c.startswith("## Import"))
    path.write_text(PAGE_TITLE + "\n\n" + "\n".join(sections))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``python -m devtools.fuzz``)."""
    parser = argparse.ArgumentParser(prog="graphir-fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--minutes", type=float, help="stop after this many minutes")
    parser.add_argument("--runs", type=int, help="stop after this many inputs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the mutation stream (default 1)")
    parser.add_argument(
        "--kinds",
        default="gir=20,onnx=2,graphdef=0.5",
        help="input kinds and weights (also graphdef-run, onnx-run: the run paths)",
    )
    parser.add_argument("--timeout", type=float, default=20.0, help="CPU seconds per input before it counts as a hang")
    parser.add_argument("--memory-mb", type=int, default=3072, help="worker resident memory limit (MiB)")
    parser.add_argument("--no-save", action="store_true", help="do not write reproducers")
    parser.add_argument("--report", type=Path, help="write the counts as Markdown to this file")
    args = parser.parse_args(argv)
    if args.worker:
        _worker_main()
        return 0
    if args.minutes is None and args.runs is None:
        parser.error("give --minutes or --runs")
    kinds = {}
    for item in args.kinds.split(","):
        name, _, weight = item.partition("=")
        if name not in MUTATORS:
            parser.error(f"unknown input kind '{name}' (known: {', '.join(MUTATORS)})")
        kinds[name] = float(weight or 1)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # the GraphDef seeds import TensorFlow's protos
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"fuzz: {text}", file=sys.stderr, flush=True)

    campaign = run_campaign(
        kinds,
        args.seed,
        None if args.minutes is None else args.minutes * 60,
        args.runs,
        args.timeout,
        args.memory_mb,
        not args.no_save,
        say,
    )
    elapsed = time.monotonic() - started
    say(f"done in {elapsed:.0f}s: {_totals(campaign)}")
    for path in campaign.saved:
        say(f"reproducer: {path.relative_to(REPO_ROOT)}")
    if args.report:
        command = "python -m devtools.fuzz " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
        write_report(args.report, _markdown(campaign, elapsed, command))
        say(f"wrote {args.report}")
    bad = sum(c["crash"] + c["hang"] + c["stray"] for c in campaign.counts.values())
    print(json.dumps({k: dict(v) for k, v in campaign.counts.items()}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
