"""DeviceTimeline benchmark: DPOS / OS-DPOS wall time on FastT's data-parallel graphs, and a synthetic worst case.

Usage::

    python -m devtools.bench_timeline [--case inception_v3:8:dpos] [--runs 3] [--count] [--synthetic]
        [--baseline FILE]

``--case model:gpus:strategy`` (repeatable; strategy ``dpos`` or ``os-dpos``) builds the data-parallel
graph of FastT's Table 1 row exactly as :mod:`devtools.replicate.fastt` does (global batch from
its :data:`~devtools.replicate.fastt.MODELS`), places it ``--runs`` times with the strategy on a
fresh copy and prints each run's wall time, the median, the simulated makespan and a SHA-256 digest of
the printed placed module (identical digests = byte-identical placements). ``--count`` adds, for one
extra run, how many :meth:`DeviceTimeline.earliest_start` queries there were, how many blocks the
timelines held, and how many blocks the plain first-fit walk visits per query (the work the old
linear scan did). ``--synthetic`` times a worst case for the linear walk: 20,000 unit blocks with
gaps of 0.5 and queries of length 1 ready at 0 (every gap too short: the walk runs to the end).

``--baseline FILE`` (e.g. ``git show REV:passes/place/common.py > /tmp/old_common.py``) loads that
file's ``DeviceTimeline`` and alternates runs with it and with the current one on the same graph
(baseline first), so both see the same machine load; each run prints its wall and CPU time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import statistics
import sys
import time
from bisect import bisect_right
from collections.abc import Sequence

from devtools.replicate import fastt
from graphir.clone import clone_module
from graphir.cluster_presets import fastt_gpus
from graphir.driver import load_builtin_passes
from graphir.importers import load_module
from graphir.pass_infra import PassContext
from graphir.passes.place import common
from graphir.passes.place.common import DeviceTimeline
from graphir.printer import print_module
from graphir.simulator import simulate


def _walk_length(line: DeviceTimeline, ready: float, duration: float) -> int:
    """How many blocks the plain first-fit walk from ``bisect_right(ends, ready)`` visits."""
    starts, ends = line.starts, line.ends
    i = first = bisect_right(ends, ready)
    t = ready
    while i < len(starts):
        if t + duration <= starts[i]:
            break
        t = max(t, ends[i])
        i += 1
    return i - first + (1 if i < len(starts) else 0)


def _load_baseline(path: str) -> type:
    """The ``DeviceTimeline`` class defined in the Python file ``path``."""
    spec = importlib.util.spec_from_file_location("bench_timeline_baseline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DeviceTimeline


def _place_once(module, strategy: str, count: bool) -> tuple[float, float, float, str, dict[str, float]]:  # noqa: ANN001
    copy = clone_module(module)
    gpus = sum(1 for d in module.cluster.devices if d.name.startswith("gpu"))
    copy.set_cluster(fastt_gpus(gpus, host=False))
    counts = {"queries": 0, "visited": 0, "max_visited": 0, "blocks": 0, "max_blocks": 0}
    cls = common.DeviceTimeline
    original = cls.earliest_start
    if count:

        def counted(self: DeviceTimeline, ready: float, duration: float) -> float:
            walked = _walk_length(self, ready, duration)
            blocks = len(self.starts)
            counts["queries"] += 1
            counts["visited"] += walked
            counts["max_visited"] = max(counts["max_visited"], walked)
            counts["blocks"] += blocks
            counts["max_blocks"] = max(counts["max_blocks"], blocks)
            return original(self, ready, duration)

        cls.earliest_start = counted
    try:
        began, cpu = time.perf_counter(), time.process_time()
        fastt._placer(strategy).run(copy, PassContext())
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        cls.earliest_start = original
    makespan = simulate(copy, congestion=fastt.CONGESTION, order=fastt.ORDERS[strategy]).makespan
    digest = hashlib.sha256(print_module(copy).encode()).hexdigest()[:16]
    return wall, cpu, makespan, digest, counts


def bench_case(spec: str, runs: int, count: bool, baseline: type | None = None) -> None:
    """Build one FastT data-parallel graph and time ``runs`` placements of it."""
    entry, gpus, strategy = spec.split(":")
    model = next(m for m in fastt.MODELS if m.entry.startswith(entry))
    source = load_module(f"zoo:{model.entry}")
    result, build = fastt._data_parallel(source, int(gpus), model.batch, check=False)
    module = result.module
    print(f"{spec}: {len(module.graph)} nodes, built in {build:.1f} s", flush=True)
    current = common.DeviceTimeline
    kinds = [("baseline", baseline), ("current", current)] if baseline is not None else [("current", current)]
    walls: dict[str, list[float]] = {name: [] for name, _ in kinds}
    cpus: dict[str, list[float]] = {name: [] for name, _ in kinds}
    try:
        for k in range(runs):
            for name, cls in kinds:
                common.DeviceTimeline = cls
                wall, cpu, makespan, digest, _ = _place_once(module, strategy, False)
                walls[name].append(wall)
                cpus[name].append(cpu)
                print(
                    f"  {name} run {k + 1}: {wall:.2f} s wall, {cpu:.2f} s CPU, makespan {makespan:.6f} s, "
                    f"digest {digest}",
                    flush=True,
                )
    finally:
        common.DeviceTimeline = current
    for name, _ in kinds:
        if walls[name]:
            print(
                f"  {name}: median {statistics.median(walls[name]):.2f} s wall, "
                f"{statistics.median(cpus[name]):.2f} s CPU over {runs} runs",
                flush=True,
            )
    if count:
        wall, cpu, makespan, digest, c = _place_once(module, strategy, True)
        q = max(c["queries"], 1)
        print(
            f"  counted run: {c['queries']} queries, blocks per timeline mean {c['blocks'] / q:.0f} max "
            f"{c['max_blocks']}, blocks walked per query mean {c['visited'] / q:.1f} max {c['max_visited']} "
            f"(digest {digest})",
            flush=True,
        )


def bench_synthetic(runs: int, cls: type, name: str, blocks: int = 20_000, queries: int = 2_000) -> None:
    """``blocks`` blocks ``[1.5k, 1.5k + 1)`` and ``queries`` queries (ready 0, duration 1): none fits a gap."""
    walls = []
    for _ in range(runs):
        line = cls()
        for k in range(blocks):
            line.reserve(1.5 * k, 1.5 * k + 1.0)
        began = time.process_time()
        for _ in range(queries):
            answer = line.earliest_start(0.0, 1.0)
        walls.append(time.process_time() - began)
        assert answer == 1.5 * (blocks - 1) + 1.0
    per = statistics.median(walls) / queries * 1e6
    print(
        f"synthetic {name}: {blocks} blocks, {queries} queries: median {statistics.median(walls):.3f} s CPU "
        f"({per:.1f} us/query)",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (see the module docstring)."""
    parser = argparse.ArgumentParser(description="DeviceTimeline benchmark on FastT's data-parallel graphs.")
    parser.add_argument("--case", action="append", default=[], help="model:gpus:strategy (dpos or os-dpos)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", action="store_true")
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--baseline", help="a Python file defining the DeviceTimeline to compare with")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    load_builtin_passes()
    baseline = _load_baseline(args.baseline) if args.baseline else None
    if args.synthetic:
        if baseline is not None:
            bench_synthetic(args.runs, baseline, "baseline")
        bench_synthetic(args.runs, DeviceTimeline, "current")
    for spec in args.case:
        bench_case(spec, args.runs, args.count, baseline)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
