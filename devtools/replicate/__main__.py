"""``python -m devtools.replicate``: run the papers' replication experiments (``make replicate``).

Usage::

    python -m devtools.replicate [--only=celeritas,fastt,pesto,moirai] [--quick] [--out DIR]

Each paper's module (:data:`PAPERS`) runs in turn with ``main(["--out", DIR] + ["--quick"])`` and writes
``DIR/replicate_<paper>.md`` (default ``benchmarks/results``). Progress goes to stderr, with the time
each paper took and the total. A paper that fails (or whose module is missing) is reported in one
line and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence

from devtools.replicate.common import DEFAULT_OUT, ArgumentParser

PAPERS = ("celeritas", "fastt", "pesto", "moirai")
"""Every paper, in run order."""

PROG = "python -m devtools.replicate"


def parse_only(text: str) -> list[str]:
    """``a,b`` -> the papers to run, in :data:`PAPERS` order.

    Raises:
        ValueError: an unknown or empty name.
    """
    names = [name.strip() for name in text.split(",")]
    if not names or any(not name for name in names):
        raise ValueError(f"--only needs comma-separated paper names (known: {', '.join(PAPERS)})")
    unknown = [name for name in names if name not in PAPERS]
    if unknown:
        raise ValueError(f"unknown paper '{unknown[0]}' in --only (known: {', '.join(PAPERS)})")
    return [paper for paper in PAPERS if paper in names]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected papers; return 0 when all succeeded, else 1."""
    parser = ArgumentParser(prog=PROG, description="Re-run the papers' headline comparisons on the zoo.")
    parser.add_argument("--only", default=",".join(PAPERS), help="papers to run, comma-separated (default: all)")
    parser.add_argument("--quick", action="store_true", help="tiny settings (for tests): bundled model, short limits")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory of the tables (default: %(default)s)")
    try:
        args = parser.parse_args(argv)
        papers = parse_only(args.only)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    failed: list[str] = []
    for paper in papers:
        print(f"{PROG}: {paper} ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        try:
            module = importlib.import_module(f"devtools.replicate.{paper}")
        except ImportError as exc:
            print(f"{PROG}: error: {paper}: cannot import its module: {exc}", file=sys.stderr)
            failed.append(paper)
            continue
        status = module.main(["--out", args.out, *(["--quick"] if args.quick else [])])
        seconds = time.perf_counter() - began
        if status != 0:
            failed.append(paper)
            print(f"{PROG}: error: {paper} failed (exit status {status}) after {seconds:.1f} s", file=sys.stderr)
        else:
            print(f"{PROG}: {paper} done in {seconds:.1f} s", file=sys.stderr, flush=True)
    total = time.perf_counter() - started
    summary = f"{len(papers) - len(failed)}/{len(papers)} papers" + (f", failed: {', '.join(failed)}" if failed else "")
    print(f"{PROG}: {summary}; total {total:.1f} s ({total / 60:.1f} min)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
