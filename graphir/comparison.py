"""A placer comparison as data: what ``compare`` records on a module and ``--emit=compare`` renders.

The ``compare`` pass (:mod:`graphir.passes.compare`) runs several placers on copies of a module and
stores one :class:`ComparisonRow` per placer in a :class:`Comparison`, kept as JSON in the module
metadata under :data:`METADATA_KEY` (so it survives printing and parsing the ``.gir``). The report
backend (:mod:`graphir.backends.compare`) reads it back with :func:`read_comparison`. Both layers
share this model, so it lives in the core.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Literal

from graphir.errors import GraphIRError
from graphir.ir import Module

METADATA_KEY = "compare"
"""Module metadata key holding the comparison as JSON."""

Status = Literal["ok", "oom", "failed"]


@dataclasses.dataclass(frozen=True)
class ComparisonRow:
    """How one placer did (seconds, bytes; per-device lists in cluster order).

    Attributes:
        algo: the placer's name.
        spec: the pass that ran (``place{algo=m-sct}``).
        status: ``ok`` (placed and fits), ``oom`` (placed, some device over capacity) or
            ``failed`` (the placer refused; see ``error``).
        error: the placer's one-line message when it failed, else empty.
        makespan: simulated makespan (0 when failed).
        place_seconds: wall-clock time of the ``place`` pass.
        peak_memory: peak bytes per device (empty when failed).
        nodes: nodes per device (empty when failed).
        oom_devices: devices over capacity.
        transfers: tensors moved between devices.
        bytes_moved: bytes moved between devices.
    """

    algo: str
    spec: str
    status: Status
    error: str = ""
    makespan: float = 0.0
    place_seconds: float = 0.0
    peak_memory: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    oom_devices: tuple[str, ...] = ()
    transfers: int = 0
    bytes_moved: int = 0

    def to_json(self) -> dict[str, Any]:
        """The row as a JSON object (lists for tuples)."""
        out = dataclasses.asdict(self)
        for key in ("peak_memory", "nodes", "oom_devices"):
            out[key] = list(out[key])
        return out


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Every placer's row on one module and cluster, and the best one.

    Attributes:
        module: the module's name.
        cluster: the cluster spec (shorthand or file) the placers ran on.
        devices: device names in cluster order.
        capacity: memory bytes per device.
        congestion, order: the simulator's options.
        rows: one row per compared placer, in the order asked.
        best: the algo of the fastest row that fits memory, or empty when none fits.
    """

    module: str
    cluster: str
    devices: tuple[str, ...]
    capacity: tuple[int, ...]
    congestion: str
    order: str
    rows: tuple[ComparisonRow, ...]
    best: str

    def row(self, algo: str) -> ComparisonRow:
        """The row of ``algo`` (KeyError when it was not compared)."""
        for row in self.rows:
            if row.algo == algo:
                return row
        raise KeyError(algo)

    def to_json(self) -> dict[str, Any]:
        """The comparison as a JSON object (what :data:`METADATA_KEY` holds)."""
        out = dataclasses.asdict(self)
        out["devices"], out["capacity"] = list(self.devices), list(self.capacity)
        out["rows"] = [row.to_json() for row in self.rows]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Comparison:
        """Inverse of :meth:`to_json` (KeyError/TypeError/ValueError on a malformed object)."""
        rows = tuple(
            ComparisonRow(
                algo=str(r["algo"]),
                spec=str(r["spec"]),
                status=r["status"],
                error=str(r.get("error", "")),
                makespan=float(r["makespan"]),
                place_seconds=float(r["place_seconds"]),
                peak_memory=tuple(int(x) for x in r["peak_memory"]),
                nodes=tuple(int(x) for x in r["nodes"]),
                oom_devices=tuple(str(x) for x in r["oom_devices"]),
                transfers=int(r["transfers"]),
                bytes_moved=int(r["bytes_moved"]),
            )
            for r in data["rows"]
        )
        if any(r.status not in ("ok", "oom", "failed") for r in rows):
            raise ValueError("unknown row status")
        return cls(
            module=str(data["module"]),
            cluster=str(data["cluster"]),
            devices=tuple(str(d) for d in data["devices"]),
            capacity=tuple(int(c) for c in data["capacity"]),
            congestion=str(data["congestion"]),
            order=str(data["order"]),
            rows=rows,
            best=str(data["best"]),
        )


def read_comparison(module: Module) -> Comparison | None:
    """The comparison recorded on ``module`` by ``compare``, or ``None`` when there is none.

    Raises:
        GraphIRError: the metadata entry exists but is not a comparison (a hand-edited ``.gir``).
    """
    raw = module.metadata.get(METADATA_KEY)
    if raw is None:
        return None
    try:
        if not isinstance(raw, str):
            raise TypeError("not a string")
        return Comparison.from_json(json.loads(raw))
    except (KeyError, TypeError, ValueError) as exc:
        raise GraphIRError(f"module metadata '{METADATA_KEY}' is not a placer comparison ({exc})") from None


def best_row(rows: Sequence[ComparisonRow]) -> ComparisonRow | None:
    """The fastest row that fits memory (first in ``rows`` on a tie), or ``None``."""
    fitting = [row for row in rows if row.status == "ok"]
    return min(fitting, key=lambda row: row.makespan) if fitting else None


def describe_row(row: ComparisonRow) -> str:
    """One line: ``m-sct: placed in 0.41 s, makespan 1.23 s, fits`` (or the OOM devices, or the error)."""
    if row.status == "failed":
        return f"{row.algo}: failed ({row.error})"
    verdict = "fits" if row.status == "ok" else f"out of memory on {', '.join(row.oom_devices)}"
    return f"{row.algo}: placed in {row.place_seconds:.2f} s, makespan {row.makespan:.4g} s, {verdict}"


def write_comparison(module: Module, comparison: Comparison) -> None:
    """Record ``comparison`` on ``module`` (compact, key-sorted JSON under :data:`METADATA_KEY`)."""
    module.metadata[METADATA_KEY] = json.dumps(comparison.to_json(), sort_keys=True, separators=(",", ":"))
