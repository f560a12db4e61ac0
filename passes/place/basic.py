"""The baseline placers that search nothing: ``single`` (one device) and ``file`` (a placement read from JSON)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import ClassVar

import numpy as np

from graphir.errors import PassError
from graphir.passes.place.base import Placement, PlacementContext, Placer, register_placer
from graphir.passes.place.problem import PlacementProblem, coarse_devices


def first_allowed(problem: PlacementProblem, preferred: int) -> np.ndarray:
    """Per coarse node: ``preferred`` where allowed, else the first allowed device."""
    device = np.full(problem.num_nodes, preferred, dtype=np.int64)
    bad = ~problem.allowed[:, preferred]
    if bad.any():
        device[bad] = np.argmax(problem.allowed[bad], axis=1)
    return device


@register_placer
@dataclasses.dataclass(frozen=True)
class Single(Placer):
    """Everything on one device (nodes its affinity forbids go to their first allowed device).

    Memory is not checked here: ``simulate`` reports the OOM, which is the point of this baseline.

    Options:
        device: the device's name (empty: the cluster's first).
    """

    name: ClassVar[str] = "single"
    device: str = ""

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """All nodes on the target device where their affinity allows."""
        target = 0
        if self.device:
            if self.device not in problem.device_names:
                raise PassError(f"device '{self.device}' is not in the cluster ({', '.join(problem.device_names)})")
            target = problem.device_names.index(self.device)
        return Placement(first_allowed(problem, target))


@register_placer
@dataclasses.dataclass(frozen=True)
class FromFile(Placer):
    """Read ``{node_id: device_name}`` (the ``--emit=placement`` format) and schedule it.

    Every node must be listed; members of one group must share a device.

    Options:
        path: the placement JSON file (required).
    """

    name: ClassVar[str] = "file"
    path: str = ""

    def place(self, problem: PlacementProblem, ctx: PlacementContext) -> Placement:
        """The file's device per node, checked against the cluster and the groups."""
        if not self.path:
            raise PassError("place{algo=file} needs path=FILE.json")
        try:
            mapping = json.loads(Path(self.path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PassError(f"cannot read placement '{self.path}': {exc}") from None
        if not isinstance(mapping, dict):
            raise PassError(f"placement '{self.path}' must be a JSON object {{node_id: device}}")
        names = problem.device_names
        position = {name: k for k, name in enumerate(names)}
        node_names = problem.fine.node_names
        fine_device = np.full(len(node_names), -1, dtype=np.int64)
        for u, node in enumerate(node_names):
            name = mapping.get(node)
            if name is None:
                raise PassError(f"placement '{self.path}' has no device for node '{node}'")
            if name not in position:
                raise PassError(f"placement '{self.path}': node '{node}' is on unknown device '{name}'")
            fine_device[u] = position[name]
        device, conflict = coarse_devices(problem.node_group, problem.num_nodes, fine_device)
        if conflict >= 0:
            raise PassError(
                f"placement '{self.path}' splits the group of node '{node_names[conflict]}' over two devices"
            )
        return Placement(device)
