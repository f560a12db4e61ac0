"""``place{algo=...}``: assign every node a device and an execution order.

Requires ``cost``; provides ``device`` and ``order``. Placers work on the quotient graph when
``group`` annotations exist (see :class:`graphir.passes.place.problem.PlacementProblem`) and the result is
expanded to member nodes.

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

Algorithms: ``single`` (everything on one device, ``device=NAME`` or the first), ``file`` (read
``{node_id: device}`` JSON from ``path``; both in :mod:`.basic`), and the papers' placers, one
module each in this package.

The pass, the placer API and the registry live in :mod:`graphir.passes.place.base` (re-exported
here); this package imports the placer modules, which register themselves there. ``auto`` (the
portfolio that runs the others by name) and ``stages`` are imported here; ``ilp``, ``os_dpos`` and
``pipeline`` by :mod:`graphir.passes`.
"""

from __future__ import annotations

from graphir.passes.place import auto, baechi, basic, celeritas, expert, fastt, heft, metis, stages
from graphir.passes.place.base import (
    DEFAULT_ALGO,
    NO_FIT_HINT,
    PLACERS,
    CandidateSimulator,
    Place,
    Placement,
    PlacementContext,
    PlacementHints,
    Placer,
    apply_placement,
    placement_context,
    register_placer,
)
from graphir.passes.place.basic import FromFile, Single, first_allowed

__all__ = [
    "DEFAULT_ALGO",
    "NO_FIT_HINT",
    "PLACERS",
    "CandidateSimulator",
    "FromFile",
    "Place",
    "Placement",
    "PlacementContext",
    "PlacementHints",
    "Placer",
    "Single",
    "apply_placement",
    "auto",
    "baechi",
    "basic",
    "celeritas",
    "expert",
    "fastt",
    "first_allowed",
    "heft",
    "metis",
    "placement_context",
    "register_placer",
    "stages",
]
