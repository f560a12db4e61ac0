"""Exact joint placement and scheduling with OR-Tools CP-SAT: ``place{algo=ilp time-limit=S}``.

Pesto §3.2 and Moirai §III-D formulate placement and scheduling as one (M)ILP over a DAG augmented
with communication vertices. This module states the same problem for CP-SAT, whose optional
intervals and no-overlap constraints are the natural encoding of "a task exists only if its
endpoints are on different devices" and "one task at a time per device and per channel":

* ``x[g, d]``: coarse node ``g`` runs on device ``d`` (exactly one; 0 where ``allowed`` excludes
  ``d``; members of a colocation class share the same literals). ``S[g]``, ``E[g] = S[g] + Σ_d
  x[g, d]·t[g, d]``; one optional interval per (node, device) and a no-overlap per device
  (Pesto (9)-(10), Moirai per-device times).
* The **transfer unit** is the simulator's: one transfer per (value, destination device). A value
  ``v`` produced in coarse node ``g`` and consumed by other coarse nodes is sent to device ``d`` iff
  ``need[v, d] = (some consumer of v is on d) and not x[g, d]`` (exact, three linear constraints).
  It is released when ``g`` finishes (``Ts ≥ E[g]``) and takes ``latency + bytes / bandwidth`` of
  the channel ``s -> d`` actually used: one optional interval per source ``s`` with presence
  ``x[g, s] ∧ need[v, d]``, all sharing ``Ts``/``Te``, and a no-overlap per ordered channel
  (Pesto's congestion constraints, Moirai's (8) with the channel chosen by the placement).
  A consumer ``h`` on ``d`` starts after ``Te[v, d]``; on ``g``'s device, after ``E[g]``.
  A control edge delays its consumer by the link latency across devices and occupies no channel.
* **FIFO**: the simulator serves a channel in the order transfers were requested (producer finish).
  Two transfers on one channel come from two nodes of the same source device, so with positive
  durations their request order is the device order of their producers. An order literal per pair
  of producers ties the two: ``o ⇒ E[g] ≤ S[g']`` on a shared device and ``o ⇒ Te[v] ≤ Ts[v']`` on a
  shared channel (``o`` is fixed when one producer is an ancestor of the other). This costs
  ``O(pairs · channels)`` constraints, so it is added only up to ``fifo-limit`` constraints;
  beyond that the channel order is free (Pesto's own relaxation) and the stat ``fifo = 0`` says so.
* **Memory** (``mem-model``): under ``paper`` (Pesto's rule) ``Σ_g memory[g]·x[g, d] ≤
  capacity[d]`` (persistent + activation bytes per coarse node, nothing freed); under ``liveness``
  (the default) cumulative constraints that charge an activation from its producer's start to its
  last consumer's finish on every device holding a copy (:mod:`graphir.passes.place.ilp_memory`).
  The rule used is the strictest one the warm start satisfies (so the model is never infeasible
  for memory alone): the chosen rule, else persistent bytes only (what ``simulate`` calls OOM when
  exceeded), else none (every heuristic is OOM too; ``simulate`` reports it). The stat
  ``memory-constraint`` (``activations``/``liveness``/``persistent``/``none``) says which. Under
  ``liveness`` the warm start runs with ``mem-model=liveness`` and a solution that overflows in the
  simulator (possible when the model's schedule leaves slack the simulator closes) loses to a
  warm start that fits.
* **Congestion** (``congestion``): the resources a transfer occupies follow the link model's
  routes under the papers' rules (``pair``, the default, as described above; ``port``, ``task``,
  ``topology``: :mod:`graphir.passes.place.ilp_model`); the warm start and the final comparison
  are simulated under the same rule.
* Objective: the makespan ``M ≥ E[g]``.

**Why the simulator reproduces the objective.** On an ungrouped graph (every coarse node one
fine node, one result each) every schedule the simulator can produce — for any placement and
per-device orders — satisfies all the constraints above (its channels are FIFO, its transfers
start after their release), so the optimum ``M*`` is a lower bound of every simulated makespan.
Conversely, the solution's device orders are written as ``order`` (start order per device, the
FIFO literals make the channel order agree with it), and the simulator, which starts every task as
early as these orders allow, finds the same or an earlier finish for each task. Hence
``simulate`` returns ``M*`` (up to the time rounding below) whenever the solver proves optimality;
``tests/unit/test_place_ilp.py`` checks this against a brute-force search. On a coarsened graph the
simulator works on member nodes, which send their results when *they* finish and may start before
the whole group's inputs have arrived, so the simulated makespan usually *beats* the objective;
both are reported. Known approximations: several results of one node sent to one device are
queued in the simulator's edge order but in any order here; zero-duration nodes get one time unit.

**Time scaling.** CP-SAT needs integers. The unit is the power of ten ``u`` with
``horizon / u`` in ``[R, 10 R)`` (``R`` = the ``resolution`` option, 10^6 by default), ``horizon``
being the sum of every node's longest time and every possible transfer's longest time (a bound on
any left-justified schedule); durations are rounded to the nearest unit (at least one). A chain of
``k`` tasks is therefore off by at most ``k·u/2`` from the real durations, i.e. a relative error
below ``k·0.5/R``; the stat ``time-unit-s`` reports ``u``.

**Warm start.** The registered list schedulers ``heft``, ``dpos``, ``adjusting`` and ``m-etf`` are
run and their placements simulated (through the placement context's simulator, on a copy of the
graph: the ILP never writes annotations); the best one that fits the memory constraint (else
the best) is evaluated in the model's own semantics (an exact, integer, coarse-level replay) and
given to CP-SAT as a complete hint. If the solver's schedule simulates worse than the warm start
(possible only when the solver stopped early on a coarsened graph), the warm start is returned
and ``result = warm-start``: the ILP never does worse than the best heuristic.

**Determinism.** CP-SAT runs with ``interleave_search`` (its subsolvers interleaved in one thread,
``workers`` of them) and ``random_seed`` = the pipeline seed (``graphir-opt --seed``), which makes
the search reproducible for one seed. The
wall-clock limit (``time-limit`` minus the warm-start time) is the one source of variation: when
it stops the search, the incumbent depends on the machine's speed. A run that proves optimality
is reproducible.
"""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys
import time
from typing import ClassVar, Literal, NotRequired, TypedDict

import numpy as np

from graphir.errors import PassError
from graphir.extras import require
from graphir.pass_infra import Stat
from graphir.passes.place.base import PLACERS, Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.ilp_model import IlpModel, Transfers
from graphir.passes.place.problem import PlacementProblem, keyed_topological_order, list_schedule

WARM_START_PLACERS = ("heft", "dpos", "adjusting", "m-etf")
"""List-scheduling placers tried for the warm start, in tie-breaking order."""

FORMULATION = "cp-sat"
"""The formulation used (the only one implemented; a big-M MILP through scipy is future work)."""


@dataclasses.dataclass(frozen=True)
class SolverSettings:
    """The CP-SAT run's tunables (the placer's options; picklable for the isolated process).

    Attributes:
        time_limit: seconds for the search.
        seed: CP-SAT's ``random_seed``.
        workers: subsolvers interleaved in one thread.
        resolution: integer steps at least in the scheduling horizon.
        fifo_limit: most channel FIFO constraints added.
        congestion: the congestion rule of the transfers' routes.
        liveness: add the liveness memory rule (cumulative constraints).
    """

    time_limit: float
    seed: int = 0
    workers: int = 8
    resolution: float = 1e6
    fifo_limit: int = 60_000
    congestion: str = "pair"
    liveness: bool = False


def _fits_memory(problem: PlacementProblem, device: np.ndarray, memory: np.ndarray | None = None) -> bool:
    memory = problem.memory if memory is None else memory
    used = np.bincount(device, weights=memory, minlength=problem.num_devices)
    return bool((used <= problem.capacity).all())


def _coarse_sequence(problem: PlacementProblem, fine_start: np.ndarray) -> list[int]:
    """A topological order of the coarse nodes that follows simulated starts where it can.

    Among the ready coarse nodes, the one whose first member started first (ties: topological
    number). On an ungrouped graph this is the simulated start order; on a grouped one it is a
    valid order close to it (the members of two groups may interleave).
    """
    first = np.full(problem.num_nodes, np.inf)
    np.minimum.at(first, problem.node_group, fine_start)
    return keyed_topological_order(problem, first)


def warm_start(
    problem: PlacementProblem,
    ctx: PlacementContext,
    stats: dict[str, Stat],
    mem_model: str = "paper",
    congestion: str = "pair",
) -> tuple[str, Placement, list[int], float, bool]:
    """Run the warm-start placers; return (algo, placement, coarse sequence, simulated makespan, fits) of the best.

    Each placer runs with its default options but ``mem-model`` (the ILP's) and is judged by
    ``ctx``'s simulator under ``congestion``; its simulated makespan is recorded in ``stats`` as
    ``heuristic.<algo>-s``.

    A placement that fits memory (under ``paper``: every node's persistent + activation bytes;
    under ``liveness``: no overflow in the simulator) beats one that does not; then the lower
    simulated makespan wins (ties: :data:`WARM_START_PLACERS` order).
    """
    simulate = ctx.simulator()
    best: tuple[tuple[bool, float], str, Placement, list[int], float] | None = None  # ((unfit, makespan), ...)
    for algo in WARM_START_PLACERS:
        if algo not in PLACERS:
            continue
        placer = PLACERS[algo]
        options = {"mem_model": mem_model} if "mem_model" in {f.name for f in dataclasses.fields(placer)} else {}
        placement = placer(**options).place(problem, ctx)
        device = np.asarray(placement.device, dtype=np.int64)
        if placement.start is None:
            placement.start = list_schedule(problem, device)[0]
        result = simulate(problem, device, placement.start, congestion)
        stats[f"heuristic.{algo}-s"] = result.makespan
        fits = _fits_memory(problem, device) if mem_model == "paper" else not result.oom_devices
        key = (not fits, result.makespan)
        if best is None or key < best[0]:
            best = (key, algo, placement, _coarse_sequence(problem, result.start), result.makespan)
    assert best is not None, "the list-scheduling placers are registered"
    return best[1], best[2], best[3], best[4], not best[0][0]


class SolveResult(TypedDict):
    """What :func:`solve` returns (plain values: it is pickled back from the isolated process)."""

    status: str
    unit: float
    fifo: bool
    hint: int
    memory: str
    wall: float
    objective: NotRequired[float]
    bound: NotRequired[float]
    device: NotRequired[list[int]]
    start: NotRequired[list[int]]


def solve(
    problem: PlacementProblem,
    transfers: Transfers,
    memory_rule: str,
    device: list[int],
    sequence: list[int],
    settings: SolverSettings,
) -> SolveResult:
    """Build the model, hint the warm start, run CP-SAT; return plain results (picklable).

    Keys: ``status`` (``optimal``, ``feasible``, ``infeasible`` or ``unknown``), ``unit``,
    ``fifo``, ``hint`` (the warm start's objective in units), ``memory`` (the memory rule used)
    and, when a solution exists, ``objective``, ``bound`` (units), ``device`` and ``start`` (units)
    per coarse node, ``wall``.

    With ``settings.liveness`` the model gets the liveness rule when the warm start satisfies it
    (its replay's peaks, :meth:`graphir.passes.place.ilp_memory.LivenessMemory.peaks`); otherwise
    it is rebuilt with ``memory_rule`` (the caller's fallback: ``persistent`` bytes, or ``none``).
    ``memory_rule`` ``activations`` is the paper rule (persistent + activation bytes per node).
    """
    cp_model = require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")

    rule = memory_rule
    memory = {"activations": problem.memory, "persistent": problem.persistent}.get(memory_rule)
    ilp = None
    if settings.liveness:
        ilp = IlpModel(
            problem, transfers, None, settings.resolution, settings.fifo_limit, settings.congestion, liveness=True
        )
        assert ilp.memory_model is not None
        peaks = ilp.memory_model.peaks(ilp.replay(device, sequence))
        if all(peak <= capacity for peak, capacity in zip(peaks, problem.capacity.tolist(), strict=True)):
            rule = "liveness"
        else:
            ilp = None
    if ilp is None:
        ilp = IlpModel(problem, transfers, memory, settings.resolution, settings.fifo_limit, settings.congestion)
    hinted = ilp.hint(device, sequence)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = settings.seed
    params.num_workers = settings.workers
    params.interleave_search = True
    params.max_time_in_seconds = max(0.1, settings.time_limit)
    status = solver.Solve(ilp.model)
    names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}
    out: SolveResult = {
        "status": names.get(status, "unknown"),
        "unit": ilp.unit,
        "fifo": ilp.fifo,
        "hint": hinted,
        "memory": rule,
        "wall": solver.WallTime(),
    }
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out["objective"] = solver.ObjectiveValue()
        out["bound"] = solver.BestObjectiveBound()
        out["device"] = [next(d for d in ilp.devices if solver.Value(ilp.x[g][d])) for g in range(problem.num_nodes)]
        out["start"] = [solver.Value(v) for v in ilp.start]
    return out


def _solve_isolated(*args: object) -> SolveResult:
    """Run :func:`solve` in a fresh interpreter (see :class:`Ilp`'s ``isolate``); pickles in, pickles out."""
    code = "from graphir.passes.place.ilp import _solve_child; _solve_child()"
    done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(args), capture_output=True, check=False)
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        raise PassError(f"place{{algo=ilp}}: the CP-SAT subprocess failed: {tail[0]}")
    return pickle.loads(done.stdout)


def _solve_child() -> None:
    """Entry point of the isolated solver process: ``solve(*pickle(stdin))`` to stdout."""
    args = pickle.loads(sys.stdin.buffer.read())
    result = solve(*args)
    sys.stdout.buffer.write(pickle.dumps(result))
    sys.stdout.buffer.flush()


@register_placer
@dataclasses.dataclass(frozen=True)
class Ilp(Placer):
    """Exact joint placement and scheduling with CP-SAT, warm-started from the best list scheduler.

    CP-SAT's ``random_seed`` is the pipeline seed (``graphir-opt --seed``).

    Options:
        time_limit: seconds for the whole placer (warm start included); the search stops then and
            keeps its incumbent.
        workers: CP-SAT subsolvers, interleaved deterministically in one thread.
        resolution: integer time steps at least in the scheduling horizon (see "Time scaling").
        fifo_limit: most channel FIFO constraints added; beyond that the channel order is left free.
        mem_model: ``liveness`` (cumulative constraints: an activation from its producer's start to
            its last consumer's finish on every device holding a copy, :mod:`.ilp_memory`) or
            ``paper`` (Pesto's rule: every node's persistent + activation bytes for the whole step).
            When the warm start breaks the rule, the persistent bytes only, else none (stat
            ``memory-constraint``).
        congestion: the transfers' congestion rule (:mod:`.ilp_model`): ``pair`` (one channel per
            ordered device pair, Pesto), ``port`` (Moirai eq. 8), ``task`` (Celeritas §6.1: a
            transfer occupies both devices) or ``topology`` (the cluster's physical routes); the
            warm start and the final check are simulated under the same rule.
        isolate: solve in a fresh interpreter: ``yes``, ``no`` or ``auto`` (when TensorFlow is loaded:
            TensorFlow and OR-Tools bundle different builds of abseil/protobuf, and once TensorFlow
            is imported CP-SAT crashes the process on real models).
    """

    name: ClassVar[str] = "ilp"
    time_limit: float = 60.0
    workers: int = 8
    resolution: float = 1e6
    fifo_limit: int = 60_000
    mem_model: Literal["paper", "liveness"] = "liveness"
    congestion: Literal["pair", "port", "task", "topology"] = "pair"
    isolate: Literal["auto", "yes", "no"] = "auto"

    def __post_init__(self) -> None:
        """Reject impossible settings when the pipeline is parsed."""
        if not self.time_limit > 0:
            raise ValueError(f"time-limit must be positive, got {self.time_limit}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if not self.resolution >= 1:
            raise ValueError(f"resolution must be >= 1, got {self.resolution}")
        if self.fifo_limit < 0:
            raise ValueError(f"fifo-limit must be >= 0, got {self.fifo_limit}")

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Warm start, CP-SAT, and the better of the two by the simulator."""
        require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")  # before the warm start's work
        began = time.perf_counter()
        heuristics: dict[str, Stat] = {}
        warm_result = warm_start(problem, ctx, heuristics, self.mem_model, self.congestion)
        algo, warm, warm_sequence, warm_makespan, warm_fits = warm_result
        warm_device = np.asarray(warm.device, dtype=np.int64)
        transfers = Transfers(problem)
        remaining = self.time_limit - (time.perf_counter() - began)
        # The strictest memory rule the warm start satisfies (so the model is never infeasible for
        # memory alone): under paper every node's persistent + activation bytes, under liveness
        # the liveness rule (checked in solve); else persistent bytes only, else none.
        if self.mem_model == "paper" and _fits_memory(problem, warm_device):
            memory_rule = "activations"
        elif _fits_memory(problem, warm_device, problem.persistent):
            memory_rule = "persistent"
        else:
            memory_rule = "none"
        settings = SolverSettings(
            remaining,
            ctx.seed,
            self.workers,
            self.resolution,
            self.fifo_limit,
            self.congestion,
            self.mem_model == "liveness",
        )
        args = (problem, transfers, memory_rule, warm_device.tolist(), warm_sequence, settings)
        isolate = self.isolate == "yes" or (self.isolate == "auto" and "tensorflow" in sys.modules)
        result = _solve_isolated(*args) if isolate else solve(*args)
        unit = float(result["unit"])
        stats: dict[str, Stat] = {
            "formulation": FORMULATION,
            "warm-start": algo,
            "warm-start-makespan-s": warm_makespan,
            "time-unit-s": unit,
            "fifo": int(bool(result["fifo"])),
            "transfer-units": len(transfers.producer),
            "hint-objective-s": float(result["hint"]) * unit,
            "isolated": int(isolate),
            "memory-constraint": str(result["memory"]),
            **heuristics,
        }
        if result["status"] == "infeasible":
            raise PassError("place{algo=ilp}: no placement satisfies the memory, affinity and colocation constraints")
        if result["status"] == "unknown":
            stats.update({"status": "unknown", "result": "warm-start"})
            return Placement(warm_device, warm.start, stats)
        assert "objective" in result and "bound" in result, "optimal or feasible: solve() added the solution"
        assert "device" in result and "start" in result, "likewise"
        objective = float(result["objective"])
        bound = float(result["bound"])
        device = np.asarray(result["device"], dtype=np.int64)
        start = np.asarray(result["start"], dtype=np.float64) * unit
        verdict = ctx.simulator()(problem, device, start, self.congestion)
        simulated = verdict.makespan
        stats.update(
            {
                "status": str(result["status"]),
                "objective-s": objective * unit,
                "bound-s": bound * unit,
                "gap": 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective),
                "solver-wall-s": float(result["wall"]),
                "ilp-simulated-makespan-s": simulated,
                "result": "ilp",
            }
        )
        # Under liveness the simulator's own accounting has the last word: the model's coarse,
        # integer-time schedule may leave slack that the simulator closes (changing lifetimes).
        overflows = self.mem_model == "liveness" and warm_fits and bool(verdict.oom_devices)
        if simulated > warm_makespan or overflows:
            stats["result"] = "warm-start"
            return Placement(warm_device, warm.start, stats)
        return Placement(device, start, stats)
