"""The CP-SAT model of ``place{algo=ilp}``: variables, constraints, replay and hint (see :mod:`.ilp`).

The formulation is described in :mod:`graphir.passes.place.ilp`; this module builds it. Two options
change it:

* ``congestion`` (:data:`graphir.links.CONGESTION_RULES`, the papers' rules; issue 14): a transfer
  ``s -> d`` occupies every resource of its route in the link model under that rule, and each
  resource gets a no-overlap: ``pair`` (one channel per ordered pair; Pesto's congestion
  constraints, the default), ``port`` (``s.out`` and ``d.in``: Moirai eq. (8), a device sends one
  and receives one transfer at a time), ``task`` (the compute of both devices: Celeritas §6.1, so
  the device's nodes and its transfers share one no-overlap) and ``topology`` (the ports and every
  wire of the physical path, with the path's own times; as in the simulator, only
  ``bytes / bandwidth`` holds them and the value arrives a latency later; a cluster's calibrated
  per-transfer CPU, which the simulator books on both ends' compute, is not modelled: the
  arrival includes it, the compute does not wait for it). The FIFO order literals tie a
  channel's order to the producers' device order under ``pair`` only; under the other rules the
  order on a shared resource is left free (stat ``fifo = 0``), a relaxation of the simulator's FIFO.
* memory: the paper rule (a linear sum per device) or the liveness rule
  (:mod:`graphir.passes.place.ilp_memory`, cumulative constraints).
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np

from graphir.extras import require
from graphir.passes.place.ilp_memory import LivenessMemory
from graphir.passes.place.problem import PlacementProblem

CpVar = Any
"""A CP-SAT model, variable, interval or linear expression (ortools, imported when a model is built),
or the constant 0 standing for a placement literal that cannot be true."""


class Schedule(TypedDict):
    """:meth:`IlpModel.replay`'s integer schedule: every variable's value for a placement and order."""

    start: list[int]
    end: list[int]
    arrival: dict[tuple[int, int], tuple[int, int]]  # (value, device) -> (send begin, arrival)
    device: list[int]


class Transfers:
    """The values that cross coarse-node boundaries, and the control dependencies between nodes.

    Attributes:
        values: the fine value number of each crossing value, increasing.
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
        self.values = np.asarray(values, dtype=np.int64)
        self.producer = [int(group[index.value_producer[v]]) for v in values]
        self.nbytes = [float(index.value_bytes[v]) for v in values]
        self.consumers = [sorted(by_value[v]) for v in values]
        self.of_node: list[list[int]] = [[] for _ in range(problem.num_nodes)]
        for k, g in enumerate(self.producer):
            self.of_node[g].append(k)
        pairs = zip(src[external & control].tolist(), dst[external & control].tolist(), strict=True)
        self.control = sorted({(g, h) for g, h in pairs if (g, h) not in data_pairs})


class IlpModel:
    """The CP-SAT model of one :class:`PlacementProblem` (see the module docstring)."""

    def __init__(
        self,
        problem: PlacementProblem,
        transfers: Transfers,
        memory: np.ndarray | None,
        resolution: float = 1e6,
        fifo_limit: int = 60_000,
        congestion: str = "pair",
        liveness: bool = False,
    ) -> None:
        """Build the model.

        Args:
            problem: the coarse problem.
            transfers: its crossing values.
            memory: bytes per coarse node summed per device against the capacity (the paper rule),
                or ``None`` (no such sum).
            resolution: integer steps at least in the horizon.
            fifo_limit: most FIFO constraints added.
            congestion: the congestion rule of the transfers' routes.
            liveness: add the liveness memory rule (:mod:`graphir.passes.place.ilp_memory`).
        """
        cp_model = require("ortools.sat.python.cp_model", "solvers", "place{algo=ilp}")

        self.problem = problem
        self.transfers = transfers
        n = problem.num_nodes
        num_devices = problem.num_devices
        self.devices = list(range(num_devices))
        links = problem.link_model(congestion)
        self.links = links
        self.congestion = congestion
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
        if links.holds_latency:  # the papers' rules: a transfer holds its route until it arrives
            self.occupancy = self.comm
        else:  # topology: only bytes / bandwidth holds the route, the latency is in flight
            self.occupancy = [
                [
                    [max(1, round(links.occupancy_time(b, s, d) / unit)) if s != d else 0 for d in self.devices]
                    for s in self.devices
                ]
                for b in transfers.nbytes
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
        x: list[list[CpVar]] = [[None] * num_devices for _ in range(n)]
        shared: dict[int, list[CpVar]] = {}
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
        device_intervals: list[list[CpVar]] = [[] for _ in self.devices]
        self.node_interval: list[dict[int, CpVar]] = [{} for _ in range(n)]
        for g in range(n):
            model.Add(
                self.end[g] == self.start[g] + sum(self.dur[g][d] * x[g][d] for d in self.devices if allowed[g][d])
            )
            for d in self.devices:
                if allowed[g][d]:
                    interval = model.NewOptionalIntervalVar(
                        self.start[g], self.dur[g][d], self.end[g], x[g][d], f"I{g}_{d}"
                    )
                    device_intervals[d].append(interval)
                    self.node_interval[g][d] = interval
        # Under ``task`` a device's compute is a resource its transfers occupy too: its no-overlap
        # waits for the transfers' intervals.
        compute = links.compute_resource
        resource_intervals: dict[int, list[CpVar]] = {}
        for d, intervals in enumerate(device_intervals):
            if compute[d] < 0:
                model.AddNoOverlap(intervals)
            else:
                resource_intervals[compute[d]] = intervals
        # Precedence on every coarse edge (same device: E[g]; across devices the transfer adds more).
        for g, h in zip(problem.edge_src.tolist(), problem.edge_dst.tolist(), strict=True):
            model.Add(self.start[h] >= self.end[g])
        for g, h in transfers.control:
            model.Add(self.start[h] >= self.end[g])
            for s in self.devices:
                for d in self.devices:
                    if s != d and allowed[g][s] and allowed[h][d]:
                        model.Add(self.start[h] >= self.end[g] + self.latency[s][d]).OnlyEnforceIf([x[g][s], x[h][d]])
        # Transfers: one per (crossing value, destination device), on every resource of its route.
        routes = links.routes
        self.need: list[dict[int, CpVar]] = []
        self.on_channel: list[dict[tuple[int, int], CpVar]] = []
        self.t_start: list[dict[int, CpVar]] = []
        self.t_end: list[dict[int, CpVar]] = []
        for k, g in enumerate(transfers.producer):
            consumers = transfers.consumers[k]
            need: dict[int, CpVar] = {}
            present: dict[tuple[int, int], CpVar] = {}
            ts: dict[int, CpVar] = {}
            te: dict[int, CpVar] = {}
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
                    if links.holds_latency:
                        interval = model.NewOptionalIntervalVar(ts[d], self.comm[k][s][d], te[d], p, f"T{k}_{s}_{d}")
                    else:  # the route is held for the occupancy; the value arrives a latency later
                        held = self.occupancy[k][s][d]
                        interval = model.NewOptionalIntervalVar(ts[d], held, ts[d] + held, p, f"T{k}_{s}_{d}")
                        model.Add(te[d] >= ts[d] + self.comm[k][s][d]).OnlyEnforceIf(p)
                    for r in routes[s][d]:
                        resource_intervals.setdefault(r, []).append(interval)
                for h in consumers:
                    if allowed[h][d]:
                        model.Add(self.start[h] >= te[d]).OnlyEnforceIf([x[h][d], nd])
            self.need.append(need)
            self.on_channel.append(present)
            self.t_start.append(ts)
            self.t_end.append(te)
        for intervals in resource_intervals.values():
            model.AddNoOverlap(intervals)
        self.order: dict[tuple[int, int], CpVar] = {}
        self.fifo = congestion == "pair" and self._add_fifo(model, fifo_limit)
        self.makespan = model.NewIntVar(0, horizon, "M")
        for g in range(n):
            if problem.succ_offsets[g] == problem.succ_offsets[g + 1]:
                model.Add(self.makespan >= self.end[g])
        model.Minimize(self.makespan)
        self.memory_model = None
        if liveness:
            self.memory_model = LivenessMemory(self)
        # Memory capacity, the paper rule (``memory`` is None: no such constraint).
        if memory is None:
            return
        units = [round(float(m)) for m in memory]
        for d in self.devices:
            terms = [units[g] * x[g][d] for g in range(n) if allowed[g][d] and units[g] > 0]
            if terms:
                model.Add(sum(terms) <= int(problem.capacity[d]))

    def _add_fifo(self, model: CpVar, limit: int) -> bool:
        """Channel order = producer order on the shared source device (see the module docstring)."""
        transfers = self.transfers
        producers = [g for g in range(self.problem.num_nodes) if transfers.of_node[g]]
        load: dict[tuple[int, int], int] = {}
        for present in self.on_channel:
            for channel in present:
                load[channel] = load.get(channel, 0) + 1
        if sum(c * (c - 1) for c in load.values()) > limit:
            return False
        ancestor_bits = ancestors(self.problem)
        allowed = self.problem.allowed.tolist()
        for i, g in enumerate(producers):
            for h in producers[i + 1 :]:
                shared = [s for s in self.devices if allowed[g][s] and allowed[h][s]]
                if not shared:
                    continue
                o = None  # g before h: forced when g is an ancestor of h
                if not ancestor_bits[h] >> g & 1:
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

    def replay(self, device: list[int], sequence: list[int]) -> Schedule:
        """The model's own schedule for a placement and a global node order (an exact integer replay).

        Nodes run on their device in ``sequence`` order as early as possible; transfers are queued
        FIFO on every resource of their route when the producer finishes (under ``task`` a device's
        compute is such a resource). Returns every variable's value.
        """
        n = self.problem.num_nodes
        transfers = self.transfers
        start = [0] * n
        end = [0] * n
        device_free = [0] * len(self.devices)
        resource_free = [0] * self.links.num_resources  # FIFO per resource of the routes
        routes = self.links.routes
        compute = self.links.compute_resource
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
            if compute[d] >= 0:  # task: the device's transfers occupy its compute too
                t = max(t, resource_free[compute[d]])
            start[h] = t
            end[h] = t + self.dur[h][d]
            device_free[d] = end[h]
            if compute[d] >= 0:
                resource_free[compute[d]] = end[h]
            ready[h] = end[h]
            for k in transfers.of_node[h]:
                dests = sorted({device[c] for c in transfers.consumers[k]} - {d})
                for dd in dests:
                    route = routes[d][dd]
                    begin = max(end[h], max(resource_free[r] for r in route))
                    finish = begin + self.comm[k][d][dd]
                    for r in route:
                        resource_free[r] = begin + self.occupancy[k][d][dd]
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
        if self.memory_model is not None:
            self.memory_model.hint(schedule)
        makespan = max(end, default=0)
        model.AddHint(self.makespan, makespan)
        return makespan


def ancestors(problem: PlacementProblem) -> list[int]:
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
