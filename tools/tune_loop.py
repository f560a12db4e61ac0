"""FastT's pre-training loop: place with the cost model, run, re-profile, activate or roll back, stop when stable.

One **round** (FastT §4, "Workflow" and "Cost Models"):

1. **Cost model -> module.** The module's cluster becomes the tuning view
   (:func:`graphir.passes.profile.cost_store.tuning_cluster`: one device kind per device, so per-kind
   costs are per-(op, device) costs; each pair's link is the linear fit of its measured transfers)
   and every node's cost is read from the store
   (:func:`graphir.passes.profile.cost_table.annotate_from_store`). Whatever was never measured
   costs **0** (FastT: "it sets the cost to 0, so that the algorithm prefers to explore the
   placement"), for links too unless ``explore_links`` is off.
2. **Strategy.** An empty store has no model: the bootstrap strategy is FastT's starting strategy
   (:func:`fastt_start`, decided once before the first round): **data parallelism** when the model
   fits one device, **model parallelism** (``m-topo`` on analytical costs) otherwise, or the placer
   named by ``start``. Otherwise the placer (``place{algo=dpos}`` by default, any registered
   placer, or ``os-dpos``: FastT's strategy calculator with operation splitting, which rewrites a
   copy of the graph) computes the *candidate*, and the simulator (the one ruler) estimates its step
   time and the *active* strategy's, both under the current model.
3. **What runs.** The candidate runs (a *trial*) when it is new (not the active strategy, not one
   rolled back before) and its estimate beats the active one's by more than ``margin``; right after
   it, in the same round, the active strategy runs again (its *baseline*), so the trial is compared
   with a measurement taken under the same load (the load of a shared machine drifts by more than
   the differences the loop decides on). Otherwise the active strategy runs.
4. **Run.** :func:`graphir.backends.tf.strategy_run.run_strategy` lowers the strategy and trains
   ``warmup + trace_steps + steps`` steps on the rig, starting from the variables the previous
   round ended with (a strategy switch never restarts training); the measured step time is the
   median of the timed steps.
5. **Re-profile.** The traced steps' per-node times (on the device each node ran on) and transfer
   samples go into the store (:meth:`CostStore.record`); the store is saved.
6. **Decide.** ``bootstrap``: activate. Trial: **activate** when its measured step time is below its
   baseline's (the active strategy measured right after it), else **roll back** (FastT: "if it finds
   that the per-iteration execution time with the new strategy is even longer than the previous
   one, it rolls back"). Otherwise ``keep`` (the active strategy's measurement is refreshed); a keep
   round whose cost-table change is below ``tolerance`` with no new entries, once ``min_rounds``
   have run, ends the pre-training stage: ``stop`` ("when the cost models become stable ... we
   finish the pre-training stage").

**Verify** (``verify``, on by default). Every activation won a paired comparison with the strategy
it replaced, but a chain of them is only compared pairwise. When the loop ends (stopped or out of
rounds) with an active strategy other than the first round's, one more round runs the active
strategy and then the first one back to back: if the first is faster, the loop **rolls back** to it,
else it keeps the active one. So the strategy the loop ends on was measured against the strategy it
started from under the same load, and is never the slower of the two.

A strategy is a placement and execution order (``device`` and ``order`` of every node) of a graph;
its id is a short hash of both, so equal strategies have equal ids across rounds and runs.

**The graph the loop places** (FastT §4, §5.2). When the model fits one device, FastT's input graph
is the data-parallel graph ("the model is replicated as many times as the number of devices"):
:func:`fastt_start` rewrites the module with the project's data-parallel rewrite
(:func:`graphir.passes.transform.replicate.data_parallel`: one replica per device, each on
``1/n`` of the model's own batch, gradients averaged into one shared update) and the first strategy
is its baseline placement ``place{algo=data-parallel}`` (replica ``i`` on device ``i``, variables
balanced by bytes). Every later strategy (DPOS, OS-DPOS) places that same graph, so the variables
(shared nodes, original names) carry over every switch and the training step means the same thing
throughout: the mean gradient over the global batch. When the graph cannot be replicated (a batch
of 1, a batch not divisible by the devices, a graph TensorFlow cannot rebuild at the replica batch
and no ``replica`` model given) the loop says why and starts from one device, the data-parallel
strategy of one replica. A warm store holds the costs of the graph it was measured on: the same
rule runs before the first round of every run, so a second run replicates the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from graphir.clone import clone_module
from graphir.cluster_model import Cluster
from graphir.errors import GraphIRError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.pass_manager import PassManager
from graphir.passes.profile.cost_store import CostStore, tuning_cluster
from graphir.passes.profile.cost_table import annotate_from_store
from graphir.pipeline import parse_pipeline
from graphir.runguard import DEFAULT_RUN_TIMEOUT_S, check_run_memory, check_runnable
from graphir.simulator import simulate

__all__ = [
    "Round",
    "Start",
    "Strategy",
    "TuneOptions",
    "TuneResult",
    "apply_strategy",
    "fastt_start",
    "strategy_of",
    "tune",
]


@dataclasses.dataclass(frozen=True)
class TuneOptions:
    """Options of the loop (see the module docstring).

    Attributes:
        rounds: rounds at most.
        min_rounds: rounds before a stable cost model may stop the loop.
        placer: the ``place`` algorithm with its options, e.g. ``dpos`` or ``m-etf``, or ``os-dpos``
            (FastT's OS-DPOS pass, options after a space: ``os-dpos mem-model=paper``).
        steps / warmup / trace_steps: training steps per round (timed, untimed first, traced).
        tolerance: cost-table change (relative L1) under which the model counts as stable.
        margin: a candidate runs only when its estimate is below ``(1 - margin)`` × the active one's
            (a negative margin also tries candidates estimated slower: ``-1`` tries every new one).
        explore_links: unmeasured links cost 0 (FastT); off: the cluster's calibrated links.
        congestion: the simulator's congestion rule for the estimates (``task``: a transfer also books
            the sending and receiving worker's core, as on the rig; see :mod:`graphir.links`).
        seed: seeds the batch fed every step and the initial variables.
        delays: round -> seconds added to each timed step of that round's (first) run (fault injection;
            not to a trial's baseline nor to the first strategy's run of the verify round).
        start: the starting strategy: ``auto`` (FastT's rule, see :func:`fastt_start`),
            ``data-parallel`` (the data-parallel graph and its baseline placement, an error when the
            graph cannot be replicated) or a ``place`` algorithm run on analytical costs on the
            graph as given.
        verify: end with the verify round (see the module docstring) when the active strategy is not the first.
        round_timeout: time limit in seconds of each run on the workers (``graphir-tune --round-timeout``): a
            run still going is ended and the loop stops with one line.
    """

    rounds: int = 6
    min_rounds: int = 3
    placer: str = "dpos"
    steps: int = 5
    warmup: int = 1
    trace_steps: int = 2
    tolerance: float = 0.10
    margin: float = 0.0
    explore_links: bool = True
    congestion: str = "task"
    seed: int = 0
    delays: Mapping[int, float] = dataclasses.field(default_factory=dict)
    start: str = "auto"
    verify: bool = True
    round_timeout: float = DEFAULT_RUN_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A placement and execution order: ``{node: (device, order)}``, with its id and where it came from."""

    id: str
    source: str
    assignment: Mapping[str, tuple[str, int]]
    graph: Graph | None = dataclasses.field(default=None, compare=False, repr=False)
    """The graph it places (OS-DPOS rewrites a copy; the others place the loop's graph)."""

    def devices(self) -> dict[str, int]:
        """Nodes per device."""
        counts: dict[str, int] = {}
        for device, _ in self.assignment.values():
            counts[device] = counts.get(device, 0) + 1
        return dict(sorted(counts.items()))


def strategy_of(module: Module, source: str) -> Strategy:
    """The module's current placement and order as a :class:`Strategy`."""
    assignment = {}
    for node in module.graph.index().nodes:
        if node.device is None or node.order is None:
            raise GraphIRError(f"strategy '{source}' left node '{node.name}' without a device or order")
        assignment[node.name] = (node.device, int(node.order))
    digest = hashlib.sha1(repr(sorted(assignment.items())).encode()).hexdigest()[:8]
    return Strategy(f"s{digest}", source, assignment, module.graph)


def apply_strategy(module: Module, strategy: Strategy) -> None:
    """Give ``module`` the strategy's graph (when it has one) and set every node's ``device`` and ``order``."""
    if strategy.graph is not None and module.graph is not strategy.graph:
        module.graph = strategy.graph
    for node in module.graph.nodes:
        node.device, node.order = strategy.assignment[node.name]


@dataclasses.dataclass
class Round:
    """One round, as ``rounds.json`` lists it (see :meth:`as_json`)."""

    index: int
    strategy: str
    source: str
    ran: str
    estimated_s: float
    candidate: str
    candidate_estimated_s: float
    measured_s: float
    decision: str
    active: str
    change: float
    new_entries: int
    coverage: float
    devices: dict[str, int]
    transfers: int
    loss: float
    steps: int
    wall_s: float
    baseline: str = ""
    """The strategy also run in this round, after ``strategy``: a trial's active strategy, the verify round's first."""
    baseline_s: float = math.nan
    """Its measured step time (NaN when nothing else ran)."""

    def as_json(self) -> dict[str, Any]:
        """A JSON object (NaN and infinity become ``null``)."""

        def clean(value: Any) -> Any:
            return None if isinstance(value, float) and not math.isfinite(value) else value

        return {key: clean(value) for key, value in dataclasses.asdict(self).items()}

    def line(self) -> str:
        """The progress line of the round."""
        estimate = f"{self.estimated_s * 1e3:.2f}" if math.isfinite(self.estimated_s) else "n/a"
        used = ", ".join(f"{d}:{c}" for d, c in self.devices.items())
        change = f"{self.change:.1%}" if math.isfinite(self.change) else "n/a"
        candidate = ""
        if self.candidate != self.strategy and math.isfinite(self.candidate_estimated_s):
            candidate = f" (candidate {self.candidate} {self.candidate_estimated_s * 1e3:.2f} ms)"
        measured = f"{self.measured_s * 1e3:.2f} ms"
        if self.baseline:
            measured += f" vs {self.baseline} {self.baseline_s * 1e3:.2f} ms"
        return (
            f"round {self.index}: {self.ran} {self.strategy} ({self.source}; {used}) "
            f"estimated {estimate} ms{candidate}, measured {measured} -> {self.decision}; "
            f"cost table change {change}, +{self.new_entries} entries, coverage {self.coverage:.0%}"
        )


@dataclasses.dataclass
class TuneResult:
    """The loop's outcome: every round, the active strategy at the end, the final variables."""

    rounds: list[Round]
    active: Strategy
    variables: dict[str, Any]
    store: CostStore
    losses: list[float]
    start: Start | None = None
    first: Strategy | None = None
    """The strategy of the first round (the bootstrap strategy of a cold store)."""


Runner = Callable[[Module, Mapping[str, Any] | None, float], Any]
"""``(placed module, variables or None, delay s) -> StrategyRun``: trains one round (see :func:`rig_runner`)."""


def rig_runner(servers: Any, options: TuneOptions) -> Runner:
    """The real runner: :func:`graphir.backends.tf.strategy_run.run_strategy` on running rig ``servers``."""
    from graphir.backends.tf.strategy_run import run_strategy

    def run(module: Module, variables: Mapping[str, Any] | None, delay_s: float) -> Any:
        check_runnable(module, "graphir-tune")
        check_run_memory(module, "a graphir-tune round")
        return run_strategy(
            module,
            servers,
            variables=variables,
            steps=options.steps,
            warmup=options.warmup,
            trace_steps=options.trace_steps,
            seed=options.seed,
            delay_s=delay_s,
            timeout_s=options.round_timeout,
            what="a graphir-tune round",
        )

    return run


def _run_pipeline(module: Module, pipeline: str, seed: int) -> None:
    PassManager(parse_pipeline(pipeline)).run(module, PassContext(seed=seed))


def _estimate(module: Module, strategy: Strategy, congestion: str) -> float:
    apply_strategy(module, strategy)
    result = simulate(module, congestion=congestion, order="enforced")
    return math.inf if result.oom_devices else float(result.makespan)


@dataclasses.dataclass(frozen=True)
class Start:
    """FastT's starting point, decided before the first round (see :func:`fastt_start`).

    Attributes:
        strategy: how the bootstrap strategy is placed: ``data-parallel``, ``single``, ``m-topo``
            or the placer named by ``start``.
        replicas: replicas of the graph the loop places (1: the graph as given).
        fits: whether the model fits one device (analytical memory, the simulator's accounting).
        reason: one line saying why.
    """

    strategy: str
    replicas: int
    fits: bool
    reason: str

    def as_json(self) -> dict[str, Any]:
        """A JSON object."""
        return dataclasses.asdict(self)


def _fits_one_device(module: Module, seed: int) -> bool:
    _run_pipeline(module, "profile,place{algo=single}", seed)
    fits = not simulate(module, order="enforced").oom_devices
    for node in module.graph.nodes:
        node.device = node.order = None
    return fits


def fastt_start(module: Module, seed: int, start: str = "auto", replica: Module | None = None) -> Start:
    """FastT's starting strategy (§4): data parallelism when the model fits one device, else model parallelism.

    ``start="auto"``: when the model fits one device (its single-device placement is not out of
    memory under analytical costs) and the cluster has ``n >= 2`` devices, the module is **rewritten
    in place** into FastT's data-parallel input graph (:func:`graphir.passes.transform.replicate.data_parallel`,
    ``n`` replicas of ``batch / n`` samples, ``replica``: the model at that batch, default: TensorFlow
    rebuilds it) and the first strategy is ``place{algo=data-parallel}``. A graph that cannot be
    replicated, or is not a training step (no gradients to average), starts from one device
    (``single``), with the reason. A model that does not fit one
    device starts from model parallelism (``m-topo``, devices filled in topological order).
    ``start="data-parallel"`` insists on the data-parallel graph (an error when it cannot be
    built); any other ``start`` names the placer of the first strategy on the graph as given.

    Raises:
        GraphIRError: ``start="data-parallel"`` on a graph that cannot be replicated.
    """
    from graphir.passes.training import training_structure
    from graphir.passes.transform.replicate import data_parallel

    devices = len(module.cluster.devices)
    if start not in ("auto", "data-parallel"):
        return Start(start, 1, True, f"--start {start}")
    fits = _fits_one_device(module, seed)
    if not fits and start == "auto":
        return Start("m-topo", 1, False, "the model does not fit one device: model parallelism (m-topo)")
    if devices < 2:
        return Start("single", 1, fits, "one device: nothing to replicate")
    if start == "auto" and training_structure(module) is None:
        # FastT replicates a training step (its gradients averaged into one update); graphir re-batches
        # any graph in the IR, but an inference graph has nothing to average: it starts on one device.
        return Start("single", 1, fits, "fits one device, but not a training graph: one device")
    try:
        result = data_parallel(module, devices, replica=replica)
    except GraphIRError as exc:
        if start == "data-parallel":
            raise GraphIRError(f"--start data-parallel: {exc.message}") from None
        return Start("single", 1, fits, f"fits one device, but no data-parallel graph ({exc.message}): one device")
    module.graph = result.module.graph
    module.metadata = result.module.metadata
    return Start(
        "data-parallel",
        devices,
        fits,
        f"fits one device: data parallelism, {devices} replicas of batch {result.replica_batch} "
        f"(global batch {result.global_batch})",
    )


def bootstrap_strategy(module: Module, seed: int, start: str = "auto") -> Strategy:
    """The first strategy of a cold store, on analytical costs: ``start`` is a :attr:`Start.strategy`.

    ``auto`` (a module that did not go through :func:`fastt_start`): one device when the model fits,
    else ``m-topo``.
    """
    if start == "auto":
        start = "single" if _fits_one_device(module, seed) else "m-topo"
    _run_pipeline(module, f"profile,place{{algo={start}}}", seed)
    return strategy_of(module, start)


def is_os_dpos(placer: str) -> bool:
    """Whether the loop's ``placer`` names FastT's OS-DPOS pass (``os-dpos [key=value ...]``)."""
    return placer.split(" ", 1)[0] == "os-dpos"


def placer_pipeline(placer: str, congestion: str) -> str:
    """The pipeline placing with ``placer``: ``place{algo=...}`` or ``os-dpos{...}`` (with ``congestion``)."""
    if not is_os_dpos(placer):
        return f"place{{algo={placer}}}"
    options = placer.split(" ", 1)[1].strip() if " " in placer else ""
    if "congestion=" not in options:
        options = f"congestion={congestion} {options}".strip()
    return f"os-dpos{{{options}}}"


def _candidate(module: Module, options: TuneOptions) -> Strategy:
    """The placer's strategy for the module's graph and costs; OS-DPOS rewrites a copy (the loop's graph stays)."""
    pipeline = placer_pipeline(options.placer, options.congestion)
    if not is_os_dpos(options.placer):
        _run_pipeline(module, pipeline, options.seed)
        return strategy_of(module, options.placer)
    copy = clone_module(module)
    _run_pipeline(copy, pipeline, options.seed)
    return strategy_of(copy, "os-dpos")


def _device_names(cluster: Cluster) -> dict[str, str]:
    from graphir.backends.tf.rig import normalise_device

    return {normalise_device(d.tf_device): d.name for d in cluster.devices}


def record_run(store: CostStore, cluster: Cluster, run: Any) -> Any:
    """Add a :class:`~graphir.backends.tf.rig.RigRun`'s per-node times and transfers to ``store``."""
    names = _device_names(cluster)
    devices = {node: names[d] for node, d in run.node_devices.items() if d in names}
    transfers = [(names[s], names[d], b, t) for _, s, d, b, t in run.transfers if s in names and d in names]
    return store.record(run.node_seconds, devices, transfers)


def tune(
    module: Module,
    store: CostStore,
    runner: Runner,
    options: TuneOptions,
    log: Callable[[str], None] = lambda _: None,
    save: Callable[[CostStore], None] = lambda _: None,
    replica: Module | None = None,
) -> TuneResult:
    """Run the loop on ``module`` (its cluster the real one) with ``runner`` (see the module docstring).

    ``replica``: the model at the per-replica batch for the data-parallel start (see :func:`fastt_start`).
    On return the module holds the graph the loop placed (the data-parallel graph when it started
    from data parallelism; the active strategy's graph under OS-DPOS), the active strategy
    (``device``, ``order``), the final cost model's costs, and the tuning view of its cluster, so
    ``simulate`` can judge it as the loop did.
    """
    base = module.cluster
    start = fastt_start(module, options.seed, options.start, replica)
    log(f"tune: start: {start.reason}")
    graph = module.graph
    rounds: list[Round] = []
    losses: list[float] = []
    active: Strategy | None = None
    rejected: set[str] = set()
    variables: dict[str, Any] | None = None
    first: Strategy | None = None

    def run(strategy: Strategy, delay_s: float) -> tuple[Any, Any]:
        """Train ``strategy`` for one run from the current variables; record its measurements."""
        nonlocal variables
        apply_strategy(module, strategy)
        module.set_cluster(base)
        outcome = runner(module, variables, delay_s)
        variables = outcome.variables
        losses.extend(outcome.losses)
        change = record_run(store, base, outcome.run)
        save(store)
        return outcome, change

    def model_view() -> None:
        """The module as the current cost model sees it: the tuning view of the cluster, the store's costs."""
        module.set_cluster(tuning_cluster(base, store, options.explore_links))
        module.graph = graph

    for index in range(options.rounds):
        begin = time.perf_counter()
        cold = store.updates == 0
        if cold:
            module.set_cluster(base)
            module.graph = graph
            candidate = bootstrap_strategy(module, options.seed, start.strategy)
        else:
            model_view()
            annotate_from_store(module, store, explore=True)
            candidate = _candidate(module, options)
        estimate = _estimate(module, candidate, options.congestion)
        active_estimate = None
        if active is not None:
            apply_strategy(module, active)
            if not cold:
                annotate_from_store(module, store, explore=True)  # a rewritten graph's own measurements
            active_estimate = _estimate(module, active, options.congestion)
        if active is None:
            ran, chosen = "bootstrap", candidate
            first = candidate
        elif (
            candidate.id != active.id
            and candidate.id not in rejected
            and active_estimate is not None
            and estimate < active_estimate * (1.0 - options.margin)
        ):
            ran, chosen = "trial", candidate
        else:
            ran, chosen = "active", active
        candidate_estimate = estimate
        if chosen is not candidate:
            estimate = active_estimate if active_estimate is not None else math.nan
        coverage = store.coverage(chosen.assignment, base.device_names)
        outcome, change = run(chosen, float(options.delays.get(index, 0.0)))
        steps = outcome.steps_run
        measured = float(outcome.run.median_s)
        baseline, baseline_s = "", math.nan
        if ran == "trial":
            assert active is not None
            again, _ = run(active, 0.0)  # the baseline: the active strategy under the trial's load
            steps += again.steps_run
            baseline, baseline_s = active.id, float(again.run.median_s)
        if ran == "bootstrap":
            decision, active = "activate", chosen
        elif ran == "trial" and measured < baseline_s:
            decision, active = "activate", chosen
        elif ran == "trial":
            decision = "rollback"
            rejected.add(chosen.id)
        else:
            decision = "keep"
            stable = change.relative < options.tolerance and change.new == 0
            if stable and index + 1 >= options.min_rounds:
                decision = "stop"
        assert active is not None
        finite_losses = [x for x in losses if math.isfinite(x)]
        row = Round(
            index,
            chosen.id,
            chosen.source,
            ran,
            float(estimate),
            candidate.id,
            candidate_estimate,
            measured,
            decision,
            active.id,
            change.relative,
            change.new,
            coverage,
            chosen.devices(),
            len(outcome.run.transfers),
            finite_losses[-1] if finite_losses else math.nan,
            steps,
            time.perf_counter() - begin,
            baseline,
            baseline_s,
        )
        rounds.append(row)
        log(row.line())
        if decision == "stop":
            break
    assert active is not None and first is not None, "at least one round runs"
    if options.verify and active.id != first.id:
        begin = time.perf_counter()
        index = len(rounds)
        model_view()
        apply_strategy(module, active)
        annotate_from_store(module, store, explore=True)
        estimate = _estimate(module, active, options.congestion)
        coverage = store.coverage(active.assignment, base.device_names)
        final, change = run(active, float(options.delays.get(index, 0.0)))
        start_run, _ = run(first, 0.0)
        measured, baseline_s = float(final.run.median_s), float(start_run.run.median_s)
        decision = "rollback" if baseline_s < measured else "keep"
        row = Round(
            index,
            active.id,
            active.source,
            "verify",
            float(estimate),
            active.id,
            float(estimate),
            measured,
            decision,
            first.id if decision == "rollback" else active.id,
            change.relative,
            change.new,
            coverage,
            active.devices(),
            len(final.run.transfers),
            next((x for x in reversed(losses) if math.isfinite(x)), math.nan),
            final.steps_run + start_run.steps_run,
            time.perf_counter() - begin,
            first.id,
            baseline_s,
        )
        rounds.append(row)
        log(row.line())
        if decision == "rollback":
            active = first
    # Leave the module as the final cost model sees it: the tuning view, its costs, the active strategy.
    module.set_cluster(tuning_cluster(base, store, options.explore_links))
    apply_strategy(module, active)
    annotate_from_store(module, store, explore=True)
    return TuneResult(rounds, active, variables or {}, store, losses, start, first)
