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
* **Memory** (as the list-scheduling heuristics): ``Σ_g memory[g]·x[g, d] ≤ capacity[d]``
  (persistent + activation bytes per coarse node, nothing freed). Training graphs often need more
  than that in total (the simulator frees activations; this rule does not), so the rule used is the
  strictest one the warm start satisfies: persistent + activation bytes, else persistent bytes only
  (what ``simulate`` calls OOM when exceeded), else none (every heuristic is OOM too; ``simulate``
  reports it). The stat ``memory-constraint`` (``activations``/``persistent``/``none``) says which.
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
import math
import pickle
import subprocess
import sys
import time
from typing import ClassVar, Literal

import numpy as np

from graphir.errors import PassError
from graphir.extras import require
from graphir.pass_infra import Stat
from graphir.passes.place import PLACERS, Placement, PlacementContext, Placer, register_placer
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
    """

    time_limit: float
    seed: int = 0
    workers: int = 8
    resolution: float = 1e6
    fifo_limit: int = 60_000


class _Transfers:
    """The values that cross coarse-node boundaries, and the control dependencies between nodes.

    Attributes:
        producer: coarse producer of each crossing value.
        nbytes: bytes of each crossing value.
        consumers: coarse consumers (other than the producer) of each crossing value.
        of_node: crossing values per coarse producer.
        control: ``(g, h)`` coarse pairs joined only by control edges.
    """

    def __init__(self, problem: PlacementProblem) -> None:
        index = problem.fine
        group = problem.node_group
        src = group[index.edge_src]
        dst = group[index.edge_dst]
        external = src != dst
        control = index.edge_control
        by_value: dict[int, set[int]] = {}
        data_pairs: set[tuple[int, int]] = set()
        for value, g, h in zip(
            index.edge_value[external & ~control].tolist(),
            src[external & ~control].tolist(),
            dst[external & ~control].tolist(),
            strict=True,
        ):
            by_value.setdefault(value, set()).add(h)
            data_pairs.add((g, h))
        values = sorted(by_value)
        self.producer = [int(group[index.value_producer[v]]) for v in values]
        self.nbytes = [float(index.value_bytes[v]) for v in values]
        self.consumers = [sorted(by_value[v]) for v in values]
        self.of_node: list[list[int]] = [[] for _ in range(problem.num_nodes)]
        for k, g in enumerate(self.producer):
            self.of_node[g].append(k)
        pairs = zip(src[external & control].tolist(), dst[external & control].tolist(), strict=True)
        self.control = sorted({(g, h) for g, h in pairs if (g, h) not in data_pairs})


class _Model:
    """The CP-SAT model of one :class:`PlacementProblem` (see the module docstring)."""

    def __init__(
        self,
        problem: PlacementProblem,
        transfers: _Transfers,
        memory: np.ndarray | None,
        resolution: float = 1e6,
        fifo_limit: int = 60_000,
    ) -> None:
        cp_model = require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")

        self.problem = problem
        self.transfers = transfers
        n = problem.num_nodes
        num_devices = problem.num_devices
        self.devices = list(range(num_devices))
        links = problem.links
        comm = [  # comm[k][s][d]: seconds to send crossing value k from s to d
            [[links.transfer_time(b, s, d) for d in self.devices] for s in self.devices] for b in transfers.nbytes
        ]
        times = problem.times
        horizon_s = float(times.max(axis=1).sum()) + sum((num_devices - 1) * max(max(row) for row in c) for c in comm)
        horizon_s = max(horizon_s, 1e-12)
        self.unit = 10.0 ** math.floor(math.log10(horizon_s / resolution))
        unit = self.unit
        self.dur = [[max(1, round(float(times[g, d]) / unit)) for d in self.devices] for g in range(n)]
        self.comm = [
            [[max(1, round(c / unit)) if s != d else 0 for d, c in enumerate(row)] for s, row in enumerate(cc)]
            for cc in comm
        ]
        self.latency = [
            [max(1, round(links.latency_between(s, d) / unit)) if s != d else 0 for d in self.devices]
            for s in self.devices
        ]
        horizon = (
            sum(max(row) for row in self.dur)
            + sum((num_devices - 1) * max(max(row) for row in cc) for cc in self.comm)
            + sum(max(row) for row in self.latency) * len(transfers.control)
        )
        self.horizon = horizon

        model = cp_model.CpModel()
        self.model = model
        allowed = problem.allowed.tolist()
        # Placement literals; a colocation class shares one set.
        x: list[list[object]] = [[None] * num_devices for _ in range(n)]
        shared: dict[int, list[object]] = {}
        colocation = problem.colocation.tolist()
        for g in range(n):
            root = colocation[g]
            if root >= 0 and root in shared:
                x[g] = shared[root]
                continue
            row = [model.NewBoolVar(f"x{g}_{d}") if allowed[g][d] else 0 for d in self.devices]
            model.AddExactlyOne(row)
            x[g] = row
            if root >= 0:
                shared[root] = row
        self.x = x
        self.start = [model.NewIntVar(0, horizon, f"S{g}") for g in range(n)]
        self.end = [model.NewIntVar(0, horizon, f"E{g}") for g in range(n)]
        device_intervals: list[list[object]] = [[] for _ in self.devices]
        for g in range(n):
            model.Add(
                self.end[g] == self.start[g] + sum(self.dur[g][d] * x[g][d] for d in self.devices if allowed[g][d])
            )
            for d in self.devices:
                if allowed[g][d]:
                    device_intervals[d].append(
                        model.NewOptionalIntervalVar(self.start[g], self.dur[g][d], self.end[g], x[g][d], f"I{g}_{d}")
                    )
        for intervals in device_intervals:
            model.AddNoOverlap(intervals)
        # Precedence on every coarse edge (same device: E[g]; across devices the transfer adds more).
        for g, h in zip(problem.edge_src.tolist(), problem.edge_dst.tolist(), strict=True):
            model.Add(self.start[h] >= self.end[g])
        for g, h in transfers.control:
            model.Add(self.start[h] >= self.end[g])
            for s in self.devices:
                for d in self.devices:
                    if s != d and allowed[g][s] and allowed[h][d]:
                        model.Add(self.start[h] >= self.end[g] + self.latency[s][d]).OnlyEnforceIf([x[g][s], x[h][d]])
        # Transfers: one per (crossing value, destination device).
        channel_intervals: dict[tuple[int, int], list[object]] = {}
        self.need: list[dict[int, object]] = []
        self.on_channel: list[dict[tuple[int, int], object]] = []
        self.t_start: list[dict[int, object]] = []
        self.t_end: list[dict[int, object]] = []
        for k, g in enumerate(transfers.producer):
            consumers = transfers.consumers[k]
            need: dict[int, object] = {}
            present: dict[tuple[int, int], object] = {}
            ts: dict[int, object] = {}
            te: dict[int, object] = {}
            for d in self.devices:
                users = [x[h][d] for h in consumers if allowed[h][d]]
                sources = [s for s in self.devices if s != d and allowed[g][s]]
                if not users or not sources:
                    continue
                nd = model.NewBoolVar(f"need{k}_{d}")
                model.Add(nd <= 1 - x[g][d])
                model.Add(nd <= sum(users))
                for u in users:
                    model.Add(nd >= u - x[g][d])
                need[d] = nd
                ts[d] = model.NewIntVar(0, horizon, f"Ts{k}_{d}")
                te[d] = model.NewIntVar(0, horizon, f"Te{k}_{d}")
                model.Add(ts[d] >= self.end[g])
                for s in sources:
                    p = model.NewBoolVar(f"p{k}_{s}_{d}")
                    model.AddBoolAnd([x[g][s], nd]).OnlyEnforceIf(p)
                    model.AddBoolOr([x[g][s].Not(), nd.Not()]).OnlyEnforceIf(p.Not())
                    present[(s, d)] = p
                    channel_intervals.setdefault((s, d), []).append(
                        model.NewOptionalIntervalVar(ts[d], self.comm[k][s][d], te[d], p, f"T{k}_{s}_{d}")
                    )
                for h in consumers:
                    if allowed[h][d]:
                        model.Add(self.start[h] >= te[d]).OnlyEnforceIf([x[h][d], nd])
            self.need.append(need)
            self.on_channel.append(present)
            self.t_start.append(ts)
            self.t_end.append(te)
        for intervals in channel_intervals.values():
            model.AddNoOverlap(intervals)
        self.order: dict[tuple[int, int], object] = {}
        self.fifo = self._add_fifo(model, fifo_limit)
        self.makespan = model.NewIntVar(0, horizon, "M")
        for g in range(n):
            if problem.succ_offsets[g] == problem.succ_offsets[g + 1]:
                model.Add(self.makespan >= self.end[g])
        model.Minimize(self.makespan)
        # Memory capacity (``memory`` is None: no constraint).
        if memory is None:
            return
        memory = [round(float(m)) for m in memory]
        for d in self.devices:
            terms = [memory[g] * x[g][d] for g in range(n) if allowed[g][d] and memory[g] > 0]
            if terms:
                model.Add(sum(terms) <= int(problem.capacity[d]))

    def _add_fifo(self, model: object, limit: int) -> bool:
        """Channel order = producer order on the shared source device (see the module docstring)."""
        transfers = self.transfers
        producers = [g for g in range(self.problem.num_nodes) if transfers.of_node[g]]
        load: dict[tuple[int, int], int] = {}
        for present in self.on_channel:
            for channel in present:
                load[channel] = load.get(channel, 0) + 1
        if sum(c * (c - 1) for c in load.values()) > limit:
            return False
        ancestors = _ancestors(self.problem)
        allowed = self.problem.allowed.tolist()
        for i, g in enumerate(producers):
            for h in producers[i + 1 :]:
                shared = [s for s in self.devices if allowed[g][s] and allowed[h][s]]
                if not shared:
                    continue
                o = None  # g before h: forced when g is an ancestor of h
                if not ancestors[h] >> g & 1:
                    o = model.NewBoolVar(f"o{g}_{h}")
                    for s in shared:
                        both = [self.x[g][s], self.x[h][s]]
                        model.Add(self.end[g] <= self.start[h]).OnlyEnforceIf([*both, o])
                        model.Add(self.end[h] <= self.start[g]).OnlyEnforceIf([*both, o.Not()])
                    self.order[(g, h)] = o
                for k in transfers.of_node[g]:
                    for m in transfers.of_node[h]:
                        for (s, d), p in self.on_channel[k].items():
                            q = self.on_channel[m].get((s, d))
                            if q is None:
                                continue
                            te, ts = self.t_end, self.t_start
                            if o is None:
                                model.Add(te[k][d] <= ts[m][d]).OnlyEnforceIf([p, q])
                            else:
                                model.Add(te[k][d] <= ts[m][d]).OnlyEnforceIf([p, q, o])
                                model.Add(te[m][d] <= ts[k][d]).OnlyEnforceIf([p, q, o.Not()])
        return True

    def replay(self, device: list[int], sequence: list[int]) -> dict[str, object]:
        """The model's own schedule for a placement and a global node order (an exact integer replay).

        Nodes run on their device in ``sequence`` order as early as possible; transfers are queued
        FIFO on their channel when the producer finishes. Returns every variable's value.
        """
        n = self.problem.num_nodes
        transfers = self.transfers
        start = [0] * n
        end = [0] * n
        device_free = [0] * len(self.devices)
        channel_free: dict[tuple[int, int], int] = {}
        arrival: dict[tuple[int, int], tuple[int, int]] = {}
        ready = [0] * n
        control_in: list[list[int]] = [[] for _ in range(n)]
        for g, h in self.transfers.control:
            control_in[h].append(g)
        preds = [
            self.problem.pred[self.problem.pred_offsets[h] : self.problem.pred_offsets[h + 1]].tolist()
            for h in range(n)
        ]
        consumer_values: list[list[int]] = [[] for _ in range(n)]
        for k, users in enumerate(transfers.consumers):
            for h in users:
                consumer_values[h].append(k)
        # ``sequence`` is a topological order whose restriction to each device is its order, so one
        # sweep suffices: every predecessor and every earlier node of the device is done.
        for h in sequence:
            d = device[h]
            t = max(device_free[d], max((end[g] for g in preds[h]), default=0))
            for g in control_in[h]:
                t = max(t, end[g] + self.latency[device[g]][d])
            for k in consumer_values[h]:
                if device[transfers.producer[k]] != d:
                    t = max(t, arrival[(k, d)][1])
            start[h] = t
            end[h] = t + self.dur[h][d]
            device_free[d] = end[h]
            ready[h] = end[h]
            for k in transfers.of_node[h]:
                dests = sorted({device[c] for c in transfers.consumers[k]} - {d})
                for dd in dests:
                    begin = max(end[h], channel_free.get((d, dd), 0))
                    finish = begin + self.comm[k][d][dd]
                    channel_free[(d, dd)] = finish
                    arrival[(k, dd)] = (begin, finish)
        return {"start": start, "end": end, "arrival": arrival, "device": device}

    def hint(self, device: list[int], sequence: list[int]) -> int:
        """Give CP-SAT the replayed schedule of a placement as a complete hint; return its makespan."""
        model = self.model
        schedule = self.replay(device, sequence)
        start, end, arrival = schedule["start"], schedule["end"], schedule["arrival"]
        n = self.problem.num_nodes
        seen: set[int] = set()
        for g in range(n):
            for d in self.devices:
                var = self.x[g][d]
                if not isinstance(var, int) and id(var) not in seen:
                    seen.add(id(var))
                    model.AddHint(var, int(device[g] == d))
            model.AddHint(self.start[g], start[g])
            model.AddHint(self.end[g], end[g])
        for k, g in enumerate(self.transfers.producer):
            for d, nd in self.need[k].items():
                sent = arrival.get((k, d))
                model.AddHint(nd, int(sent is not None))
                begin, finish = sent if sent is not None else (end[g], end[g])
                model.AddHint(self.t_start[k][d], begin)
                model.AddHint(self.t_end[k][d], finish)
                for (s, dd), p in self.on_channel[k].items():
                    if dd == d:
                        model.AddHint(p, int(sent is not None and device[g] == s))
        for (g, h), o in self.order.items():
            model.AddHint(o, int(start[g] <= start[h]))
        makespan = max(end, default=0)
        model.AddHint(self.makespan, makespan)
        return makespan


def _ancestors(problem: PlacementProblem) -> list[int]:
    """Per coarse node, the bitset (Python int) of its ancestors (nodes are topological)."""
    result = [0] * problem.num_nodes
    offsets = problem.pred_offsets.tolist()
    pred = problem.pred.tolist()
    for v in range(problem.num_nodes):
        bits = 0
        for k in range(offsets[v], offsets[v + 1]):
            p = pred[k]
            bits |= result[p] | (1 << p)
        result[v] = bits
    return result


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
    problem: PlacementProblem, ctx: PlacementContext, stats: dict[str, Stat]
) -> tuple[str, Placement, list[int], float]:
    """Run the warm-start placers; return (algo, placement, coarse sequence, simulated makespan) of the best.

    Each placer runs with its default options and is judged by ``ctx``'s simulator; its simulated
    makespan is recorded in ``stats`` as ``heuristic.<algo>-s``.

    A placement that fits the memory constraint beats one that does not; then the lower simulated
    makespan wins (ties: :data:`WARM_START_PLACERS` order).
    """
    simulate = ctx.simulator()
    best: tuple[tuple[bool, float], str, Placement, list[int], float] | None = None
    for algo in WARM_START_PLACERS:
        if algo not in PLACERS:
            continue
        placement = PLACERS[algo]().place(problem, ctx)
        device = np.asarray(placement.device, dtype=np.int64)
        if placement.start is None:
            placement.start = list_schedule(problem, device)[0]
        result = simulate(problem, device, placement.start)
        stats[f"heuristic.{algo}-s"] = result.makespan
        key = (not _fits_memory(problem, device), result.makespan)
        if best is None or key < best[0]:
            best = (key, algo, placement, _coarse_sequence(problem, result.start), result.makespan)
    assert best is not None, "the list-scheduling placers are registered"
    return best[1], best[2], best[3], best[4]


def solve(
    problem: PlacementProblem,
    transfers: _Transfers,
    memory: np.ndarray | None,
    device: list[int],
    sequence: list[int],
    settings: SolverSettings,
) -> dict[str, object]:
    """Build the model, hint the warm start, run CP-SAT; return plain results (picklable).

    Keys: ``status`` (``optimal``, ``feasible``, ``infeasible`` or ``unknown``), ``unit``,
    ``fifo``, ``hint`` (the warm start's objective in units) and, when a solution exists,
    ``objective``, ``bound`` (units), ``device`` and ``start`` (units) per coarse node, ``wall``.
    """
    cp_model = require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")

    ilp = _Model(problem, transfers, memory, settings.resolution, settings.fifo_limit)
    hinted = ilp.hint(device, sequence)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.random_seed = settings.seed
    params.num_workers = settings.workers
    params.interleave_search = True
    params.max_time_in_seconds = max(0.1, settings.time_limit)
    status = solver.Solve(ilp.model)
    names = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}
    out: dict[str, object] = {
        "status": names.get(status, "unknown"),
        "unit": ilp.unit,
        "fifo": ilp.fifo,
        "hint": hinted,
        "wall": solver.WallTime(),
    }
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out["objective"] = solver.ObjectiveValue()
        out["bound"] = solver.BestObjectiveBound()
        out["device"] = [next(d for d in ilp.devices if solver.Value(ilp.x[g][d])) for g in range(problem.num_nodes)]
        out["start"] = [solver.Value(v) for v in ilp.start]
    return out


def _solve_isolated(*args: object) -> dict[str, object]:
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
        isolate: solve in a fresh interpreter: ``yes``, ``no`` or ``auto`` (when TensorFlow is loaded:
            TensorFlow and OR-Tools bundle different builds of abseil/protobuf, and once TensorFlow
            is imported CP-SAT crashes the process on real models).
    """

    name: ClassVar[str] = "ilp"
    time_limit: float = 60.0
    workers: int = 8
    resolution: float = 1e6
    fifo_limit: int = 60_000
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
        algo, warm, warm_sequence, warm_makespan = warm_start(problem, ctx, heuristics)
        warm_device = np.asarray(warm.device, dtype=np.int64)
        transfers = _Transfers(problem)
        remaining = self.time_limit - (time.perf_counter() - began)
        # The strictest memory rule the warm start satisfies (so the model is never infeasible for
        # memory alone): every node's persistent + activation bytes, else persistent bytes only, else none.
        if _fits_memory(problem, warm_device):
            memory_rule, memory = "activations", problem.memory
        elif _fits_memory(problem, warm_device, problem.persistent):
            memory_rule, memory = "persistent", problem.persistent
        else:
            memory_rule, memory = "none", None
        settings = SolverSettings(remaining, ctx.seed, self.workers, self.resolution, self.fifo_limit)
        args = (problem, transfers, memory, warm_device.tolist(), warm_sequence, settings)
        isolate = self.isolate == "yes" or (self.isolate == "auto" and "tensorflow" in sys.modules)
        result = _solve_isolated(*args) if isolate else solve(*args)
        unit = float(result["unit"])  # type: ignore[arg-type]
        stats: dict[str, Stat] = {
            "formulation": FORMULATION,
            "warm-start": algo,
            "warm-start-makespan-s": warm_makespan,
            "time-unit-s": unit,
            "fifo": int(bool(result["fifo"])),
            "transfer-units": len(transfers.producer),
            "hint-objective-s": float(result["hint"]) * unit,  # type: ignore[arg-type]
            "isolated": int(isolate),
            "memory-constraint": memory_rule,
            **heuristics,
        }
        if result["status"] == "infeasible":
            raise PassError("place{algo=ilp}: no placement satisfies the memory, affinity and colocation constraints")
        if result["status"] == "unknown":
            stats.update({"status": "unknown", "result": "warm-start"})
            return Placement(warm_device, warm.start, stats)
        objective = float(result["objective"])  # type: ignore[arg-type]
        bound = float(result["bound"])  # type: ignore[arg-type]
        device = np.asarray(result["device"], dtype=np.int64)
        start = np.asarray(result["start"], dtype=np.float64) * unit
        simulated = ctx.simulator()(problem, device, start).makespan
        stats.update(
            {
                "status": str(result["status"]),
                "objective-s": objective * unit,
                "bound-s": bound * unit,
                "gap": 0.0 if objective <= 0 else max(0.0, (objective - bound) / objective),
                "solver-wall-s": float(result["wall"]),  # type: ignore[arg-type]
                "ilp-simulated-makespan-s": simulated,
                "result": "ilp",
            }
        )
        if simulated > warm_makespan:
            stats["result"] = "warm-start"
            return Placement(warm_device, warm.start, stats)
        return Placement(device, start, stats)
