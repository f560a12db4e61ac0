"""Where one replica's step goes under data parallelism with the ring all-reduce, against the work bound.

Builds what ``parallelize`` judges for a ``DxS1xM1.allreduce`` candidate (the module re-batched to
``G / D`` in the IR, ``data-parallel{replicas=D sync=allreduce}``, one replica per accelerator,
``merge-constants``), simulates it, and splits the first accelerator's busy time by part of the step
(forward, backward, the shared update, the ring's nodes) and by whether an op's time is only its
launch (``launch_overhead``: an op whose roofline is below it, e.g. a ``Reshape``, a ``Const``, a
``VarHandleOp``). It then prints the floor that launches set: each replica launches every op of the
step, so with ``n`` ops per replica, a launch of ``l`` and one device's merged step ``C`` (its
``n1`` ops' launches included),

    floor = (C - n1 * l) / D + n * l

before any update or ring cost; ``floor / (C / D)`` is the best ratio to the work bound that data
parallelism can reach under the ruler. Used for issue 37's note on ``bert_large_train`` on ``fastt``
(``benchmarks/results/parallelize-notes.md``).

Usage::

    python -m devtools.replica_breakdown GRAPH.pb --cluster fastt --replicas 8 [--bucket-mib 100] [--top 25]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

import graphir.driver  # noqa: F401  (registers the built-in passes)
from graphir.clone import clone_module
from graphir.errors import GraphIRError, PassError
from graphir.importers import load_module
from graphir.ir import Module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.fuse.kernels import fuse_kernels
from graphir.passes.place.base import Place
from graphir.passes.place.pipeline import BACKWARD, accelerators, training_layout
from graphir.passes.transform.batching import module_batch
from graphir.passes.transform.merge_constants import merge_constants
from graphir.passes.transform.replicate import AGGREGATION_PREFIX, data_parallel, module_at_batch
from graphir.pipeline import parse_pipeline
from graphir.simulator import simulate

PARTS = ("forward", "backward", "update", "ring")


def _part(name: str, copy: int, phase: int) -> str:
    """The part of the step a node belongs to: the ring's nodes by name, the rest by the training layout."""
    if f"/{AGGREGATION_PREFIX}" in name or name.startswith(AGGREGATION_PREFIX):
        return "ring"
    if copy < 0:
        return "update"
    return "backward" if phase == BACKWARD else "forward"


def single_step(module: Module, kernels: bool = False) -> tuple[float, int]:
    """One device's merged step (seconds) and its op count: the work bound's ``C`` and ``n1``.

    With ``kernels``, its fused-kernel sets are marked and costed first (``fuse-kernels{order=dynamic}``).
    """
    one = clone_module(module)
    Place.of("single").run(one, PassContext(seed=0))
    merge_constants(one.graph)
    if kernels:
        fuse_kernels(one, "dynamic")
    return simulate(one).makespan, len(one.graph.index().nodes)


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """One replica's step (module docstring).

    Attributes:
        device: the accelerator broken down (the first).
        makespan: the data-parallel step's simulated seconds.
        busy: each device's busy seconds.
        parts: ``(part, launch only) -> (ops, seconds)`` on ``device``.
        op_types: op type -> ``(ops, seconds)`` on ``device``.
        merged: ``(removed, kept)`` of ``merge-constants``.
        single: one device's merged step (``C``); single_ops: its ops (``n1``).
        launch: the device's launch seconds (``l``).
        replicas: ``D``.
    """

    device: str
    makespan: float
    busy: list[float]
    parts: dict[tuple[str, bool], tuple[int, float]]
    op_types: dict[str, tuple[int, float]]
    merged: tuple[int, int]
    single: float
    single_ops: int
    launch: float
    replicas: int

    @property
    def ops(self) -> int:
        """``n``: the ops on :attr:`device`."""
        return sum(count for count, _ in self.parts.values())

    @property
    def bound(self) -> float:
        """The work bound ``C / D``."""
        return self.single / self.replicas

    @property
    def floor(self) -> float:
        """``(C - n1 l) / D + n l``."""
        return (self.single - self.single_ops * self.launch) / self.replicas + self.ops * self.launch


def breakdown(module: Module, replicas: int, bucket_bytes: int, kernels: bool = False) -> Breakdown:
    """Rewrite, place and simulate ``module`` (profiled, with a cluster) as ``D`` replicas with the ring; split it.

    With ``kernels``, both the step and the one-device step get their fused-kernel sets (``fuse-kernels``).

    Raises:
        PassError: ``replicas`` does not divide the batch, or the module is not a training graph.
    """
    batch = module_batch(module)
    if replicas < 1 or batch % replicas:
        raise PassError(f"replica_breakdown: {replicas} replicas do not divide the batch {batch}")
    rewritten = data_parallel(
        module,
        replicas,
        microbatches=1,
        replica=module_at_batch(module, batch // replicas),
        sync="allreduce",
        bucket_bytes=bucket_bytes,
    ).module
    Place.of("pipeline", stages=1, schedule="1f1b").run(rewritten, PassContext(seed=0))
    merged = merge_constants(rewritten.graph)
    if kernels:
        fuse_kernels(rewritten)
    result = simulate(rewritten)
    single, single_ops = single_step(module, kernels)
    first = result.device_names[accelerators(module.cluster)[0]]
    launch = module.cluster.device(first).launch_overhead
    layout = training_layout(rewritten)
    parts: dict[tuple[str, bool], tuple[int, float]] = {}
    op_types: dict[str, tuple[int, float]] = {}
    for u, node in enumerate(layout.nodes):
        if node.device != first:
            continue
        seconds = float(result.finish[u] - result.start[u])
        key = (_part(node.name, int(layout.copy[u]), int(layout.phase[u])), seconds <= launch * 1.001)
        count, total = parts.get(key, (0, 0.0))
        parts[key] = (count + 1, total + seconds)
        count, total = op_types.get(node.op, (0, 0.0))
        op_types[node.op] = (count + 1, total + seconds)
    return Breakdown(
        first, result.makespan, result.busy.tolist(), parts, op_types, merged, single, single_ops, launch, replicas
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Print the breakdown (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.replica_breakdown", description=__doc__.split("\n")[0])
    parser.add_argument("graph", help="a training graph graphir-opt reads (e.g. zoo/bert_large_train.pb)")
    parser.add_argument("--cluster", default="fastt")
    parser.add_argument("--replicas", type=int, default=0, help="D (default: one per accelerator)")
    parser.add_argument("--bucket-mib", type=float, default=25.0, help="gradient bucket size (default 25)")
    parser.add_argument("--top", type=int, default=25, help="op types listed, by count")
    parser.add_argument("--kernels", action="store_true", help="mark and cost fused-kernel sets (fuse-kernels)")
    args = parser.parse_args(argv)

    try:
        module = load_module(args.graph)
        module.cluster_spec = args.cluster
        PassManager(parse_pipeline("profile")).run(module, PassContext(seed=0))
        replicas = args.replicas or len(accelerators(module.cluster))
        found = breakdown(module, replicas, int(args.bucket_mib * 2**20), args.kernels)
    except GraphIRError as exc:
        print(f"replica_breakdown: {exc}", file=sys.stderr)
        return 1
    print(f"{args.graph} on {args.cluster}: D{replicas} ring all-reduce, {args.bucket_mib:g} MiB buckets")
    print(f"merge-constants: {found.merged[0]} nodes merged into {found.merged[1]}")
    busy = [round(b * 1e3, 1) for b in found.busy]
    print(f"makespan {found.makespan * 1e3:.2f} ms; busy per device (ms): {busy}")
    total = sum(seconds for _, seconds in found.parts.values())
    print(f"{found.device}: {found.ops} ops, busy {total * 1e3:.2f} ms")
    for part in PARTS:
        for only_launch in (False, True):
            if (part, only_launch) in found.parts:
                count, seconds = found.parts[(part, only_launch)]
                what = "launch only" if only_launch else "kernels"
                print(f"  {part:9s} {what:12s} {count:6d} ops {seconds * 1e3:8.2f} ms")
    print(f"op types on {found.device} by count (ops, ms):")
    for op, (count, seconds) in sorted(found.op_types.items(), key=lambda item: (-item[1][0], item[0]))[: args.top]:
        print(f"  {op:32s} {count:6d} {seconds * 1e3:8.2f}")
    print(
        f"one device, merged: {found.single * 1e3:.1f} ms, {found.single_ops} ops;"
        f" work bound {found.bound * 1e3:.1f} ms"
    )
    print(
        f"launch floor (C - n1 l) / D + n l = {found.floor * 1e3:.1f} ms = {found.floor / found.bound:.2f}x the"
        f" bound; this step {found.makespan / found.bound:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
