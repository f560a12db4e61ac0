"""``place{algo=...}``: assign every node a device and an execution order.

Requires ``cost``; provides ``device`` and ``order``. Placers work on the quotient graph when
``group`` annotations exist (see :class:`graphir.passes.place.problem.PlacementProblem`) and the result is
expanded to member nodes.

The placer API (:class:`Placer`, :data:`PLACERS`, :class:`Placement`) is documented in :mod:`.base`.

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
