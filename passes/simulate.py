"""``simulate``: run the placed, ordered graph through the simulator (see graphir/simulator.py).

Requires ``cost``, ``device`` and ``order``; provides ``start`` and ``finish``. Options choose the
congestion rule of the link model (``congestion=pair|port|task|topology``, :mod:`graphir.links`)
and the execution semantics (``order=recorded|enforced|dynamic``, :mod:`graphir.simulator`; by
default the order the placement recorded, :data:`graphir.simulator.ORDER_METADATA`). Statistics:
``makespan-s``, ``busy-s.<device>``, ``peak-mem.<device>``, ``bytes.<src>-><dst>``, ``transfers``
and ``oom`` (the comma-separated out-of-memory devices, empty when none).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.simulator import simulate


@register_pass
@dataclasses.dataclass(frozen=True)
class Simulate(Pass):
    """Simulate the schedule and annotate start/finish times.

    Options:
        fail_on_oom: make an out-of-memory device an error instead of a statistic.
        congestion: which transfers contend: ``pair`` (one FIFO channel per ordered device pair,
            Pesto/FastT), ``port`` (a device sends one and receives one transfer at a time, Moirai
            eq. 8), ``task`` (a transfer occupies both devices' compute, Celeritas §6.1) or
            ``topology`` (the default: ports plus every wire of the cluster's physical route; the
            papers' own rules stay available to reproduce them as published).
        order: ``enforced`` (each device runs its nodes in their ``order``, as the TF lowering's
            control dependencies enforce), ``dynamic`` (TensorFlow's executor: on a CPU the node
            made ready most recently by the device's own nodes, on a GPU the first-ready node) or
            ``recorded`` (the default: the one the placement recorded, which the TF lowering follows
            too; ``enforced`` when none is recorded).
    """

    name: ClassVar[str] = "simulate"
    requires: ClassVar[tuple[str, ...]] = ("cost", "device", "order")
    provides: ClassVar[tuple[str, ...]] = ("start", "finish")
    fail_on_oom: bool = False
    congestion: Literal["pair", "port", "task", "topology"] = "topology"
    order: Literal["recorded", "enforced", "dynamic"] = "recorded"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Simulate, write ``start``/``finish`` on every node, and report the statistics."""
        result = simulate(module, self.congestion, self.order)
        index = module.graph.index()
        for node, begin, end in zip(index.nodes, result.start.tolist(), result.finish.tolist(), strict=True):
            node.start = begin
            node.finish = end
        oom = result.oom_devices
        if oom and self.fail_on_oom:
            details = ", ".join(
                f"{d} needs {int(result.peak_memory[k])} B of {int(result.memory_limit[k])} B"
                for k, d in enumerate(result.device_names)
                if d in oom
            )
            raise PassError(f"out of memory: {details}")
        stats: dict[str, Stat] = {"makespan-s": result.makespan, "transfers": result.transfers, "oom": ",".join(oom)}
        for k, name in enumerate(result.device_names):
            stats[f"busy-s.{name}"] = float(result.busy[k])
            stats[f"peak-mem.{name}"] = int(result.peak_memory[k])
        for (src, dst), moved in result.link_bytes.items():
            stats[f"bytes.{src}->{dst}"] = moved
        summary = f"makespan {result.makespan:.6g} s, {result.transfers} transfers, OOM: {','.join(oom) or 'none'}"
        ctx.log(f"simulate: {summary}")
        return PassResult(True, stats)
