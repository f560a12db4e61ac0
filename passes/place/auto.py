"""``place{algo=auto}``: a portfolio of placers judged by the simulator, then a simulator-guided refinement.

A user runs ``place`` to get a better placement than by hand; no single published placer wins on
every graph and cluster (benchmarks/results/placement-notes.md), so ``auto`` runs several and
keeps the best *by the simulator's own verdict* (``ctx.simulate``: the fine graph, expanded as
``place`` writes it, under the ``congestion`` rule of the ``simulate`` that will judge it), then
improves it.

1. **Portfolio** (:data:`PORTFOLIO`), each answer simulated: ``single`` (every node on the device
   with the least total compute time, then the most memory; simulated in the rank_u list-schedule
   order and in topological order, the better kept), ``metis``, ``heft``, ``m-topo``, ``expert``,
   ``m-etf``, ``dpos`` (FastT), ``order-place`` and ``adjusting`` (Celeritas), ``m-sct`` (its LP
   is the slowest member). A member with a ``mem-model`` option gets ``auto``'s. A member whose modelled cost
   (:class:`WorkModel`) would take the portfolio past 60 % of the budget is skipped and reported
   as ``skipped`` (a later, cheaper member may still run); the first member always runs. A member that
   fails (METIS without ``pymetis``) is reported as ``failed``. Members plan once, without the list
   schedulers' memory guard (:mod:`graphir.passes.place.memory_guard`): auto simulates every answer
   itself, and the refinement repairs memory. Then the guard's re-plans, where they can pay
   (:meth:`Auto._replan`): a member with a ``mem-model`` whose answer overflows while being faster
   than every fitting candidate plans again on capacities lowered by the overflow the simulator
   measured, exactly as ``place{algo=<member>}`` would (candidates ``<member>+guard``), least
   overflow first, while the portfolio's 60 % and a further 20 % of the budget last (the guard on
   every member starved the refinement on the largest graphs; this way the refinement keeps at
   least 20 %, and a re-plan runs only where a faster plan overflowed).
2. **Choice**: the candidate that fits memory (no OOM device) with the smallest simulated makespan;
   when none fits, the least overflow (bytes above capacity, summed over devices), then makespan.
3. **Refinement**, in two stages; it gets the rest of the budget as a count of simulations.
   First (:mod:`graphir.passes.place.refine`), at most half of them (:data:`FINE_SHARE`): a local
   search moving blocks of coarse nodes between devices, most critical first, every trial simulated.
   It starts from the best candidate; when it reaches a local optimum with simulations left, it
   starts again from the next fitting candidate with a different placement (:func:`restarts`), and
   the best end wins. Second (:mod:`graphir.passes.place.refine_fine`), from that end when it fits:
   on the fine graph (coarse nodes split), work off the critical path (its float, by the critical
   path method, larger than its transfer) is moved off the busiest device in chunks, every trial
   simulated; the answer is then a placement of the fine graph (``Placement.problem``). When the
   second stage finds nothing to move, the first goes on with the simulations left.

**Budget.** ``budget=`` is work, in *modelled* seconds (:class:`WorkModel`: a simulation costs
1 us per fine node and edge, each member its own rate from the graph's sizes), never the clock,
so the same members run and the same trials are simulated on every machine and load:
deterministic under ``--seed`` (METIS is seeded by it; nothing else is random). The default scales
with the graph (:func:`default_budget`): 0.65 s plus 8 to 150 simulations' worth, fewer on larger graphs
(:func:`default_trials`). On a training graph the default grows by the work of the training members
(the stage placements and paired METIS, and on a fused graph the same on the fine graph), so the
refinement keeps the share it has on any other graph.

The portfolio and the first stage place the problem as given: on a large graph, the coarse view is
the user's ``fuse`` choice (``fuse,place``); only the second stage splits coarse nodes. The
statistics report every candidate's makespan (``auto.<member>-ms``; ``skipped``/``failed``), the
chosen member, the best portfolio makespan, the refined one and the refinement's gain
(``auto.refine-gain-pct``; negative when it traded time for memory, with ``auto.refine-overflow-B``
saying how the overflow fell), the trials simulated (both stages), moves taken and the candidates
the refinement started from (``auto.refine-starts``), the second stage's trials, moves, fine nodes
moved and result (``auto.offload-sims``, ``-moves``, ``-nodes``, ``-ms``), the critical-path bound
(``auto.bound-ms``: :func:`graphir.passes.place.refine.critical_path_bound` with the one-device
simulation's durations; no placement on that device kind is faster), and wall times.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import GraphIRError
from graphir.pass_infra import Stat
from graphir.passes.place.base import (
    PLACERS,
    CandidateSimulator,
    Placement,
    PlacementContext,
    Placer,
    register_placer,
)
from graphir.passes.place.memory_guard import GUARD_PLANS, lowered_capacity
from graphir.passes.place.pairing import pair_gradients
from graphir.passes.place.problem import PlacementProblem, list_schedule
from graphir.passes.place.refine import Candidate, candidate, critical_path_bound, refine
from graphir.passes.place.refine_fine import fine_problem, offload
from graphir.passes.place.stages import Stages, accelerators

# The members run by name from PLACERS: the package (graphir.passes.place) imports their modules,
# which register them, before anything can import this one.
PORTFOLIO = ("single", "metis", "heft", "m-topo", "expert", "m-etf", "dpos", "order-place", "adjusting", "m-sct")
"""The members of the portfolio, in the order they run: those that win most often in the placement
tables first (METIS, HEFT, m-TOPO; benchmarks/results/placement-notes.md), then the cheap ones,
then the rest; a member that does not fit the remaining budget is skipped, a later cheaper one may
still run."""

PORTFOLIO_SHARE = 0.6
"""The portfolio may spend this share of the budget; the refinement gets the rest (and what is left)."""


FINE_SHARE = 0.5
"""The share of the refinement's simulations reserved for its second stage (offloading fine nodes,
:mod:`graphir.passes.place.refine_fine`); the first stage (moving coarse blocks) gets the rest, and
what it leaves goes to the second."""

FINE_MIN_SIMS = 4
"""The second stage runs only with at least this many simulations left (building its problem and the
first critical-path analysis are charged as two)."""


REPLAN_SHARE = 0.2
"""The memory guard's re-plans (:meth:`Auto._replan`) may also spend this share of the budget, taken
from the refinement's (which keeps at least the remaining 20 %)."""


def _graph_size(problem: PlacementProblem) -> int:
    """Fine nodes plus fine edges: what one simulation walks."""
    return len(problem.node_group) + len(problem.fine.edge_src)


@dataclasses.dataclass(frozen=True)
class WorkModel:
    """Modelled seconds of auto's steps, from the graph's sizes alone (calibrated on the 2-core machine).

    ``auto`` spends its budget in these units, never by the clock, so what it tries (which members
    run, how many trial placements are simulated) is the same on every run and every machine:
    deterministic under the seed whatever the load. Calibration (CPU seconds, the 30,000-node
    synthetic graph after ``fuse``: 30k fine nodes + 57k edges, 194 coarse nodes, 4 devices;
    benchmarks/results/auto.md): a simulation 0.08-0.09 s, about 1 us per fine node and edge; the
    list schedulers planning with ``mem-model=liveness`` walk the fine graph's values (HEFT
    0.42 s, Adjusting 0.33 s, DPOS 0.14 s: 4.8, 3.8 and 1.6 us per fine node and edge); m-SCT's
    LP about 2 ms per coarse node; the other members a few ms.
    """

    simulation: float
    fine: int
    coarse: int
    devices: int

    @classmethod
    def of(cls, problem: PlacementProblem) -> WorkModel:
        """The model of ``problem``'s sizes."""
        size = _graph_size(problem)
        return cls(1e-3 + 1.0e-6 * size, size, problem.num_nodes, problem.num_devices)

    def member(self, name: str, liveness: bool) -> float:
        """Modelled seconds of one portfolio member: its placer and one simulation of its answer."""
        list_scheduler = 2e-5 * self.coarse * self.devices
        rates = {"heft": 4.8e-6, "adjusting": 3.8e-6, "dpos": 1.6e-6, "order-place": 1.6e-6}
        per_fine = rates.get(name, 0.0) if liveness else 0.0
        placer = {
            "single": 0.0,
            "expert": 1e-5 * self.coarse,
            "metis": 2e-5 * self.coarse,
            "m-topo": 2e-5 * self.coarse,
            "m-etf": 5e-5 * self.coarse * self.devices,
            "m-sct": 2e-3 * self.coarse,
            "stages": 1e-5 * self.coarse,
        }.get(name, list_scheduler)
        simulations = 2 if name == "single" else 1  # single is simulated in two orders
        return simulations * self.simulation + placer + per_fine * self.fine


REFERENCE_SIZE = 87_000
"""Fine nodes plus edges of the 30,000-node benchmark graph, where the default allows 8 trials."""


MAX_TRIALS = 150
"""The most trial simulations the default budget allows (small graphs: a simulation takes milliseconds)."""


def default_trials(problem: PlacementProblem) -> int:
    """Trial simulations in the default budget: ``8 * (87,000 / (N + E)) ** 1.5``, clamped to 8..150.

    ``N + E`` counts the fine nodes and edges one simulation walks. Each simulation costs time
    proportional to ``N + E``, so the budget's simulations shrink faster than linearly as the
    graph grows: 150 on graphs of up to ~13,000 nodes and edges, 73 at 20,000, 8 at the benchmark's
    87,000 (and beyond), which keeps ``fuse,place`` there within 5 s of CPU end to end.
    """
    size = max(1, WorkModel.of(problem).fine)
    return min(MAX_TRIALS, max(8, round(8 * (REFERENCE_SIZE / size) ** 1.5)))


def default_budget(problem: PlacementProblem) -> float:
    """The default budget in modelled seconds: 0.65 s plus :func:`default_trials` simulations, at most 60 s.

    On the 30,000-node benchmark graph (1.35 s) the portfolio's 60 % runs single, HEFT and METIS and
    the refinement gets 6 trials; on graphs of up to ~13,000 nodes and edges every member runs.
    """
    return min(60.0, 0.65 + default_trials(problem) * WorkModel.of(problem).simulation)


def restarts(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates the refinement starts from, in turn: best first, then the next distinct ones.

    The refinement ends at a local optimum, often long before its allowance is spent; what is left
    goes to the next candidate by :meth:`Candidate.key` whose placement differs from every earlier
    start (a different basin: vgg19_train on the Celeritas testbed ends at 873.5 ms from m-TOPO's
    answer, while one device refined reaches lower). Only candidates that fit, or, when none fits,
    only the best one (whose refinement then seeks memory).
    """
    ranked = sorted(candidates, key=Candidate.key)
    fitting = [c for c in ranked if c.fits] or ranked[:1]
    out: list[Candidate] = []
    for c in fitting:
        if all(not np.array_equal(c.device, other.device) for other in out):
            out.append(c)
    return out


def _single_device(problem: PlacementProblem) -> int:
    """The device for the one-device candidate: least total compute time, then most memory, then number."""
    total = problem.times.sum(axis=0)
    return int(np.lexsort((np.arange(problem.num_devices), -problem.capacity, total))[0])


@register_placer
@dataclasses.dataclass(frozen=True)
class Auto(Placer):
    """Portfolio of placers scored by the simulator, then a simulator-guided local search.

    Options:
        budget: work for the portfolio and the refinement together, in modelled seconds
            (:class:`WorkModel`, a count of simulations and member runs from the graph's size,
            not the clock: the result does not depend on the machine or its load); 0: 0.65 s plus
            8 to 150 simulations' worth (:func:`default_budget`). The portfolio gets at most 60 %.
        mem-model: the memory rule the members that have one plan with (``paper`` or
            ``liveness``, see :mod:`graphir.memory`); the simulator always judges with its own.
        congestion: the congestion rule candidates are simulated with (that of the ``simulate``
            run that will judge the placement).
        refine: run the refinement stage.
    """

    name: ClassVar[str] = "auto"
    uses_training: ClassVar[bool] = True
    budget: float = 0.0
    mem_model: Literal["paper", "liveness"] = "liveness"
    congestion: Literal["pair", "port", "task", "topology"] = "topology"
    refine: bool = True

    def __post_init__(self) -> None:
        """Reject a negative budget when the pipeline is parsed."""
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")

    def _options(self, name: str, problem: PlacementProblem) -> dict[str, object]:
        """A member's options: ``mem-model`` where it has one, the one-device target for ``single``."""
        if name == "single":
            return {"device": problem.device_names[_single_device(problem)]}
        fields = {field.name for field in dataclasses.fields(PLACERS[name])}
        return {"mem_model": self.mem_model} if "mem_model" in fields else {}

    def _replan(
        self,
        problem: PlacementProblem,
        ctx: PlacementContext,
        judge: Callable[[str, np.ndarray, np.ndarray], Candidate],
        candidates: list[Candidate],
        stats: dict[str, Stat],
        left: float,
    ) -> float:
        """The memory guard's re-plans for the members whose answer overflowed, within ``left`` modelled s.

        A member that plans with ``mem-model`` (a list scheduler with a memory guard when ``place``
        runs it) and whose answer overflows in the simulator while being faster than every fitting
        candidate plans again, on capacities lowered by the overflow measured per device
        (:func:`graphir.passes.place.memory_guard.lowered_capacity`, cumulative), up to the guard's
        :data:`~graphir.passes.place.memory_guard.GUARD_PLANS` plans in all, the least overflow first
        (the likeliest to fit after one re-plan),
        while the portfolio's share of the budget lasts: what ``place{algo=<member>}`` answers is
        then a candidate too. Every re-plan is a candidate named ``<member>+guard``; statistics
        ``auto.<member>+guard-ms`` (the last re-plan) and ``auto.<member>+guard-plans``. Returns the
        modelled seconds spent.

        None when no placement can fit (the persistent bytes alone exceed the cluster's memory,
        :func:`~graphir.passes.place.memory_guard.least_overflow`), as the guard itself does not
        re-plan then: statistic ``auto.memory-guard-bound-B``.
        """
        model = WorkModel.of(problem)
        liveness = self.mem_model == "liveness"
        spent = 0.0
        fitting = min((c.makespan for c in candidates if c.fits), default=np.inf)
        guarded = [c for c in candidates if not c.fits and c.name in PORTFOLIO and self._has_mem_model(c.name)]
        bound = max((c.least_overflow for c in candidates), default=0)
        if guarded and bound > 0:  # every placement overflows: no re-plan could be accepted
            stats["auto.memory-guard-bound-B"] = bound
            return spent
        for first in sorted(guarded, key=lambda c: (c.overflow, c.makespan, c.name)):
            if first.makespan >= fitting:
                continue  # a re-plan on less memory is rarely faster than its first plan
            name, current, capacity, plans = first.name, first, problem.capacity, 1
            while plans < GUARD_PLANS and not current.fits:
                cost = model.member(name, liveness)
                if spent + cost > left:
                    return spent
                spent += cost
                plans += 1
                capacity = lowered_capacity(capacity, np.maximum(-current.headroom, 0.0))
                smaller = dataclasses.replace(problem, capacity=capacity.copy())
                answer = PLACERS[name](**self._options(name, problem)).place(smaller, ctx)
                device = np.asarray(answer.device, dtype=np.int64)
                start = answer.start if answer.start is not None else list_schedule(problem, device)[0]
                current = judge(f"{name}+guard", device, np.asarray(start, dtype=np.float64))
                candidates.append(current)
                stats[f"auto.{name}+guard-ms"] = round(current.makespan * 1e3, 3)
                stats[f"auto.{name}+guard-plans"] = plans
                stats.pop(f"auto.{name}+guard-overflow-B", None)
                if current.fits:
                    fitting = min(fitting, current.makespan)
                else:
                    stats[f"auto.{name}+guard-overflow-B"] = current.overflow
        return spent

    def _offload(
        self,
        problem: PlacementProblem,
        refined: Candidate,
        duration: np.ndarray,
        simulate: CandidateSimulator,
        allowance: int,
        stats: dict[str, Stat],
    ) -> tuple[Candidate, PlacementProblem] | None:
        """The refinement's second stage on the fine graph (:func:`graphir.passes.place.refine_fine.offload`).

        ``allowance`` counts simulations; building the fine problem and each critical-path analysis
        are charged as one simulation each (they walk the same nodes and edges). Returns the
        offloaded candidate and its fine problem when it beats ``refined``, else ``None``.
        Statistics: ``auto.offload-sims``, ``auto.offload-moves`` (trials taken), ``auto.offload-nodes``
        (fine nodes moved), ``auto.offload-ms``.
        """
        fine = fine_problem(problem, duration)

        def judge_fine(device: np.ndarray, start: np.ndarray) -> Candidate:
            return candidate(fine, "trial", device, start, simulate(fine, device, start, self.congestion))

        group = problem.node_group
        first = judge_fine(refined.device[group], np.asarray(refined.start, dtype=np.float64)[group])
        outcome = offload(fine, first, judge_fine, allowance - 2)
        stats["auto.offload-sims"] = outcome.simulations + 2
        stats["auto.offload-moves"] = outcome.moves
        stats["auto.offload-nodes"] = outcome.moved
        stats["auto.offload-ms"] = round(outcome.best.makespan * 1e3, 3)
        return (outcome.best, fine) if outcome.best.better_than(refined) else None

    def _training_runs(self, problem: PlacementProblem) -> list[tuple[str, Placer, PlacementProblem]]:
        """The training graph's members: ``stages`` on every accelerator and on half of them, METIS paired.

        ``metis+paired`` is METIS on the problem with every gradient colocated with its forward op
        (:func:`graphir.passes.place.pairing.pair_gradients`); its answer is a placement of the
        problem itself (pairing only adds constraints).
        """
        count = len(accelerators(problem))
        runs: list[tuple[str, Placer, PlacementProblem]] = [(f"stages{count}", Stages(stages=count), problem)]
        if count >= 4:
            runs.append((f"stages{count // 2}", Stages(stages=count // 2), problem))
        runs.append(("metis+paired", PLACERS["metis"](), pair_gradients(problem)[0]))
        return runs

    def _training_members(
        self,
        problem: PlacementProblem,
        ctx: PlacementContext,
        judge: Callable[[str, np.ndarray, np.ndarray], Candidate],
        candidates: list[Candidate],
        stats: dict[str, Stat],
    ) -> float:
        """Run :meth:`_training_runs` on ``problem`` as candidates; returns the modelled seconds spent."""
        model = WorkModel.of(problem)
        spent = 0.0
        for name, placer, target in self._training_runs(problem):
            spent += model.member("stages" if name.startswith("stages") else "metis", False)
            member = _run_member(
                name, name, placer, target, ctx, stats, lambda d, n=name: judge(n, d, list_schedule(problem, d)[0])
            )
            if member is not None:
                candidates.append(member)
        return spent

    def _fine_members(
        self,
        problem: PlacementProblem,
        ctx: PlacementContext,
        duration: np.ndarray,
        simulate: CandidateSimulator,
        stats: dict[str, Stat],
    ) -> tuple[tuple[Candidate, PlacementProblem] | None, float]:
        """The training members and METIS on the fine graph (fused groups split): fuse must not cost their answer.

        On a fused training graph the coarse groups can hold a layer's forward and its gradients
        apart, or be too large to balance memory (issue 37: ``fuse,place`` out of memory where
        ``place{algo=metis}`` on the unfused graph fits); these members also place the fine graph
        (:func:`graphir.passes.place.refine_fine.fine_problem`) and are simulated there. Returns the
        best fine candidate with its problem (``None`` when all failed) and the modelled seconds spent.
        """
        fine = fine_problem(problem, duration)
        if problem.fine.colocation is not None:  # the graph's own classes, not the groups holding them
            fine = dataclasses.replace(fine, colocation=problem.fine.colocation)
        model = WorkModel.of(fine)
        spent = model.simulation  # building the fine problem
        runs = [*self._training_runs(fine), ("metis", PLACERS["metis"](), fine)]
        best: Candidate | None = None

        def judge(label: str, device: np.ndarray) -> Candidate:
            start = list_schedule(fine, device)[0]
            return candidate(fine, label, device, start, simulate(fine, device, start, self.congestion))

        for name, placer, target in runs:
            spent += 2 * model.simulation + model.member("metis", False)  # plan, list-schedule, simulate
            member = _run_member(
                f"fine.{name}", f"fine {name}", placer, target, ctx, stats, lambda d, n=f"fine.{name}": judge(n, d)
            )
            if member is not None and (best is None or member.key() < best.key()):
                best = member
        return (None if best is None else (best, fine)), spent

    def _finish_fine(
        self,
        fine_answer: tuple[Candidate, PlacementProblem],
        coarse_best: Candidate,
        left: float,
        simulate: CandidateSimulator,
        stats: dict[str, Stat],
        began: float,
    ) -> tuple[Placement, Candidate]:
        """A fine-graph candidate beat every coarse one: refine it on the fine graph within ``left``.

        Returns the placement (of the fine problem) and its refined candidate.
        """
        best, fine = fine_answer
        stats["auto.chosen"] = best.name
        stats["auto.portfolio-ms"] = round(best.makespan * 1e3, 3)
        stats["auto.coarse-best-ms"] = round(coarse_best.makespan * 1e3, 3)
        stats["auto.portfolio-wall-s"] = round(time.perf_counter() - began, 3)
        refined = best
        if self.refine:
            allowance = max(0, int(left // WorkModel.of(fine).simulation))

            def judge_fine(device: np.ndarray, start: np.ndarray) -> Candidate:
                return candidate(fine, "trial", device, start, simulate(fine, device, start, self.congestion))

            outcome = refine(fine, best, judge_fine, allowance)
            stats["auto.refine-starts"] = best.name
            stats["auto.refine-sims"] = outcome.simulations
            stats["auto.refine-allowance"] = allowance
            stats["auto.refine-moves"] = outcome.moves
            if outcome.best.better_than(best):
                refined = dataclasses.replace(outcome.best, name=best.name)
        stats["auto.refined-ms"] = round(refined.makespan * 1e3, 3)
        gain = (best.makespan - refined.makespan) / best.makespan if best.makespan > 0 else 0.0
        stats["auto.refine-gain-pct"] = round(100 * gain, 2)
        stats["auto.wall-s"] = round(time.perf_counter() - began, 3)
        stats["auto.fits"] = refined.fits
        stats["estimated-makespan-s"] = refined.makespan
        return Placement(refined.device, refined.start, stats, problem=fine), refined

    @staticmethod
    def _has_mem_model(name: str) -> bool:
        """Whether member ``name`` plans with a ``mem-model`` (and so reads the devices' capacities)."""
        return any(field.name == "mem_model" for field in dataclasses.fields(PLACERS[name]))

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Run the portfolio, keep the best simulated candidate, refine it within the budget."""
        began = time.perf_counter()
        budget = self.budget or default_budget(problem)
        simulate = ctx.simulator()
        stats: dict[str, Stat] = {"auto.budget-s": round(budget, 3)}
        if problem.num_nodes == 0:
            return Placement(np.zeros(0, dtype=np.int64), np.zeros(0), stats)

        durations: dict[int, np.ndarray] = {}  # id(candidate) -> fine durations, for single's bound
        single_duration: np.ndarray | None = None  # the one-device simulation's, for the fine stage

        def judge(name: str, device: np.ndarray, start: np.ndarray) -> Candidate:
            result = simulate(problem, device, start, self.congestion)
            out = candidate(problem, name, device, start, result)
            if name == "single":
                durations[id(out)] = np.asarray(result.finish) - np.asarray(result.start)
            return out

        # Members plan once, without their memory guard (passes/place/memory_guard.py): auto simulates
        # every answer itself and keeps one that fits, and its refinement repairs memory.
        member_ctx = dataclasses.replace(ctx, simulate=None)
        model = WorkModel.of(problem)
        spent = 0.0  # modelled seconds, not the clock: the same work on every machine and load
        candidates: list[Candidate] = []
        liveness = self.mem_model == "liveness"
        for name in PORTFOLIO:
            cost = model.member(name, liveness)
            if candidates and spent + cost > PORTFOLIO_SHARE * budget:
                stats[f"auto.{name}-ms"] = "skipped"
                continue
            spent += cost
            member_began = time.perf_counter()
            try:
                answer = PLACERS[name](**self._options(name, problem)).place(problem, member_ctx)
            except (GraphIRError, ImportError) as exc:
                stats[f"auto.{name}-ms"] = "failed"
                ctx.log(f"auto: {name} failed: {exc}")
                continue
            device = np.asarray(answer.device, dtype=np.int64)
            start = answer.start if answer.start is not None else list_schedule(problem, device)[0]
            member = judge(name, device, np.asarray(start, dtype=np.float64))
            if name == "single":  # also in topological order, as place{algo=single} on the fine graph runs
                plain = judge(name, device, np.arange(problem.num_nodes, dtype=np.float64))
                member = plain if plain.better_than(member) else member
                single_duration = durations[id(member)]
                bound = critical_path_bound(problem, single_duration)
                stats["auto.bound-ms"] = round(bound * 1e3, 3)
            wall = time.perf_counter() - member_began
            stats[f"auto.{name}-ms"] = round(member.makespan * 1e3, 3)
            stats[f"auto.{name}-wall-s"] = round(wall, 3)
            if not member.fits:
                stats[f"auto.{name}-overflow-B"] = member.overflow
            ctx.log(f"auto: {name} {member.makespan * 1e3:.3f} ms, overflow {member.overflow} B, {wall:.2f} s")
            candidates.append(member)
        left = (PORTFOLIO_SHARE + REPLAN_SHARE) * budget - spent
        spent += self._replan(problem, member_ctx, judge, candidates, stats, left)
        fine_answer: tuple[Candidate, PlacementProblem] | None = None
        if problem.training is not None:
            training_spent = self._training_members(problem, member_ctx, judge, candidates, stats)
            if problem.num_nodes < len(problem.node_group) and single_duration is not None:
                fine_answer, cost = self._fine_members(problem, member_ctx, single_duration, simulate, stats)
                training_spent += cost
            spent += training_spent
            if not self.budget:  # the default budget grows by this work: the refinement keeps its share
                budget += training_spent
                stats["auto.budget-s"] = round(budget, 3)
        best = min(candidates, key=Candidate.key)
        fine_finish: tuple[Placement, Candidate] | None = None
        if fine_answer is not None and fine_answer[0].better_than(best):
            if not best.fits or not self.refine:
                return self._finish_fine(fine_answer, best, budget - spent, simulate, stats, began)[0]
            # Both fit: the fine route's refinement moves fine nodes and often gains less than the
            # coarse one from its best member, so each gets half of what is left; the better end wins.
            half = (budget - spent) / 2
            fine_finish = self._finish_fine(fine_answer, best, half, simulate, dict(stats), began)
            spent += half
        stats["auto.chosen"] = best.name
        stats["auto.portfolio-ms"] = round(best.makespan * 1e3, 3)
        stats["auto.portfolio-wall-s"] = round(time.perf_counter() - began, 3)
        refined = best
        answer = Placement(best.device, best.start, stats)
        if self.refine:
            allowance = int((budget - spent) // model.simulation)
            coarse_allowance = allowance - int(FINE_SHARE * allowance)
            refine_began = time.perf_counter()
            refined, sims, moves, reordered, starts = best, 0, 0, False, []
            for start_from in restarts(candidates):
                if sims >= coarse_allowance:
                    break
                outcome = refine(problem, start_from, lambda d, s: judge("trial", d, s), coarse_allowance - sims)
                sims += outcome.simulations
                starts.append(start_from.name)
                if outcome.best.better_than(refined):
                    refined, moves, reordered = outcome.best, outcome.moves, outcome.reordered
            answer = Placement(refined.device, refined.start, stats)
            stats["auto.refine-sims"] = sims
            stats["auto.refine-allowance"] = allowance
            stats["auto.refine-moves"] = moves
            stats["auto.refine-reordered"] = reordered
            stats["auto.refine-starts"] = ",".join(starts)
            if refined.fits and single_duration is not None and allowance - sims >= FINE_MIN_SIMS:
                split = self._offload(problem, refined, single_duration, simulate, allowance - sims, stats)
                stats["auto.refine-sims"] = sims + int(stats["auto.offload-sims"])
                if split is not None:
                    refined = dataclasses.replace(split[0], name=refined.name)
                    answer = Placement(refined.device, refined.start, stats, problem=split[1])
            left = allowance - int(stats["auto.refine-sims"])
            if answer.problem is None and left > 0 and sims >= coarse_allowance:
                # the second stage found nothing to offload: the first stage, cut short, goes on
                outcome = refine(problem, refined, lambda d, s: judge("trial", d, s), left)
                stats["auto.refine-sims"] = int(stats["auto.refine-sims"]) + outcome.simulations
                if outcome.best.better_than(refined):
                    refined = outcome.best
                    stats["auto.refine-moves"] = moves + outcome.moves
                    answer = Placement(refined.device, refined.start, stats)
            stats["auto.refine-wall-s"] = round(time.perf_counter() - refine_began, 3)
        stats["auto.refined-ms"] = round(refined.makespan * 1e3, 3)
        gain = (best.makespan - refined.makespan) / best.makespan if best.makespan > 0 else 0.0
        stats["auto.refine-gain-pct"] = round(100 * gain, 2)  # negative when it traded time for memory
        if refined.overflow < best.overflow:
            stats["auto.refine-overflow-B"] = f"{best.overflow} -> {refined.overflow}"
        stats["auto.wall-s"] = round(time.perf_counter() - began, 3)
        stats["auto.fits"] = refined.fits
        stats["estimated-makespan-s"] = refined.makespan
        if fine_finish is not None:
            stats["auto.fine-route-ms"] = round(fine_finish[1].makespan * 1e3, 3)
            if fine_finish[1].better_than(refined):
                fine_finish[0].stats["auto.coarse-route-ms"] = round(refined.makespan * 1e3, 3)
                return fine_finish[0]
        return answer


def _run_member(
    label: str,
    title: str,
    placer: Placer,
    target: PlacementProblem,
    ctx: PlacementContext,
    stats: dict[str, Stat],
    judge: Callable[[np.ndarray], Candidate],
) -> Candidate | None:
    """Place ``target`` with one member and judge its devices; ``None`` (stat ``failed``) when the placer fails.

    Records ``auto.<label>-ms`` (and ``-overflow-B`` when it does not fit); ``title`` names it in the log.
    """
    try:
        answer = placer.place(target, ctx)
    except (GraphIRError, ImportError) as exc:
        stats[f"auto.{label}-ms"] = "failed"
        ctx.log(f"auto: {title} failed: {exc}")
        return None
    member = judge(np.asarray(answer.device, dtype=np.int64))
    stats[f"auto.{label}-ms"] = round(member.makespan * 1e3, 3)
    if not member.fits:
        stats[f"auto.{label}-overflow-B"] = member.overflow
    return member
