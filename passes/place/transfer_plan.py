"""Planning transfers with the ruler's congestion: ``plan-congestion=none|pair|port|topology`` (issue 15 item 4).

The list schedulers (HEFT, FastT's DPOS, Celeritas's Order-Place and Adjusting; Baechi's m-ETF and
m-SCT) estimate when a node's inputs reach a device with the papers' congestion-free formula
``finish + latency + bytes / bandwidth`` per coarse edge (``none``, the default: the papers' rule).
Under the other rules they plan the transfers on the link model's routes (:class:`graphir.links.LinkModel` with that
congestion rule) the way the simulator runs them:

* the transfer unit is the simulator's: one transfer per (value, destination device); a value
  already sent to a device is there for every later consumer (no second transfer);
* a transfer occupies every resource of its route (``pair``: the channel ``a->b``; ``port``:
  ``a.out`` and ``b.in``, Moirai eq. 8; ``topology``: the ports and every wire of the physical
  path) from its start to its end; each resource has a *busy-until* time, and a new transfer
  starts when its producer finished and every resource of its route is free:
  ``begin = max(finish[p], max_{r in route} busy[r])``, ``end = begin + transfer_time``;
* the estimate for a candidate device books nothing; committing a node books the transfers of its
  inputs to its device (in the order of its incoming values), moving ``busy`` forward.

It is an estimate, not the simulator: a list scheduler books transfers in the order it places the
consumers, while the simulator serves each resource in the order the transfers are requested (the
producers' finish times), and a coarse node's values are sent when the whole coarse node finished.
``task`` (a transfer occupies both devices' compute) is not offered: the schedulers' device
timelines would have to hold transfers too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphir.passes.place.problem import PlacementProblem

IntSeq = Sequence[int] | np.ndarray
"""Device per node: a list, or the placer's int64 array."""
FloatSeq = Sequence[float] | np.ndarray
"""Finish time per node: a list, or the placer's float64 array."""

PLAN_CONGESTION = ("none", "pair", "port", "topology")
"""The planning rules; ``none`` is the papers' congestion-free estimate (the default)."""


def incoming_values(problem: PlacementProblem) -> list[list[tuple[int, int, float]]]:
    """Per coarse node, ``(value, producer coarse node, bytes)`` for every value it reads from another coarse node.

    Sorted by value number (the fine graph's numbering), one entry per value.
    """
    fine = problem.fine
    group = problem.node_group
    data = ~fine.edge_control
    values = fine.edge_value[data]
    dst = group[fine.edge_dst[data]]
    src = group[fine.value_producer[values]] if len(values) else values
    cross = dst != src
    pairs = sorted(set(zip(dst[cross].tolist(), values[cross].tolist(), src[cross].tolist(), strict=True)))
    out: list[list[tuple[int, int, float]]] = [[] for _ in range(problem.num_nodes)]
    value_bytes = fine.value_bytes.tolist()
    for v, x, p in pairs:
        out[v].append((x, p, float(value_bytes[x])))
    return out


class TransferPlan:
    """Busy-until per shared resource and the transfers booked so far (see the module docstring).

    Attributes:
        congestion: the planning rule (not ``none``).
        links: the link model under that rule (its routes and, for ``topology``, its times).
        busy: per resource, when the last booked transfer on it ends.
        sent: per ``(value, device)``, the booked transfer's ``(begin, end)``.
        version: bumped by every booking that adds a transfer (callers cache estimates per version).
        incoming: :func:`incoming_values` of the problem.
    """

    def __init__(self, problem: PlacementProblem, congestion: str) -> None:
        """An empty plan for ``problem`` under ``congestion`` (one of :data:`PLAN_CONGESTION` but ``none``)."""
        if congestion not in PLAN_CONGESTION or congestion == "none":
            raise ValueError(f"unknown planning rule '{congestion}': expected one of pair, port, topology")
        self.congestion = congestion
        self.links = problem.link_model(congestion)
        self.routes = self.links.routes
        self.busy = [0.0] * self.links.num_resources
        self.sent: dict[tuple[int, int], tuple[float, float]] = {}
        self.version = 0  # bumped by every booking that adds a transfer
        self.incoming = incoming_values(problem)
        self._pred_offsets: list[int] = problem.pred_offsets.tolist()
        self._pred: list[int] = problem.pred.tolist()
        self._devices = list(range(problem.num_devices))

    def _plan(self, v: int, d: int, device: IntSeq, finish: FloatSeq) -> list[tuple[int, float, float, int]]:
        """``(value, begin, end, source device)`` of every value ``v`` reads from another device, were it on ``d``.

        Booked transfers keep their times; new ones are estimated one after the other in value
        order, each after its producer finished and after the busy-until of its route's resources
        (including the new transfers estimated before it).
        """
        out: list[tuple[int, float, float, int]] = []
        pending: dict[int, float] = {}  # resource -> busy-until after the transfers estimated so far
        busy = self.busy
        for x, p, nbytes in self.incoming[v]:
            dp = device[p]
            if dp == d:
                continue
            booked = self.sent.get((x, d))
            if booked is not None:
                out.append((x, booked[0], booked[1], dp))
                continue
            route = self.routes[dp][d]
            begin = finish[p]
            for r in route:
                free = pending.get(r, busy[r])
                if free > begin:
                    begin = free
            end = begin + self.links.transfer_time(nbytes, dp, d)
            for r in route:
                pending[r] = end
            out.append((x, begin, end, dp))
        return out

    def data_ready(self, v: int, device: IntSeq, finish: FloatSeq) -> list[float]:
        """``pre_t(v, d)`` for every device: its predecessors finished and its inputs arrived there.

        A predecessor on another device with no value for ``v`` (a control edge) adds the link latency.
        """
        ready = [0.0] * len(self._devices)
        links = self.links
        pred = self._pred
        for k in range(self._pred_offsets[v], self._pred_offsets[v + 1]):
            p = pred[k]
            dp = device[p]
            t = finish[p]
            for d in self._devices:
                arrive = t if d == dp else t + links.latency_between(dp, d)
                if arrive > ready[d]:
                    ready[d] = arrive
        if self.incoming[v]:
            for d in self._devices:
                for _, _, end, _ in self._plan(v, d, device, finish):
                    if end > ready[d]:
                        ready[d] = end
        return ready

    def received(self, v: int, d: int, device: IntSeq, finish: FloatSeq) -> list[tuple[int, float, float]]:
        """``(value, begin, end)`` of every value ``v`` would receive on ``d`` (nothing is booked)."""
        return [(x, begin, end) for x, begin, end, _ in self._plan(v, d, device, finish)]

    def book(self, v: int, d: int, device: IntSeq, finish: FloatSeq) -> list[tuple[int, float, float]]:
        """Book the transfers ``v`` needs on ``d`` (busy-until moves forward); return them as :meth:`received`."""
        planned = self._plan(v, d, device, finish)
        busy = self.busy
        for x, begin, end, src in planned:
            if (x, d) in self.sent:
                continue
            self.sent[(x, d)] = (begin, end)
            self.version += 1
            for r in self.routes[src][d]:
                if end > busy[r]:
                    busy[r] = end
        return [(x, begin, end) for x, begin, end, _ in planned]
