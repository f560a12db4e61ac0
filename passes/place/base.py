"""The ``place`` pass and the one placer API: :class:`Placer`, its registry :data:`PLACERS`, :class:`Placement`.

``place{algo=...}`` assigns every node a device and an execution order. Requires ``cost``;
provides ``device`` and ``order``. Placers work on the quotient graph when ``group`` annotations
exist (see :class:`graphir.passes.place.problem.PlacementProblem`) and the result is expanded to
member nodes.

**One placer API.** A placer is a frozen dataclass derived from :class:`Placer`, registered with
:func:`register_placer` in :data:`PLACERS`, with a ``name``, typed option fields (the same types as
pass options) and a docstring (first line: the summary ``--list-passes`` shows; ``Options:``: one
entry per field). ``place{algo=ilp time-limit=30 workers=2}`` resolves ``algo`` first and then
accepts only that placer's options, at parse time. Its method ``place(problem, ctx)`` is pure: it
gets the :class:`~graphir.passes.place.problem.PlacementProblem` and a :class:`PlacementContext`
(seed, progress log, the simulator for candidate placements) and returns a :class:`Placement`
(device and, when it schedules, start time per coarse node, plus statistics); it never sees the
Module, so it can neither rewrite the graph nor write annotations. A placer that needs a per-node
fact the problem does not hold declares :meth:`Placer.device_hints`, a pre-step on the Module
whose answer reaches it as ``problem.preferred``. Graph rewrites are passes (``os-dpos``).
A placer that only assigns devices leaves the order to
:func:`graphir.passes.place.problem.list_schedule`.

This module sits below the placers: each placer module imports its API from here, and the
package (:mod:`graphir.passes.place`) imports the placer modules, so :data:`PLACERS` is filled
from above and no placer imports the package back.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import ClassVar, Literal, Protocol, TypeVar

import numpy as np

from graphir.budget import check_node_budgets
from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import (
    Algorithm,
    AlgorithmRegistry,
    Pass,
    PassContext,
    PassResult,
    Stat,
    register_algorithm,
    register_pass,
)
from graphir.passes.place.pairing import pair_gradients
from graphir.passes.place.problem import PlacementProblem, expand_placement, list_schedule, write_placement
from graphir.simulator import SimResult, record_order, simulate_placement

NO_FIT_HINT = (
    "place: no placement of '{name}' fits memory; a training step that does not fit one device may "
    "fit with data and pipeline parallelism: --passes=parallelize"
)
"""What ``place`` prints when ``auto``'s best answer is out of memory."""

DEFAULT_ALGO = "auto"
"""The placer ``place`` runs when no ``algo`` is given."""


@dataclasses.dataclass
class Placement:
    """A placer's answer for the coarse graph.

    Attributes:
        device: device number per coarse node.
        start: start time per coarse node when the placer schedules, else ``None``.
        stats: extra statistics to report.
        problem: the problem ``device`` and ``start`` refer to when it is not the one the placer
            was given: a finer one, with the given problem's fine graph and cluster (``auto``'s
            refinement splits coarse nodes: :func:`graphir.passes.place.refine_fine.fine_problem`);
            ``None``: the given problem.
    """

    device: np.ndarray
    start: np.ndarray | None = None
    stats: dict[str, Stat] = dataclasses.field(default_factory=dict)
    problem: PlacementProblem | None = None


@dataclasses.dataclass(frozen=True)
class PlacementHints:
    """What a placer computes on the Module before its problem is built (:meth:`Placer.hints`).

    Attributes:
        device: a preferred device name per fine node name; reaches the placer as
            ``problem.preferred`` (a coarse node prefers its first hinted member's device).
        order: an order key per fine node name; reaches the placer as ``problem.priority`` (a
            coarse node takes its members' smallest key).
        stats: statistics to report with the placement.
        execution_order: the order this placement runs under, when it is not the placer's
            :attr:`Placer.execution_order` (``enforced`` or ``dynamic``; None: the placer's).
    """

    device: Mapping[str, str] | None = None
    order: Mapping[str, float] | None = None
    stats: Mapping[str, Stat] | None = None
    execution_order: str | None = None


def _silent(message: str) -> None:
    """The default progress sink: drop the message."""


class CandidateSimulator(Protocol):
    """``simulate(problem, device, start, congestion=None)``: the simulator's verdict on a candidate placement.

    ``congestion`` names the link model's congestion rule (None: the simulator's default).
    """

    def __call__(
        self, problem: PlacementProblem, device: np.ndarray, start: np.ndarray, congestion: str | None = None
    ) -> SimResult:
        """Simulate ``device`` / ``start`` (per coarse node) of ``problem``."""
        ...


@dataclasses.dataclass(frozen=True)
class PlacementContext:
    """What a placer may use besides its problem and options.

    Attributes:
        seed: the pipeline seed (``graphir-opt --seed``); every randomised placer seeds from it.
        log: progress output (``--verbose``).
        simulate: the simulator on a candidate placement of the problem being placed (device and
            start per coarse node, expanded as ``place`` would write it); it only reads the Module
            (:func:`graphir.simulator.simulate_placement`). ``None`` outside the ``place`` pass.
    """

    seed: int = 0
    log: Callable[[str], None] = _silent
    simulate: CandidateSimulator | None = None

    def simulator(self) -> CandidateSimulator:
        """:attr:`simulate`, or a :class:`PassError` when this context has none."""
        if self.simulate is None:
            raise PassError("this placer needs the simulator: run it through the 'place' pass")
        return self.simulate


@dataclasses.dataclass(frozen=True)
class Placer(Algorithm):
    """Base of the placers of ``place{algo=...}`` (frozen dataclasses; fields are their options).

    ``execution_order`` is the order the placer's placements run under, recorded on the module by
    ``place`` (:func:`graphir.simulator.record_order`): ``enforced`` (the per-device order, with
    control dependencies in the TF lowering, as Pesto and FastT run) or ``dynamic`` (TensorFlow's
    executor, as Baechi and Celeritas run). The simulator and the lowering follow the record.
    """

    execution_order: ClassVar[str] = "enforced"
    uses_training: ClassVar[bool] = False
    """Whether the placer reads ``problem.training`` (``place`` then finds the training structure)."""

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """Place (and optionally schedule) the coarse graph of ``problem``."""
        raise NotImplementedError

    def device_hints(self, module: Module) -> Mapping[str, str] | None:
        """A preferred device name per fine node name, computed by ``place`` before building the problem.

        The answer reaches :meth:`place` as ``problem.preferred``. Default: no hints. Only a
        placer whose rule depends on the graph's meaning (node names, op types) beyond the problem's
        arrays overrides this; it must not change the Module.
        """
        return None

    def hints(self, module: Module) -> PlacementHints:
        """Everything the placer computes on the Module before ``place`` builds the problem.

        Default: :meth:`device_hints` alone. A placer whose order depends on the graph's meaning
        (``pipeline``: the schedule's passes) overrides this to give order keys as well.
        """
        return PlacementHints(device=self.device_hints(module))


PLACERS: dict[str, type[Placer]] = {}
"""Every placer by ``algo`` name."""


@register_pass
@dataclasses.dataclass(frozen=True)
class Place(Pass):
    """Place and order the graph with the chosen algorithm.

    Options:
        algo: the placer, a name from the placer registry (``register_placer``); each placer has its
            own options, listed with it.
        gradients: on a training graph (:mod:`graphir.passes.training`), ``colocate`` keeps every
            gradient, update and variable with its forward op, for any placer (colocation classes,
            :mod:`graphir.passes.place.pairing`); ``free`` leaves them to the placer and hides the
            training structure from it; ``auto``: the placer's own choice (``auto`` pairs and adds
            the stage placer on training graphs, ``stages`` keeps layers whole, the others are free).
    """

    name: ClassVar[str] = "place"
    requires: ClassVar[tuple[str, ...]] = ("cost",)
    provides: ClassVar[tuple[str, ...]] = ("device", "order")
    algorithms: ClassVar[AlgorithmRegistry | None] = PLACERS
    algorithm_selector: ClassVar[str] = "algo"
    algorithm_field: ClassVar[str] = "placer"
    algorithm_kind: ClassVar[str] = "placement algorithm"
    algo: str = DEFAULT_ALGO
    placer: Placer | None = None
    gradients: Literal["auto", "free", "colocate"] = "auto"

    def __post_init__(self) -> None:
        """Reject an unknown algorithm when the pipeline is parsed; default the placer's options."""
        self.bind_algorithm()

    @classmethod
    def of(cls, algo: str, **options: object) -> Place:
        """``place{algo=ALGO key=value ...}`` from Python: ``Place.of("ilp", time_limit=5.0)``."""
        if algo not in PLACERS:
            raise ValueError(cls.unknown_algorithm(algo))
        return cls(algo, PLACERS[algo](**options))

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Build the coarse problem, run the placer, schedule if needed, write annotations."""
        placer = self.placer
        assert placer is not None
        started = time.perf_counter()
        training = self.gradients == "colocate" or (placer.uses_training and self.gradients == "auto")
        hints = placer.hints(module)
        # sizes checked here first
        problem = PlacementProblem.from_module(module, hints.device, hints.order, training=training)
        check_node_budgets(module)  # a node larger than every device: one line, unless --allow-oom
        pairs: dict[str, int] = {}
        if self.gradients == "colocate":
            problem, pairs = pair_gradients(problem)
        ctx.log(f"place: {self.algo} on {problem.num_nodes} coarse nodes, {problem.num_devices} devices")
        placement = placer.place(problem, placement_context(module, ctx))
        if hints.stats:
            placement.stats = {**hints.stats, **placement.stats}
        stats = apply_placement(module, problem, placement, self.algo, started, hints.execution_order)
        stats.update({f"gradients.{key}": value for key, value in pairs.items()})
        if stats.get("auto.fits") is False:
            print(NO_FIT_HINT.format(name=module.name), file=ctx.log_stream)
        return PassResult(True, stats)


def placement_context(module: Module, ctx: PassContext) -> PlacementContext:
    """The :class:`PlacementContext` of a pass run: the pipeline seed, its log, a simulator of ``module``.

    A candidate is expanded as ``place`` would write it (:func:`expand_placement`) and simulated
    from arrays (:func:`graphir.simulator.simulate_placement`): the Module is only read.
    """

    def simulate_candidate(
        problem: PlacementProblem, device: np.ndarray, start: np.ndarray, congestion: str | None = None
    ) -> SimResult:
        fine_device, position = expand_placement(problem, np.asarray(device, dtype=np.int64), np.asarray(start))
        if congestion is None:
            return simulate_placement(module, fine_device, position)
        return simulate_placement(module, fine_device, position, congestion)

    return PlacementContext(seed=ctx.seed, log=ctx.log, simulate=simulate_candidate)


def apply_placement(
    module: Module,
    problem: PlacementProblem,
    placement: Placement,
    algo: str,
    started: float,
    order: str | None = None,
) -> dict[str, Stat]:
    """Check a placer's answer, schedule it when it has no start times, write it; return the statistics.

    ``order`` is the execution order to record (None: the placer's :attr:`Placer.execution_order`).

    Raises:
        PassError: the answer is malformed or violates affinity or colocation (a placer bug).
    """
    coarse_nodes = problem.num_nodes
    if placement.problem is not None:  # the answer is for a finer problem of the same fine graph
        assert len(placement.problem.node_group) == len(problem.node_group)
        problem = placement.problem
    device = np.asarray(placement.device, dtype=np.int64)
    _check_constraints(problem, device)
    start = placement.start if placement.start is not None else list_schedule(problem, device)[0]
    write_placement(module, problem, device, start)
    record_order(module, order or (PLACERS[algo].execution_order if algo in PLACERS else "enforced"))
    seconds = time.perf_counter() - started
    stats: dict[str, Stat] = {
        "algo": algo,
        "coarse-nodes": coarse_nodes,
        "placement-wall-s": seconds,
    }
    used = np.bincount(device, minlength=problem.num_devices)
    for k, name in enumerate(problem.device_names):
        stats[f"nodes.{name}"] = int(used[k])
    stats.update(placement.stats)
    return stats


_PlacerT = TypeVar("_PlacerT", bound=type[Placer])


def register_placer(cls: _PlacerT) -> _PlacerT:
    """Class decorator: make ``cls`` available as ``place{algo=cls.name}``.

    Raises:
        TypeError: no name, a name taken by another class, an unsupported option type, or an
            option named like one of ``place``'s own (``algo``).
    """
    register_algorithm(Place, cls)
    return cls


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
