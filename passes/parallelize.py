"""``parallelize``: search data parallelism x pipeline stages x micro-batches x schedule, and op placement.

A training step that does not fit one device, or whose critical path is most of its time, is run in
practice by pipeline parallelism (GPipe; 1F1B / PipeDream-Flush) combined with data parallelism, as
Megatron-LM, Alpa and Mist plan it. This pass plans it on graphir's own pieces, judged by the one
simulator:

1. **Candidates.** For ``N`` accelerators and the module's batch ``G``: every data-parallel degree
   ``D`` dividing ``N`` (and ``G``), ``S = N / D`` stages, every micro-batch count ``M`` (powers of
   two up to ``max-microbatches``, dividing ``G / D``) and, with ``S > 1``, each schedule of
   ``schedules``. ``D = N, S = 1`` is data parallelism (with ``M > 1``: gradient accumulation), and
   ``D = 1, S = N, M = 1`` the stage placement. With one stage, two candidates: the replicas share
   one copy of each variable (``sync=ps``, TF-slim's data parallelism, the ``data-parallel``
   baseline), or they mirror the variables and meet by a ring all-reduce (``data-parallel{sync=allreduce}``,
   :func:`graphir.passes.transform.replicate.data_parallel` step 6: what DDP, Horovod and
   Megatron-LM's data dimension run), and without micro-batches the step runs under TensorFlow's
   executor order (each replica's share of the ring starts as its chunks arrive); with stages, the
   replicas of a stage share one copy of each variable (``sync=ps``), whose update the pipeline
   order keys after the passes that make its gradients.
2. **Screening** (no rewrite): the layer profile of the module
   (:func:`graphir.passes.place.pipeline.layer_profile`: per layer, forward and backward compute,
   update, persistent and saved bytes, boundary bytes) is scaled to the micro-batch ``G / (D M)``
   (compute and activations in proportion, plus the per-op overhead of each copy), the stages are
   cut (:func:`graphir.passes.place.pipeline.partition_layers`, memory a hard limit under the
   schedule's live micro-batches) and the step is estimated by the schedule's event model
   (:func:`graphir.passes.place.pipeline_schedule.pipeline_timeline`) plus, with ``D > 1``, what
   the replicas' exchange leaves exposed: with the ring all-reduce, what of its
   ``2 (D - 1) / D`` of the gradients' bytes per link the backward pass does not hide, plus the
   first layer's share (made last); with shared variables, each stage's weights (``(D - 1) / D`` of its variables'
   bytes, a ring all-reduce's share) go out behind one micro-batch's forward and its gradients come
   back behind one micro-batch's backward, layer by layer. A candidate whose split does not fit
   is skipped with its reason.
3. **Judging.** Plain op placement first: the card's default ``fuse,place`` (``auto``) on a copy,
   so ``parallelize`` is never slower than it. Then ``finalists`` candidates, within the budget:
   the best estimate of each shape ``D x S`` (the event model misjudges shapes against each other
   more than candidates of one shape), then the next best estimates. They are rewritten for real
   (``microbatch``/``data-parallel``'s one rewrite,
   :func:`graphir.passes.transform.replicate.data_parallel`), placed by ``place{algo=pipeline}``
   and simulated, each after its equal constants are merged per device
   (:mod:`graphir.passes.transform.merge_constants`: the copies of a reshape's shape or an
   optimizer's hyper-parameter that every layer and micro-batch carries). The simulator's verdict
   decides: the fastest candidate that fits memory, else the least overflow. When a ring all-reduce
   wins, it is judged again with each other gradient bucket size of ``buckets``
   (:data:`BUCKET_SIZES`; labelled ``.b<MiB>``). The module becomes the winner (rewritten graph,
   placement, recorded order).

**Budget** (``budget=``, modelled seconds as ``auto``'s, never the clock; 0: the default, 60 s):
a finalist is charged for its rewritten graph's size (rewrite, placement and one simulation:
:data:`SECONDS_PER_NODE` per node), ``auto`` its own budget; a finalist that would exceed the
budget is skipped and reported. Deterministic under ``--seed``: the search has no randomness and
``auto`` is seeded by it.

A graph without a backward pass is placed by ``auto`` alone, and the pass says so. Statistics list
every candidate: ``cand.D<d>xS<s>xM<m>.<schedule>`` = estimate, simulated makespan, peak memory and
OOM, or why it was skipped; ``chosen`` names the winner.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from graphir.clone import clone_module
from graphir.errors import PassError
from graphir.gcpause import gc_paused
from graphir.ir import Module
from graphir.links import LinkModel
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.fuse.kernels import fuse_kernels
from graphir.passes.place import Place
from graphir.passes.place.pipeline import (
    LayerProfile,
    TrainingLayout,
    accelerators,
    boundary_times,
    layer_profile,
    partition_layers,
    ring_order,
    stage_timeline,
    training_layout,
)
from graphir.passes.place.pipeline_schedule import SCHEDULES, activation_copies
from graphir.passes.transform.merge_constants import merge_constants
from graphir.simulator import SimResult, simulate

SECONDS_PER_NODE = 90e-6
"""Modelled cost of a finalist per node of its rewritten graph: the rewrite (re-batching included),
``place{algo=pipeline}`` and one simulation. Profiled on a 99k-node GPT training step (2 and 4
copies) on the 2-core machine: about 90 us per node; a budget of 60 s then judges one or two
rewritten finalists of a 100k-node graph. Since the rewrite and the placement were made linear
(benchmarks/results/parallelize-scale.md) a finalist costs 40 to 70 us of CPU per node; the model
is kept at 90 us so that the same finalists are judged as before (a smaller figure lets the
4-replica copy of that graph in, 336k nodes, for about 20 s more)."""

DEFAULT_BUDGET = 60.0
"""The default budget in modelled seconds."""

ONE_STAGE_SYNCS = ("allreduce", "ps")
"""How one-stage replicas meet, both tried: mirrored variables and a ring, or TF-slim's one shared copy."""

BUCKET_SIZES = (25.0, 100.0)
"""Gradient bucket sizes of the ring all-reduce tried, in MiB (``buckets=``): PyTorch DDP's default
``bucket_cap_mb`` and four times it. Bigger buckets mean fewer rings (fewer ops per replica), smaller
ones an earlier start and a shorter exposed tail; which wins depends on the graph, so the winner's
ring is judged with each (what Horovod's autotuner does with its fusion threshold). Measured on
``zoo:gpt_train`` over ``fastt``'s 8 GPUs (D8 ring): 6 MiB 122.2 ms, 25 MiB 120.5 ms, 100 MiB
119.4 ms; ``zoo:bert_large_train``: 25 MiB 177.8 ms, 100 MiB 176.4 ms, 400 MiB 179.0 ms."""

KERNEL_MODES = ("none", "xla")
"""``kernels=``: no fused kernels, or the fused-kernel sets of ``fuse-kernels`` on every judged candidate."""

AUTO_SHARE = 0.25
"""Share of the budget kept for ``place{algo=auto}`` (plain op placement, run with its own default budget)."""


@dataclasses.dataclass
class Candidate:
    """One point of the search: ``D`` replicas x ``S`` stages x ``M`` micro-batches under a schedule."""

    replicas: int
    stages: int
    microbatches: int
    schedule: str
    sync_mode: str = ""
    bucket_mib: float = BUCKET_SIZES[0]
    estimate: float = np.inf
    note: str = ""
    makespan: float = np.inf
    overflow: float = np.inf
    peak: float = 0.0
    module: Module | None = None

    @property
    def label(self) -> str:
        """``D2xS2xM8.1f1b`` (``auto`` for plain op placement)."""
        if self.stages == 0:
            return "auto"
        schedule = self.schedule if self.stages > 1 else self.sync if self.replicas > 1 else "accumulate"
        bucket = f".b{self.bucket_mib:g}" if schedule == "allreduce" and self.bucket_mib != BUCKET_SIZES[0] else ""
        return f"D{self.replicas}xS{self.stages}xM{self.microbatches}.{schedule}{bucket}"

    @property
    def sync(self) -> str:
        """How the replicas' gradients meet (module docstring, step 1).

        With one stage, ``sync_mode``: ``allreduce`` (the default) or ``ps`` (TF-slim's shared
        variables, the ``data-parallel`` baseline); with stages, ``ps``.
        """
        if self.stages == 1 and self.replicas > 1:
            return self.sync_mode or "allreduce"
        return "ps"

    @property
    def copies(self) -> int:
        """Copies of forward and backward in the rewritten graph."""
        return self.replicas * self.microbatches

    def verdict(self) -> tuple[float, float, int]:
        """Sort key of judged candidates: least overflow, then makespan, then fewest copies."""
        return (self.overflow, self.makespan, self.copies)


def _powers_of_two(limit: int) -> list[int]:
    out, m = [], 1
    while m <= limit:
        out.append(m)
        m *= 2
    return out


def _drop(candidate: Candidate) -> None:
    """Forget ``candidate``'s rewritten graph (a copy only it holds), freeing it at once."""
    if candidate.module is not None:
        candidate.module.graph.release()
        candidate.module = None


def _judge(candidate: Candidate, result: SimResult) -> None:
    candidate.makespan = result.makespan
    candidate.overflow = float(np.maximum(result.peak_memory - result.memory_limit, 0).sum())
    candidate.peak = float(result.peak_memory.max()) if len(result.peak_memory) else 0.0


@register_pass
@dataclasses.dataclass(frozen=True)
class Parallelize(Pass):
    """Choose data parallelism x pipeline stages x micro-batches x schedule, or op placement, by the simulator.

    Requires ``cost``; provides ``device`` and ``order`` (and rewrites the graph into the winner's
    micro-batched, replicated form). See the module docstring for the search.

    Options:
        budget: work budget in modelled seconds (0: 60).
        schedules: pipeline schedules to try (``1f1b``, ``gpipe``).
        max-microbatches: the largest micro-batch count tried.
        finalists: candidates rewritten and simulated after screening (besides ``auto``).
        buckets: gradient bucket sizes of the ring all-reduce, in MiB: the finalists use the first;
            when a ring wins, it is judged again with each other size (module docstring).
        kernels: ``none`` (the default) or ``xla``: every judged candidate's placed graph gets its
            fused-kernel sets (``fuse-kernels``, :mod:`graphir.passes.fuse.kernels`) before it is
            simulated, so the search judges fused steps and the winner keeps its sets (the TF
            lowering compiles each as one XLA cluster).
    """

    name: ClassVar[str] = "parallelize"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("device", "order")
    budget: float = 0.0
    schedules: tuple[str, ...] = ("1f1b", "gpipe")
    max_microbatches: int = 32
    finalists: int = 4
    buckets: tuple[float, ...] = BUCKET_SIZES
    kernels: str = "none"

    def __post_init__(self) -> None:
        """Reject bad options when the pipeline is parsed."""
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0 (0: the default), got {self.budget}")
        unknown = [s for s in self.schedules if s not in SCHEDULES]
        if unknown or not self.schedules:
            raise ValueError(f"schedules must be among {', '.join(SCHEDULES)}, got '{','.join(self.schedules)}'")
        if self.max_microbatches < 1:
            raise ValueError(f"max-microbatches must be >= 1, got {self.max_microbatches}")
        if self.finalists < 1:
            raise ValueError(f"finalists must be >= 1, got {self.finalists}")
        if self.kernels not in KERNEL_MODES:
            raise ValueError(f"kernels must be one of {', '.join(KERNEL_MODES)}, got '{self.kernels}'")
        if not self.buckets or any(b < 0 for b in self.buckets):
            raise ValueError(f"buckets must be sizes in MiB >= 0, got '{','.join(map(str, self.buckets))}'")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Screen, judge and apply the best candidate (module docstring)."""
        budget = self.budget or DEFAULT_BUDGET
        try:
            layout = training_layout(module)
        except PassError as exc:
            ctx.log(f"parallelize: {exc}; placing with auto")
            print(
                f"parallelize: '{module.name}' is not a training graph: placed by place{{algo=auto}}",
                file=ctx.log_stream,
            )
            result = Place().run(module, ctx)
            return PassResult(True, {"chosen": "auto", "fallback": "not a training graph", **result.stats})
        # The trial graphs are millions of objects built and mostly dropped: the cyclic collector is
        # paused while they are made (its passes over them cost a fifth of the search), and each
        # dropped one is released (Graph.release: freed at once, no collection needed).
        with gc_paused(freeze=False):
            return self._search(module, layout, budget, ctx)

    def _search(self, module: Module, layout: TrainingLayout, budget: float, ctx: PassContext) -> PassResult:
        """Screen the candidates, judge ``auto`` and the finalists, move the winner into ``module``."""
        stats: dict[str, Stat] = {}
        screened = self._screen(module, layout, stats, ctx)
        judged: list[Candidate] = []
        replicas: dict[int, Module] = {}
        best = Candidate(1, 0, 1, "")  # plain op placement first: the bar the rewrites must beat
        self._try_auto(module, best, ctx)
        judged.append(best)
        spent = 0.0
        copy_nodes = int((layout.copy >= 0).sum())
        shared_nodes = len(layout.nodes) - copy_nodes

        def judge(candidate: Candidate) -> None:
            nonlocal spent, best
            size = candidate.copies * copy_nodes + shared_nodes
            cost = size * SECONDS_PER_NODE
            if spent + cost > budget * (1 - AUTO_SHARE):
                candidate.note = f"skipped: budget ({size} nodes)"
                return
            spent += cost
            self._try(module, candidate, replicas, ctx)
            judged.append(candidate)
            if candidate.module is not None and candidate.verdict() < best.verdict():
                _drop(best)  # keep one rewritten graph in memory
                best = candidate
            else:
                _drop(candidate)

        for candidate in self._finalists(screened):
            judge(candidate)
        winner = best
        if winner.stages == 1 and winner.replicas > 1 and winner.sync == "allreduce":
            for bucket in self.buckets:  # the winning ring with the other bucket sizes
                if bucket != winner.bucket_mib:
                    variant = dataclasses.replace(
                        winner, bucket_mib=bucket, note="", makespan=np.inf, overflow=np.inf, peak=0.0, module=None
                    )
                    screened.append(variant)
                    judge(variant)
        for replica in replicas.values():
            if replica is not module:  # module_at_batch returns the module itself at its own batch
                replica.graph.release()
        for candidate in [judged[0], *screened]:
            stats[f"cand.{candidate.label}"] = self._describe(candidate)
        assert best.module is not None
        module.graph = best.module.graph
        module.metadata = best.module.metadata
        stats.update(
            {
                "chosen": best.label,
                "makespan-ms": round(best.makespan * 1e3, 3),
                "fits": "yes" if best.overflow == 0 else "no",
                "candidates": len(screened) + 1,
                "simulated": len(judged),
                "nodes": len(module.graph),
            }
        )
        ctx.log(f"parallelize: chose {best.label} ({best.makespan * 1e3:.3f} ms simulated)")
        return PassResult(True, stats)

    # ----------------------------------------------------------------------------- screening

    def _screen(
        self, module: Module, layout: TrainingLayout, stats: dict[str, Stat], ctx: PassContext
    ) -> list[Candidate]:
        """Every candidate with its estimate (or skip note), best estimates first."""
        from graphir.passes.transform.batching import module_batch

        cluster = module.cluster
        targets = accelerators(cluster)
        kind = cluster.devices[targets[0]].kind
        profile = layer_profile(module, layout, kind)
        overhead = cluster.kind_device(kind).op_overhead
        links = LinkModel.from_cluster(cluster)
        topology = LinkModel.from_cluster(cluster, "topology")
        rings: dict[int, list[int]] = {}

        def ring_of(replicas: int) -> list[int]:  # the ring of the first ``replicas`` accelerators, searched once
            if replicas not in rings:
                rings[replicas] = ring_order(targets[:replicas], topology)
            return rings[replicas]

        try:
            batch = module_batch(module)
        except PassError:
            batch = 1  # no batch to divide: stage placements only
        count = len(targets)
        stats["batch"] = batch
        stats["layers"] = profile.num_layers
        out: list[Candidate] = []
        for replicas in [d for d in range(1, count + 1) if count % d == 0 and batch % d == 0]:
            stages = count // replicas
            per_replica = batch // replicas
            for microbatches in [m for m in _powers_of_two(self.max_microbatches) if per_replica % m == 0]:
                schedules = self.schedules if stages > 1 and microbatches > 1 else self.schedules[:1]
                syncs = ONE_STAGE_SYNCS if stages == 1 and replicas > 1 else ("",)
                for schedule in schedules:
                    for sync in syncs:
                        candidate = Candidate(replicas, stages, microbatches, schedule, sync, self.buckets[0])
                        self._estimate(candidate, profile, targets, links, topology, ring_of, overhead, module)
                        out.append(candidate)
        out.sort(key=lambda c: (c.estimate, c.copies, c.label))
        ctx.log(f"parallelize: {len(out)} candidates screened, {sum(np.isfinite(c.estimate) for c in out)} fit")
        return out

    def _estimate(
        self,
        candidate: Candidate,
        profile: LayerProfile,
        targets: list[int],
        links: LinkModel,
        topology: LinkModel,
        ring_of: Callable[[int], list[int]],
        overhead: float,
        module: Module,
    ) -> None:
        """The event model's step time of ``candidate`` (``inf`` and a note when it does not fit)."""
        stages, replicas, microbatches = candidate.stages, candidate.replicas, candidate.microbatches
        scale = 1.0 / (replicas * microbatches)
        schedule = candidate.schedule
        copies = [activation_copies(schedule, s, stages, microbatches) for s in range(stages)]
        capacity = [float(module.cluster.devices[targets[s]].memory) for s in range(stages)]
        pair = targets[:2] if len(targets) > 1 else targets
        boundary = boundary_times(profile, links, pair, scale)
        stage_of_layer = partition_layers(
            profile, stages, copies=copies, capacity=capacity, boundary_time=boundary, scale=scale, op_overhead=overhead
        )
        if stage_of_layer is None:
            candidate.note = "skipped: no split of the layers fits memory"
            return
        stage = np.asarray(stage_of_layer)
        used = int(stage.max()) + 1
        # every cut is priced on one pair of neighbouring accelerators (the screen places no stage)
        forward, backward, _, timeline = stage_timeline(
            profile,
            stage_of_layer,
            schedule,
            microbatches,
            links,
            lambda _: (pair[0], pair[-1]),
            scale=scale,
            op_overhead=overhead,
        )
        exposed = 0.0
        if candidate.sync == "allreduce":
            # A ring all-reduce moves 2 (D - 1) / D of the gradients' bytes over each ring link as the
            # backward pass makes them; what the backward pass cannot hide, and the last layer made
            # (the first layer's gradients: the embedding), come after it.
            weights = profile.persistent / 3.0  # Adam: var, m, v
            order = ring_of(replicas)
            share = 2.0 * (replicas - 1) / replicas

            def ring(nbytes: float) -> float:  # the slowest hop of the ring carries its share
                return max(
                    topology.transfer_time(nbytes * share / replicas, a, b)
                    for a, b in zip(order, order[1:] + order[:1], strict=True)
                )

            total = ring(float(weights.sum())) * replicas
            exposed = max(total - float(backward.sum()), 0.0) + ring(float(weights[0])) * replicas
        elif replicas > 1:
            weights = np.bincount(stage, weights=profile.persistent, minlength=used) / 3.0  # Adam: var, m, v
            a, b = targets[0], targets[stages] if stages < len(targets) else targets[-1]
            for s, nbytes in enumerate(weights.tolist()):
                share = links.transfer_time(nbytes * (replicas - 1) / replicas, a, b)
                # the weights' broadcast hides behind the first micro-batch's forward, the gradients'
                # exchange behind the last one's backward (layer by layer)
                exposed = max(exposed, max(share - forward[s], 0.0) + max(share - backward[s], 0.0))
        candidate.estimate = timeline.makespan + exposed

    def _finalists(self, screened: list[Candidate]) -> list[Candidate]:
        """The candidates to judge: the best estimate of each shape ``D x S`` (and sync) first, then the next best.

        The event model ranks candidates of one shape well (the same stages, more or fewer
        micro-batches) but misjudges shapes against each other (it sees no contention on the
        replicas' exchange): one finalist per shape keeps a misjudged shape in the running.
        """
        fitting = [c for c in screened if np.isfinite(c.estimate)]
        chosen: list[Candidate] = []
        shapes: set[tuple[int, int, str]] = set()
        for candidate in fitting:
            shape = (candidate.replicas, candidate.stages, candidate.sync)
            if shape not in shapes:
                shapes.add(shape)
                chosen.append(candidate)
        chosen = sorted(chosen[: self.finalists], key=fitting.index)
        rest = [c for c in fitting if c not in chosen]
        return chosen + rest[: max(self.finalists - len(chosen), 0)]

    # ----------------------------------------------------------------------------- judging

    def _try(self, module: Module, candidate: Candidate, replicas: dict[int, Module], ctx: PassContext) -> None:
        """Rewrite, place and simulate ``candidate`` (the rewrite makes a new module; else a copy of ``module``).

        ``replicas`` caches the model re-batched per micro-batch size (candidates share them).
        """
        from graphir.passes.transform.batching import module_batch
        from graphir.passes.transform.replicate import data_parallel, module_at_batch

        try:
            if candidate.copies > 1:
                size = module_batch(module) // candidate.copies
                if size not in replicas:
                    replicas[size] = module_at_batch(module, size)
                trial = data_parallel(
                    module,
                    candidate.replicas,
                    microbatches=candidate.microbatches,
                    replica=replicas[size],
                    sync=candidate.sync,
                    bucket_bytes=round(candidate.bucket_mib * 2**20),
                ).module
            else:
                trial = clone_module(module)
            Place.of("pipeline", stages=candidate.stages, schedule=candidate.schedule).run(trial, ctx)
            merge_constants(trial.graph)
            self._fuse_kernels(trial)
            _judge(candidate, simulate(trial))
        except PassError as exc:
            candidate.note = f"failed: {exc}"
            return
        candidate.module = trial

    def _try_auto(self, module: Module, candidate: Candidate, ctx: PassContext) -> None:
        """Plain op placement, the card's default ``fuse,place`` (``auto``), on a copy of ``module``.

        A module that is already fused is placed as it is.
        """
        from graphir.passes.fuse import Fuse

        trial = clone_module(module)
        if all(node.group is None for node in trial.graph.nodes):
            Fuse().run(trial, ctx)
        Place().run(trial, ctx)
        merge_constants(trial.graph)
        self._fuse_kernels(trial)
        _judge(candidate, simulate(trial))
        candidate.module = trial

    def _fuse_kernels(self, trial: Module) -> None:
        """With ``kernels=xla``, mark and cost the placed trial's fused-kernel sets (``fuse-kernels``)."""
        if self.kernels == "xla":
            fuse_kernels(trial)

    @staticmethod
    def _describe(candidate: Candidate) -> str:
        parts = []
        if np.isfinite(candidate.estimate):
            parts.append(f"est {candidate.estimate * 1e3:.3f} ms")
        if np.isfinite(candidate.makespan):
            oom = " OOM" if candidate.overflow > 0 else ""
            parts.append(f"sim {candidate.makespan * 1e3:.3f} ms, peak {candidate.peak / 2**30:.2f} GiB{oom}")
        if candidate.note:
            parts.append(candidate.note)
        return "; ".join(parts) or "not judged"
