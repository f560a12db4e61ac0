"""``place{algo=auto}``: a portfolio of placers judged by the simulator, then a simulator-guided refinement.

A user runs ``place`` to get a better placement than by hand; no single published placer wins on
every graph and cluster (benchmarks/results/placement-notes.md), so ``auto`` runs several and
keeps the best *by the simulator's own verdict* (``ctx.simulate``, the same semantics as the
``simulate`` pass), then improves it.

1. **Portfolio**, cheapest first, each candidate simulated: ``single`` (every node on the device
   with the most memory; kept only when it fits), ``metis``, ``heft``, ``m-etf``, ``adjusting``
   (Celeritas), ``dpos`` (FastT), ``m-sct`` (its LP is the slowest member). The list schedulers
   get ``mem-model``; Baechi's m-ETF/m-SCT keep their own freeing rule and METIS ignores memory.
   A member whose modelled time (:class:`WorkModel`) would overrun the portfolio's 60 % of the
   budget is skipped and reported as ``skipped``; ``single`` and the first spread member always run.
   A member that fails (METIS without ``pymetis``) is reported as ``failed``.
2. **Choice**: the candidate with the smallest simulated makespan among those that fit memory
   (no OOM device); when none fits, the one with the least overflow (bytes above capacity,
   summed over devices), then the smallest makespan.
3. **Refinement** (the rest of the budget): a local search on the coarse graph. The current
   placement is cut into *blocks*: maximal runs of consecutive coarse nodes (coarse nodes are
   numbered topologically) on one device, at most ``ceil(n / 64)`` nodes each (colocation classes
   move whole). A move sends one block to another allowed device; a **re-ordering** move keeps
   the devices and re-orders them by the rank_u list schedule. Every move is screened by the
   cheap coarse estimate (:func:`graphir.passes.place.problem.list_schedule`, congestion-free,
   ``O(V + E)``) and a necessary memory test (persistent bytes per device within capacity); the
   most promising screened moves are then *simulated*, in order of their estimate, and the first
   that lowers the simulated makespan while fitting memory is taken. The search stops when the
   budget is spent or no screened move improves (a local optimum under the simulator).
   Deterministic: the budget is spent in *modelled* seconds (:class:`WorkModel`, from the graph's
   size), never by the clock, so the same moves are tried on every run; no randomness beyond the
   seed METIS gets; ties by block then device number.

The granularity is the problem as given: on a large graph, the coarse view is the user's ``fuse``
choice (``fuse{algo=cpd-topo},place``). The statistics report every candidate's makespan
(``auto.<member>-ms``), the chosen member, the best portfolio makespan, the refined one and the
refinement's gain (``auto.refine-gain-pct``), moves tried and taken, and wall times.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import GraphIRError
from graphir.pass_infra import Stat
from graphir.passes.place import (  # noqa: F401  (the members register)
    PLACERS,
    Placement,
    PlacementContext,
    Placer,
    baechi,
    celeritas,
    fastt,
    heft,
    metis,
    register_placer,
)
from graphir.passes.place.problem import PlacementProblem, list_schedule
from graphir.simulator import SimResult

PORTFOLIO = ("single", "metis", "heft", "m-etf", "adjusting", "dpos", "m-sct")
"""The members of the portfolio, in the order they run (cheapest first)."""

MEMORY_AWARE = ("heft", "adjusting", "dpos")
"""Members that take ``mem-model``."""

MAX_BLOCKS = 64
"""A block holds at most ``ceil(n / MAX_BLOCKS)`` coarse nodes."""

SCREENED = 6
"""Moves simulated per refinement round (the best by the coarse estimate)."""


def default_budget(problem: PlacementProblem) -> float:
    """The default time budget in seconds: 2 s plus 1 s per 15,000 fine nodes, at most 60 s.

    Sized so that ``auto`` on a 30,000-node graph stays within 5 s end to end
    (benchmarks/results/auto.md); pass ``budget=`` for a longer search.
    """
    return min(60.0, 2.0 + len(problem.node_group) / 15_000)


@dataclasses.dataclass(frozen=True)
class WorkModel:
    """Modelled seconds of auto's steps, from the graph's size alone (measured on the 2-core machine).

    ``auto`` spends its budget in these units, not by the clock, so that what it tries (which
    members run, how many moves are simulated) is the same on every run: deterministic under the
    seed whatever the machine's load. Calibration (benchmarks/results/auto.md): a simulation costs
    about 25 us per fine node, a coarse estimate 4 us per coarse node and edge, a list-scheduling
    member 20 us per coarse node and device; m-SCT's LP about 50 times a list scheduler.
    """

    simulation: float
    estimate: float
    placer: float

    @classmethod
    def of(cls, problem: PlacementProblem) -> WorkModel:
        """The model of ``problem``'s sizes."""
        fine = len(problem.node_group)
        coarse = problem.num_nodes + len(problem.edge_src)
        return cls(
            simulation=0.01 + 25e-6 * fine,
            estimate=1e-4 + 4e-6 * coarse,
            placer=1e-3 + 20e-6 * problem.num_nodes * problem.num_devices,
        )

    def member(self, name: str) -> float:
        """Modelled seconds of one portfolio member: its placer and one simulation."""
        factor = {"single": 0.0, "m-sct": 50.0}.get(name, 1.0)
        return self.simulation + factor * self.placer


@dataclasses.dataclass
class Candidate:
    """A simulated placement: devices, start times, the simulator's makespan and overflow."""

    name: str
    device: np.ndarray
    start: np.ndarray
    makespan: float
    overflow: int

    @property
    def fits(self) -> bool:
        """Whether no device's peak exceeds its capacity."""
        return self.overflow == 0

    def key(self) -> tuple[int, float]:
        """Sort key: fitting first (least overflow), then the smallest makespan."""
        return (self.overflow, self.makespan)


def _overflow(result: SimResult) -> int:
    """Bytes above capacity, summed over devices."""
    return int(np.maximum(result.peak_memory - result.memory_limit, 0).sum())


@register_placer
@dataclasses.dataclass(frozen=True)
class Auto(Placer):
    """Portfolio of placers scored by the simulator, then a simulator-guided local search.

    Options:
        budget: seconds for the portfolio and the refinement together (0: 2 s + 1 s per 15,000
            fine nodes, at most 60 s), spent in modelled seconds (:class:`WorkModel`) so that
            the result does not depend on the machine's load. The portfolio gets at most 60 %.
        mem-model: the memory rule the list-scheduling members plan with (``paper`` or
            ``liveness``, see :mod:`graphir.memory`); the simulator always judges with its own.
        refine: run the refinement stage.
    """

    name: ClassVar[str] = "auto"
    budget: float = 0.0
    mem_model: Literal["paper", "liveness"] = "liveness"
    refine: bool = True

    def __post_init__(self) -> None:
        """Reject a negative budget when the pipeline is parsed."""
        if self.budget < 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Run the portfolio, keep the best simulated candidate, refine it within the budget."""
        began = time.perf_counter()
        budget = self.budget or default_budget(problem)
        simulate = ctx.simulator()
        stats: dict[str, Stat] = {"auto.budget-s": budget}
        if problem.num_nodes == 0:
            return Placement(np.zeros(0, dtype=np.int64), np.zeros(0), stats)

        def judge(name: str, device: np.ndarray, start: np.ndarray) -> Candidate:
            result = simulate(problem, device, start)
            return Candidate(name, device, start, result.makespan, _overflow(result))

        model = WorkModel.of(problem)
        spent = 0.0  # modelled seconds, not the clock: the same work on every machine and load
        candidates: list[Candidate] = []
        for name in PORTFOLIO:
            cost = model.member(name)
            spread = [c for c in candidates if c.name != "single"]
            if spread and spent + cost > 0.6 * budget:
                stats[f"auto.{name}-ms"] = "skipped"
                continue
            spent += cost
            options = {"mem_model": self.mem_model} if name in MEMORY_AWARE else {}
            if name == "single":
                options = {"device": problem.device_names[int(np.argmax(problem.capacity))]}
            member_began = time.perf_counter()
            try:
                answer = PLACERS[name](**options).place(problem, ctx)
            except (GraphIRError, ImportError) as exc:
                stats[f"auto.{name}-ms"] = "failed"
                ctx.log(f"auto: {name} failed: {exc}")
                continue
            device = np.asarray(answer.device, dtype=np.int64)
            start = answer.start if answer.start is not None else list_schedule(problem, device)[0]
            candidate = judge(name, device, np.asarray(start, dtype=np.float64))
            wall = time.perf_counter() - member_began
            stats[f"auto.{name}-ms"] = round(candidate.makespan * 1e3, 3)
            stats[f"auto.{name}-wall-s"] = round(wall, 3)
            if not candidate.fits:
                stats[f"auto.{name}-overflow-B"] = candidate.overflow
            ctx.log(f"auto: {name} {candidate.makespan * 1e3:.3f} ms, overflow {candidate.overflow} B, {wall:.2f} s")
            candidates.append(candidate)
        best = min(candidates, key=Candidate.key)
        portfolio_s = time.perf_counter() - began
        stats["auto.chosen"] = best.name
        stats["auto.portfolio-ms"] = round(best.makespan * 1e3, 3)
        stats["auto.portfolio-wall-s"] = round(portfolio_s, 3)
        refined = best
        tried = taken = 0
        if self.refine:
            refined, tried, taken = _refine(problem, best, judge, model, budget - spent)
        stats["auto.refined-ms"] = round(refined.makespan * 1e3, 3)
        gain = (best.makespan - refined.makespan) / best.makespan if best.makespan > 0 else 0.0
        stats["auto.refine-gain-pct"] = round(100 * gain, 2)
        stats["auto.refine-sims"] = tried
        stats["auto.refine-moves"] = taken
        stats["auto.wall-s"] = round(time.perf_counter() - began, 3)
        stats["estimated-makespan-s"] = refined.makespan
        return Placement(refined.device, refined.start, stats)


def _blocks(problem: PlacementProblem, device: np.ndarray) -> list[np.ndarray]:
    """Maximal runs of consecutive coarse nodes on one device, cut at ``ceil(n / MAX_BLOCKS)`` nodes.

    A block holding a member of a colocation class holds the whole class (it must move whole).
    """
    n = problem.num_nodes
    size = max(1, math.ceil(n / MAX_BLOCKS))
    cuts = np.flatnonzero(np.diff(device) != 0) + 1
    runs = np.split(np.arange(n), cuts)
    blocks: list[np.ndarray] = []
    colocation = problem.colocation
    for run in runs:
        for k in range(0, len(run), size):
            block = run[k : k + size]
            classes = colocation[block]
            if (classes >= 0).any():
                block = np.union1d(block, np.flatnonzero(np.isin(colocation, classes[classes >= 0])))
            blocks.append(block)
    return blocks


def _estimate(problem: PlacementProblem, device: np.ndarray) -> tuple[float, np.ndarray]:
    """The coarse congestion-free estimate of a device assignment: (makespan, start times)."""
    start, finish = list_schedule(problem, device)
    return float(finish.max(initial=0.0)), start


def _refine(problem, best: Candidate, judge, model: WorkModel, allowance: float) -> tuple[Candidate, int, int]:  # noqa: ANN001
    """Simulator-guided local search from ``best`` within ``allowance`` modelled seconds (module docstring).

    Returns:
        ``(refined, simulations, moves taken)``.
    """
    current = best
    simulations = 0
    taken = 0
    persistent = problem.persistent
    capacity = problem.capacity
    allowed = problem.allowed
    left = allowance
    # Re-ordering move: the same devices in the rank_u list-schedule order.
    if left >= model.simulation + model.estimate:
        left -= model.simulation + model.estimate
        _, start = _estimate(problem, current.device)
        trial = judge("reorder", current.device, start)
        simulations += 1
        if trial.key() < current.key():
            current, taken = trial, taken + 1
    while left >= model.simulation:
        device = current.device
        base, _ = _estimate(problem, device)
        held = np.bincount(device, weights=persistent, minlength=problem.num_devices)
        moves: list[tuple[float, int, int, np.ndarray, np.ndarray]] = []
        left -= model.estimate
        for b, block in enumerate(_blocks(problem, device)):
            if left < model.simulation + model.estimate:
                break
            source = int(device[block[0]])
            weight = float(persistent[block].sum())
            for d in range(problem.num_devices):
                if d == source or not allowed[block, d].all():
                    continue
                if held[d] + weight > capacity[d]:  # necessary: persistent bytes stay all step
                    continue
                trial_device = device.copy()
                trial_device[block] = d
                estimate, start = _estimate(problem, trial_device)
                left -= model.estimate
                moves.append((estimate - base, b, d, trial_device, start))
        moves.sort(key=lambda move: (move[0], move[1], move[2]))
        improved = False
        for _, _, _, trial_device, start in moves[:SCREENED]:
            if left < model.simulation:
                break
            left -= model.simulation
            trial = judge("move", trial_device, start)
            simulations += 1
            if trial.key() < current.key():
                current, taken, improved = trial, taken + 1, True
                break
        if not improved:
            break
    return Candidate(best.name, current.device, current.start, current.makespan, current.overflow), simulations, taken
