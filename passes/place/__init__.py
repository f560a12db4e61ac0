"""``place{algo=...}``: assign every node a device and an execution order.

Requires ``cost``; provides ``device`` and ``order``. Placers work on the quotient graph when
``group`` annotations exist (see :class:`graphir.passes.place.problem.PlacementProblem`) and the result is
expanded to member nodes. Each algorithm lives in its own module and registers itself in
:data:`PLACERS` with :func:`register_placer`; a placer that only assigns devices leaves the order to
:func:`graphir.passes.place.problem.list_schedule`.

Algorithms: ``single`` (everything on one device, ``device=NAME`` or the first), ``file`` (read
``{node_id: device}`` JSON from ``path``), and the papers' placers in ``passes/place_*.py``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import numpy as np

from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat, register_pass
from graphir.passes.place.problem import PlacementProblem, list_schedule, write_placement


@dataclasses.dataclass
class Placement:
    """A placer's answer for the coarse graph.

    Attributes:
        device: device number per coarse node.
        start: start time per coarse node when the placer schedules, else ``None``.
        stats: extra statistics to report.
        problem: the problem this placement answers when the placer rewrote the module (os-dpos
            splits operations), else ``None``: the problem the placer was given.
    """

    device: np.ndarray
    start: np.ndarray | None = None
    stats: dict[str, Stat] = dataclasses.field(default_factory=dict)
    problem: PlacementProblem | None = None


PlacerFn = Callable[[PlacementProblem, "Place", Module], Placement]
PLACERS: dict[str, PlacerFn] = {}


def register_placer(name: str) -> Callable[[PlacerFn], PlacerFn]:
    """Register ``fn(problem, options, module) -> Placement`` as ``place{algo=name}``."""

    def decorate(fn: PlacerFn) -> PlacerFn:
        PLACERS[name] = fn
        return fn

    return decorate


@register_pass
@dataclasses.dataclass(frozen=True)
class Place(Pass):
    """Place and order the graph with the chosen algorithm.

    Options:
        algo: the placer, a name from the placer registry (``register_placer``; listed in
            ``docs/passes.md``).
        path: placement JSON for ``algo=file``.
        device: target device for ``algo=single`` (default: the cluster's first).
        time_limit: seconds for placers that search (ILP).
    """

    name: ClassVar[str] = "place"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("device", "order")
    algo: str = "adjusting"
    path: str = ""
    device: str = ""
    time_limit: float = 60.0

    def __post_init__(self) -> None:
        """Reject an unknown algorithm when the pipeline is parsed."""
        if self.algo not in PLACERS:
            raise ValueError(f"unknown placement algorithm '{self.algo}' (known: {', '.join(sorted(PLACERS))})")

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Build the coarse problem, run the placer, schedule if needed, write annotations."""
        started = time.perf_counter()
        problem = PlacementProblem.from_module(module)
        ctx.log(f"place: {self.algo} on {problem.num_nodes} coarse nodes, {problem.num_devices} devices")
        placement = PLACERS[self.algo](problem, self, module)
        if placement.problem is not None:  # the placer rewrote the graph: its answer is for the new one
            problem = placement.problem
        device = np.asarray(placement.device, dtype=np.int64)
        _check_constraints(problem, device)
        start = placement.start if placement.start is not None else list_schedule(problem, device)[0]
        write_placement(module, problem, device, start)
        seconds = time.perf_counter() - started
        stats: dict[str, Stat] = {
            "algo": self.algo,
            "coarse-nodes": problem.num_nodes,
            "placement-wall-s": seconds,
        }
        used = np.bincount(device, minlength=problem.num_devices)
        for k, name in enumerate(problem.device_names):
            stats[f"nodes.{name}"] = int(used[k])
        stats.update(placement.stats)
        return PassResult(True, stats)


def _check_constraints(problem: PlacementProblem, device: np.ndarray) -> None:
    """Every placer must honour affinity and colocation: a violation is a placer bug."""
    if device.shape != (problem.num_nodes,) or (device < 0).any() or (device >= problem.num_devices).any():
        raise PassError("the placer returned an invalid device assignment")
    if not problem.allowed[np.arange(problem.num_nodes), device].all():
        raise PassError("the placer put a node on a device its affinity excludes")
    classes = problem.colocation >= 0
    if classes.any():
        for root in np.unique(problem.colocation[classes]).tolist():
            if len(np.unique(device[problem.colocation == root])) > 1:
                raise PassError("the placer split a colocation class over several devices")


def first_allowed(problem: PlacementProblem, preferred: int) -> np.ndarray:
    """Per coarse node: ``preferred`` where allowed, else the first allowed device."""
    device = np.full(problem.num_nodes, preferred, dtype=np.int64)
    bad = ~problem.allowed[:, preferred]
    if bad.any():
        device[bad] = np.argmax(problem.allowed[bad], axis=1)
    return device


@register_placer("single")
def place_single(problem: PlacementProblem, options: Place, module: Module) -> Placement:
    """Everything on one device (nodes its affinity forbids go to their first allowed device).

    Memory is not checked here: ``simulate`` reports the OOM, which is the point of this baseline.
    """
    target = 0
    if options.device:
        if options.device not in problem.device_names:
            raise PassError(f"device '{options.device}' is not in the cluster ({', '.join(problem.device_names)})")
        target = problem.device_names.index(options.device)
    return Placement(first_allowed(problem, target))


@register_placer("file")
def place_from_file(problem: PlacementProblem, options: Place, module: Module) -> Placement:
    """Read ``{node_id: device_name}`` (the ``--emit=placement`` format) and schedule it.

    Every node must be listed; members of one group must share a device.
    """
    if not options.path:
        raise PassError("place{algo=file} needs path=FILE.json")
    try:
        mapping = json.loads(Path(options.path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PassError(f"cannot read placement '{options.path}': {exc}") from None
    if not isinstance(mapping, dict):
        raise PassError(f"placement '{options.path}' must be a JSON object {{node_id: device}}")
    index = module.graph.index()
    names = problem.device_names
    device = np.full(problem.num_nodes, -1, dtype=np.int64)
    for u, node in enumerate(index.nodes):
        name = mapping.get(node.name)
        if name is None:
            raise PassError(f"placement '{options.path}' has no device for node '{node.name}'")
        if name not in names:
            raise PassError(f"placement '{options.path}': node '{node.name}' is on unknown device '{name}'")
        g = int(problem.node_group[u])
        d = names.index(name)
        if device[g] >= 0 and device[g] != d:
            raise PassError(f"placement '{options.path}' splits the group of node '{node.name}' over two devices")
        device[g] = d
    return Placement(device)
