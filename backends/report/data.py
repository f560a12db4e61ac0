"""The data behind a report: one simulation of the module plus its transfers, as plain values.

:func:`build_report` runs :func:`graphir.simulator.simulate` (the one ruler: the report never
trusts stale ``start``/``finish`` annotations) and turns the simulator's transfer log into rows
for the link lanes of the timeline.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, cast

import numpy as np

from graphir.emit import PipelineRun
from graphir.errors import BackendError, GraphIRError
from graphir.index import GraphIndex
from graphir.ir import Module
from graphir.pipeline import parse_pipeline
from graphir.simulator import SimResult, simulate

DEFAULT_RULES = ("topology", "recorded")
"""``(congestion, order)`` of a report whose pipeline ran no ``simulate`` pass: :func:`simulate`'s defaults."""


@dataclasses.dataclass(frozen=True)
class Transfer:
    """One tensor sent over a channel.

    Attributes:
        value: the value's name.
        producer: the producing node's position in the graph index.
        src, dst: device names of the channel.
        nbytes: bytes moved.
        start, finish: seconds on the channel.
    """

    value: str
    producer: int
    src: str
    dst: str
    nbytes: int
    start: float
    finish: float


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """Per-device numbers of a report (seconds, bytes)."""

    name: str
    kind: str
    nodes: int
    busy: float
    utilisation: float
    peak_memory: int
    persistent: int
    memory_limit: int
    oom: bool


@dataclasses.dataclass(frozen=True)
class LinkRow:
    """Per-channel numbers of a report, for channels that moved data."""

    src: str
    dst: str
    transfers: int
    nbytes: int
    busy: float
    utilisation: float


@dataclasses.dataclass(frozen=True)
class Report:
    """Everything the table, JSON, timeline and DOT show.

    Attributes:
        module: the module reported on.
        index: its graph index (node ``i`` below is ``index.nodes[i]``).
        sim: the simulation result.
        device: device number (cluster order) per node.
        transfers: every transfer, in channel-queue order per channel.
        devices: one row per cluster device.
        links: one row per channel that moved data, sorted by (src, dst).
    """

    module: Module
    index: GraphIndex
    sim: SimResult
    device: np.ndarray
    transfers: tuple[Transfer, ...]
    devices: tuple[DeviceRow, ...]
    links: tuple[LinkRow, ...]

    @property
    def makespan(self) -> float:
        """The simulated makespan in seconds."""
        return self.sim.makespan


class _SimulateOptions(Protocol):
    """The options of the ``simulate`` pass this module reads."""

    congestion: str
    order: str


def simulate_rules(run: PipelineRun | None) -> tuple[str, str]:
    """``(congestion, order)`` of the last ``simulate`` pass ``run`` executed; :data:`DEFAULT_RULES` without one.

    The pass's spec text is parsed back into the pass (its options with their defaults), so an option
    left out reads as the pass's default, exactly as the pass ran.
    """
    for spec, _auto, _stats in reversed(run.passes if run is not None else ()):
        if spec.split("{", 1)[0].strip() != "simulate":
            continue
        (simulate_pass,) = parse_pipeline(spec)
        options = cast(_SimulateOptions, simulate_pass)  # the Simulate pass (backends import no pass)
        return str(options.congestion), str(options.order)
    return DEFAULT_RULES


def build_report(module: Module, congestion: str = DEFAULT_RULES[0], order: str = DEFAULT_RULES[1]) -> Report:
    """Simulate ``module`` under ``congestion`` and ``order`` and collect the report's numbers.

    Args:
        module: a placed and ordered module.
        congestion: the congestion rule (:data:`graphir.links.CONGESTION_RULES`).
        order: ``enforced``, ``dynamic`` or ``recorded`` (:func:`graphir.simulator.simulate`).

    Raises:
        BackendError: the module cannot be simulated (not placed or ordered, missing costs).
    """
    try:
        sim = simulate(module, congestion, order)
    except GraphIRError as exc:
        raise BackendError(f"--emit=report: cannot simulate the module: {exc.message}") from None
    index = module.graph.index()
    names = sim.device_names
    position = {name: k for k, name in enumerate(names)}
    device = np.fromiter((position[node.device or ""] for node in index.nodes), dtype=np.int64, count=index.num_nodes)
    transfers = transfers_of(index, sim, module.cluster.device_names)
    makespan = sim.makespan
    counts = np.bincount(device, minlength=len(names))
    devices = tuple(
        DeviceRow(
            name=name,
            kind=module.cluster.devices[k].kind,
            nodes=int(counts[k]),
            busy=float(sim.busy[k]),
            utilisation=float(sim.busy[k]) / makespan if makespan > 0 else 0.0,
            peak_memory=int(sim.peak_memory[k]),
            persistent=int(sim.persistent[k]),
            memory_limit=int(sim.memory_limit[k]),
            oom=bool(sim.peak_memory[k] > sim.memory_limit[k]),
        )
        for k, name in enumerate(names)
    )
    per_link: dict[tuple[str, str], int] = {}
    for transfer in transfers:
        per_link[(transfer.src, transfer.dst)] = per_link.get((transfer.src, transfer.dst), 0) + 1
    links = tuple(
        LinkRow(
            src=src,
            dst=dst,
            transfers=per_link.get((src, dst), 0),
            nbytes=moved,
            busy=sim.link_busy[(src, dst)],
            utilisation=sim.link_busy[(src, dst)] / makespan if makespan > 0 else 0.0,
        )
        for (src, dst), moved in sorted(sim.link_bytes.items())
    )
    return Report(module, index, sim, device, tuple(transfers), devices, links)


def transfers_of(index: GraphIndex, sim: SimResult, names: tuple[str, ...]) -> list[Transfer]:
    """The simulator's transfers as report rows, per source device in the order they were queued."""
    return [
        Transfer(
            index.values[x].name,
            int(index.value_producer[x]),
            names[src],
            names[dst],
            int(index.value_bytes[x]),
            begin,
            end,
        )
        for x, src, dst, begin, end in sim.transfer_log
    ]
