r"""Byte-identity regression check: every placer on the zoo's training graphs and the onnx light models.

A restructuring must not change any answer. This tool runs a fixed matrix of ``graphir-opt``
invocations (through :func:`graphir.driver.run`, the command line's own entry point) and records
the SHA-256 of each printed ``.gir`` module. ``--write FILE`` records them; ``--check FILE``
compares a new run with a recorded one and lists every cell whose output changed.

The matrix:

* models: the zoo's training graphs (``zoo:*_train``; built on first use, which needs TensorFlow)
  and the nine ``light_*.onnx`` models that the ``onnx`` package ships;
* cluster: ``celeritas`` (4x V100 32 GB over PCIe);
* per model, ``profile`` runs once (``base.gir``) and ``profile,fuse{algo=cpd-topo}`` once
  (``fused.gir``); then every placer runs as ``place{algo=...},simulate`` on the file it belongs
  to: ``single`` and ``expert`` on the unfused graph (as ``make bench-place`` does), the others on
  the fused one. ``ilp`` and ``os-dpos`` run on the light models only (on the big graphs the ILP
  stops at its wall-clock limit, so its answer would depend on the machine's speed; OS-DPOS takes
  minutes per graph there). On the light models the fused placers and OS-DPOS also run on the
  unfused graph, where they spread the branches over the devices. ``data-parallel`` needs a TF
  training graph: it runs after ``data-parallel{replicas=2}`` on ``zoo:lstm_train``.

Usage::

    python -m devtools.regress --write benchmarks/results/regression.json   # record
    python -m devtools.regress --check benchmarks/results/regression.json   # compare

``--models`` narrows the run to model specs containing one of the given words. Exit status: 0 when
every compared cell is identical, 1 otherwise (or on a failed cell).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

ZOO_TRAIN = (
    "inception_v3_train",
    "resnet50_train",
    "vgg19_train",
    "nasnet_mobile_train",
    "nasnet_large_train",
    "lstm_train",
    "transformer_train",
    "gpt_train",
    "bert_large_train",
)
LIGHT = (
    "light_bvlc_alexnet",
    "light_densenet121",
    "light_inception_v1",
    "light_inception_v2",
    "light_resnet50",
    "light_shufflenet",
    "light_squeezenet",
    "light_vgg19",
    "light_zfnet512",
)
CLUSTER = "celeritas"
UNFUSED = ("single", "expert")
FUSED = ("m-topo", "m-etf", "m-sct", "heft", "dpos", "order-place", "adjusting", "metis")
LIGHT_ONLY = ("ilp time-limit=30", "os-dpos")


def _light_path(name: str) -> str:
    import onnx

    return str(Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx")


def _driver(argv: list[str]) -> tuple[int, str]:
    """Run ``graphir-opt argv`` in this process; return (exit status, stderr text)."""
    from graphir.driver import run

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = run(argv)
    return status, err.getvalue()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _placing(algo: str) -> str:
    """The pipeline of one placement cell: ``place{algo=...}``, or the ``os-dpos`` pass (it rewrites the graph).

    The cells check the papers' rules as published, whatever the defaults: ``mem-model=paper`` for
    every placer that has the option and ``simulate{congestion=pair}`` (the defaults when the
    digests were recorded; the defaults are now ``liveness`` and ``topology``).
    """
    from graphir.passes.place import PLACERS

    name, *options = algo.split()
    if name == "os-dpos":
        placing = "os-dpos{mem-model=paper congestion=pair}"
    else:
        if name in PLACERS and "mem_model" in {f.name for f in dataclasses.fields(PLACERS[name])}:
            options.append("mem-model=paper")
        placing = "place{" + " ".join([f"algo={name}", *options]) + "}"
    return f"{placing},simulate{{congestion=pair}}"


def _model_cells(spec: str, label: str, light: bool, work: Path) -> dict[str, str]:
    """Run every cell of one model; returns ``{cell: sha256 or 'error: ...'}``."""
    out: dict[str, str] = {}
    base = work / f"{label}.base.gir"
    fused = work / f"{label}.fused.gir"
    for path, passes in ((base, "profile"), (fused, "profile,fuse{algo=cpd-topo}")):
        status, err = _driver([spec, f"--cluster={CLUSTER}", f"--passes={passes}", "-o", str(path)])
        if status:
            return {f"{label}/{passes}": "error: " + err.strip().splitlines()[-1]}
    cells: list[tuple[str, Path, str]] = [(algo, base, _placing(algo)) for algo in UNFUSED]
    cells += [(algo, fused, _placing(algo)) for algo in FUSED]
    if light:
        cells += [(algo.split()[0], fused, _placing(algo)) for algo in LIGHT_ONLY]
        # Small graphs: the list schedulers also on the unfused graph, where they spread the branches.
        cells += [(f"{algo}.unfused", base, _placing(algo)) for algo in (*FUSED, "os-dpos")]
    if label == "lstm_train":
        dp = "data-parallel{replicas=2},profile,place{algo=data-parallel},simulate{congestion=pair}"
        cells.append(("data-parallel", base, dp))
    for name, source, passes in cells:
        target = work / f"{label}.{name}.gir"
        status, err = _driver([str(source), f"--passes={passes}", "-o", str(target)])
        key = f"{label}/{name}"
        out[key] = _digest(target) if status == 0 else "error: " + (err.strip().splitlines() or ["?"])[-1]
    return out


def _job(item: tuple[str, str, bool, str]) -> tuple[str, dict[str, str], float]:
    spec, label, light, work = item
    began = time.perf_counter()
    cells = _model_cells(spec, label, light, Path(work))
    return label, cells, time.perf_counter() - began


def run_matrix(models: list[str] | None, jobs: int) -> dict[str, str]:
    """Run the matrix (optionally only models whose label contains one of ``models``)."""
    items = [(f"zoo:{name}", name, False) for name in ZOO_TRAIN] + [(_light_path(n), n, True) for n in LIGHT]
    if models:
        items = [item for item in items if any(word in item[1] for word in models)]
    results: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="graphir-regress-") as work:
        work_items = [(*item, work) for item in items]
        context = multiprocessing.get_context("spawn")
        with context.Pool(jobs) as pool:
            for label, cells, seconds in pool.imap_unordered(_job, work_items):
                print(f"regress: {label}: {len(cells)} cells in {seconds:.1f} s", file=sys.stderr, flush=True)
                results.update(cells)
    return dict(sorted(results.items()))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m devtools.regress", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE", help="record the digests into FILE (JSON)")
    mode.add_argument("--check", metavar="FILE", help="compare with the digests recorded in FILE")
    parser.add_argument("--models", nargs="*", help="only models whose name contains one of these words")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    results = run_matrix(args.models, args.jobs)
    errors = [key for key, value in results.items() if value.startswith("error")]
    for key in errors:
        print(f"regress: {key}: {results[key]}", file=sys.stderr)
    if args.write:
        Path(args.write).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        print(f"regress: {len(results)} cells recorded in {args.write} ({len(errors)} errors)")
        return 1 if errors else 0
    recorded: dict[str, str] = json.loads(Path(args.check).read_text())
    changed = [key for key in results if key in recorded and recorded[key] != results[key]]
    missing = [key for key in recorded if key not in results]
    same = sum(1 for key in results if recorded.get(key) == results[key])
    for key in changed:
        print(f"regress: CHANGED {key}", file=sys.stderr)
    print(f"regress: {same} identical, {len(changed)} changed, {len(missing)} not run, {len(errors)} errors")
    return 1 if changed or errors else 0


if __name__ == "__main__":
    sys.exit(main())
