"""The liveness memory rule of ``place{algo=ilp mem-model=liveness}``: cumulative constraints.

The simulator's accounting (:mod:`graphir.memory`) on the coarse graph, as the list schedulers'
constraint kernel states it (:class:`graphir.passes.place.constraints.CoarseScheduleMemory`), in
the CP-SAT model's integer time. Per device ``d`` one cumulative constraint
(``AddCumulative``) whose capacity is ``capacity[d] - Σ_g persistent[g]·x[g, d]`` (persistent
bytes for the whole step) and whose tasks are optional intervals:

* a coarse node's *own* bytes while it runs, ``[S[g], E[g])`` on its device (the node's interval):
  its largest member's temporaries plus the results that no other coarse node reads (used inside
  the node or by nobody);
* such a result that is a graph output, ``[S[g], H)`` (until the end of the step; ``H`` the horizon);
* a *crossing* value ``k`` (read by another coarse node) on its producer's device ``[S[g], L[k])``
  with ``L[k] >= E[g]``, ``L[k] >= E[h]`` for a consumer ``h`` on the same device, ``L[k] >= Te[k, d']``
  for every transfer of it (the producer's copy lives until its sends are done), ``L[k] = H`` for
  a graph output;
* a received copy of ``k`` on ``d``, present iff ``need[k, d]``: ``[Ts[k, d], R[k, d])`` with
  ``R >= Te[k, d]`` and ``R >= E[h]`` for a consumer ``h`` on ``d``.

``L`` and ``R`` are only bounded below; a solution can always lower them to their bounds, so the
rule is exactly "from the producer's start to the last consumer's finish, on every device holding
a copy". :meth:`LivenessMemory.peaks` evaluates the same rule on the model's replay of a
placement (the ILP uses it to pick the strictest memory rule its warm start satisfies).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from graphir.passes.place.ilp_model import CpVar, IlpModel, Schedule


class LivenessMemory:
    """The liveness rule's variables and constraints in one :class:`IlpModel` (see the module docstring).

    Attributes:
        own: per coarse node, bytes held while it runs.
        local_output: per coarse node, bytes of its non-crossing graph outputs (held until the end).
        persistent: per coarse node, persistent bytes.
        last: ``L[k]`` per crossing value.
        copy_end: ``R[k, d]`` per crossing value and destination device.
    """

    def __init__(self, ilp: IlpModel) -> None:
        """Add the cumulative constraints to ``ilp.model``."""
        problem = ilp.problem
        transfers = ilp.transfers
        model = ilp.model
        fine = problem.fine
        n = problem.num_nodes
        group = problem.node_group
        horizon = ilp.horizon
        self.ilp = ilp
        temporary = np.zeros(n, dtype=np.int64)
        if len(fine.temporary):
            np.maximum.at(temporary, group, np.asarray(fine.temporary, dtype=np.int64))
        crossing = np.zeros(len(fine.value_bytes), dtype=bool)
        crossing[transfers.values] = True
        value_bytes = np.asarray(fine.value_bytes, dtype=np.int64)
        producer = group[fine.value_producer] if len(fine.value_producer) else np.zeros(0, dtype=np.int64)
        outputs = np.asarray(fine.value_output, dtype=bool)
        inside = ~crossing & ~outputs
        self.own = (
            (temporary + np.bincount(producer[inside], weights=value_bytes[inside], minlength=n))
            .astype(np.int64)
            .tolist()
        )
        local_out = ~crossing & outputs
        self.local_output = (
            np.bincount(producer[local_out], weights=value_bytes[local_out], minlength=n).astype(np.int64).tolist()
        )
        self.persistent = [round(float(b)) for b in problem.persistent]
        self.is_output = outputs[transfers.values].tolist() if len(transfers.values) else []
        allowed = problem.allowed.tolist()
        x = ilp.x
        tasks: list[list[tuple[CpVar, int]]] = [[] for _ in ilp.devices]
        for g in range(n):
            for d, interval in ilp.node_interval[g].items():
                if self.own[g]:
                    tasks[d].append((interval, self.own[g]))
                if self.local_output[g]:
                    held = model.NewOptionalIntervalVar(
                        ilp.start[g], horizon - ilp.start[g], horizon, x[g][d], f"O{g}_{d}"
                    )
                    tasks[d].append((held, self.local_output[g]))
        self.last: list[CpVar] = []
        self.copy_end: list[dict[int, CpVar]] = []
        for k, g in enumerate(transfers.producer):
            nbytes = round(transfers.nbytes[k])
            last = model.NewIntVar(0, horizon, f"L{k}")
            model.Add(last >= ilp.end[g])
            if self.is_output[k]:
                model.Add(last == horizon)
            for d, nd in ilp.need[k].items():
                model.Add(last >= ilp.t_end[k][d]).OnlyEnforceIf(nd)
            for h in transfers.consumers[k]:
                for d in ilp.devices:
                    if allowed[g][d] and allowed[h][d]:
                        model.Add(last >= ilp.end[h]).OnlyEnforceIf([x[g][d], x[h][d]])
            size = model.NewIntVar(0, horizon, f"Hs{k}")  # interval sizes must be affine in one variable
            model.Add(size == last - ilp.start[g])
            for d in ilp.devices:
                if allowed[g][d]:
                    home = model.NewOptionalIntervalVar(ilp.start[g], size, last, x[g][d], f"H{k}_{d}")
                    tasks[d].append((home, nbytes))
            ends: dict[int, CpVar] = {}
            for d, nd in ilp.need[k].items():
                end = model.NewIntVar(0, horizon, f"R{k}_{d}")
                model.Add(end >= ilp.t_end[k][d])
                for h in transfers.consumers[k]:
                    if allowed[h][d]:
                        model.Add(end >= ilp.end[h]).OnlyEnforceIf(x[h][d])
                begin = ilp.t_start[k][d]
                size = model.NewIntVar(0, horizon, f"Cs{k}_{d}")
                model.Add(size == end - begin).OnlyEnforceIf(nd)
                copy = model.NewOptionalIntervalVar(begin, size, end, nd, f"C{k}_{d}")
                tasks[d].append((copy, nbytes))
                ends[d] = end
            self.last.append(last)
            self.copy_end.append(ends)
        for d, items in enumerate(tasks):
            held = [self.persistent[g] * x[g][d] for g in range(n) if allowed[g][d] and self.persistent[g]]
            free = model.NewIntVar(0, int(problem.capacity[d]), f"free{d}")  # a cumulative's capacity is affine
            model.Add(free == int(problem.capacity[d]) - sum(held))
            if items:
                model.AddCumulative([t for t, _ in items], [b for _, b in items], free)

    def lifetimes(self, schedule: Schedule) -> tuple[list[int], dict[tuple[int, int], int]]:
        """``L[k]`` and ``R[k, d]`` of a replayed schedule (:meth:`IlpModel.replay`) at their lower bounds."""
        ilp = self.ilp
        transfers = ilp.transfers
        end = schedule["end"]
        device = schedule["device"]
        arrival = schedule["arrival"]
        last = []
        copy_end: dict[tuple[int, int], int] = {}
        for k, g in enumerate(transfers.producer):
            home = device[g]
            value = ilp.horizon if self.is_output[k] else end[g]
            for h in transfers.consumers[k]:
                if device[h] == home:
                    value = max(value, end[h])
                else:
                    key = (k, device[h])
                    copy_end[key] = max(copy_end.get(key, arrival[key][1]), end[h])
            for d in ilp.need[k]:
                if (k, d) in arrival:
                    value = max(value, arrival[(k, d)][1])
            last.append(value)
        return last, copy_end

    def peaks(self, schedule: Schedule) -> list[int]:
        """Per device, the rule's peak bytes (persistent included) on a replayed schedule."""
        ilp = self.ilp
        transfers = ilp.transfers
        start = schedule["start"]
        end = schedule["end"]
        device = schedule["device"]
        arrival = schedule["arrival"]
        last, copy_end = self.lifetimes(schedule)
        events: list[list[tuple[int, int]]] = [[] for _ in ilp.devices]  # (time, +/- bytes)
        held = [0] * len(ilp.devices)

        def hold(d: int, begin: int, finish: int, nbytes: int) -> None:
            if nbytes and finish > begin:
                events[d] += [(begin, nbytes), (finish, -nbytes)]

        for g, d in enumerate(device):
            held[d] += self.persistent[g]
            hold(d, start[g], end[g], self.own[g])
            hold(d, start[g], ilp.horizon, self.local_output[g])
        for k, g in enumerate(transfers.producer):
            nbytes = round(transfers.nbytes[k])
            hold(device[g], start[g], last[k], nbytes)
        for (k, d), finish in copy_end.items():
            hold(d, arrival[(k, d)][0], finish, round(transfers.nbytes[k]))
        peaks = []
        for d, items in enumerate(events):
            level = best = 0
            for _, delta in sorted(items):  # at equal times frees (negative) come first
                level += delta
                best = max(best, level)
            peaks.append(held[d] + best)
        return peaks

    def hint(self, schedule: Schedule) -> None:
        """Hint ``L`` and ``R`` from a replayed schedule (the rest of the hint is :meth:`IlpModel.hint`'s)."""
        model = self.ilp.model
        last, copy_end = self.lifetimes(schedule)
        end = schedule["end"]
        device = schedule["device"]
        transfers = self.ilp.transfers
        for k, var in enumerate(self.last):
            model.AddHint(var, last[k])
            for d, end_var in self.copy_end[k].items():
                # No copy on d: R is unused, at its bounds (Te's hint and the consumers there).
                unused = max([end[transfers.producer[k]], *(end[h] for h in transfers.consumers[k] if device[h] == d)])
                model.AddHint(end_var, copy_end.get((k, d), unused))
