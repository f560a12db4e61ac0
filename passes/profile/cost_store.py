"""FastT's cost models as a file: per-(op, device) compute times and per-pair transfer samples.

FastT (§4, "Cost Models") keeps two models, updated from ``RunMetadata`` after every few training
steps: the **computation model**, keyed by operation name and device ("the average time of the
same (sub-)operation(s) on the same device(s)"), and the **communication model**, one linear fit
``t = latency + bytes / bandwidth`` per source-destination device pair, "re-computed" whenever new
transfer samples arrive. A :class:`CostStore` holds both and is written as JSON, so a second run of
``graphir-tune`` starts warm and ``profile{mode=cost-table path=...}`` annotates any module of the
same model from it::

    {"format": "graphir-cost-store/1", "model": "lstm_train_b1", "updates": 4,
     "ops": {"<node>": {"<device>": [mean seconds, samples]}},
     "links": {"<src>-><dst>": [[bytes, seconds], ...]}}

Times are the medians that one measured run reports per node (:class:`~graphir.backends.tf.rig.RigRun`);
each run adds one sample to the running mean of the (node, device) it ran on. A pair keeps its
latest :data:`MAX_LINK_SAMPLES` transfer samples (the fit follows the link as it is now). The
**change** of an update (:meth:`CostStore.record`) is FastT's stability test: the relative L1 change
of the entries that existed before, ``sum |new - old| / sum old``, plus the count of entries measured
for the first time; the loop stops pre-training when both are small.

**Unknown costs.** :meth:`CostStore.time` and :meth:`CostStore.link_fit` return ``None`` for what was
never measured; the callers apply FastT's exploration rule (cost 0, so that the next strategy
tries it: :mod:`graphir.passes.profile.cost_table`, :func:`tuning_cluster`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from graphir.cluster_model import Cluster, Link
from graphir.errors import PassError
from graphir.fileio import write_atomically

__all__ = [
    "EXPLORE_BANDWIDTH",
    "FORMAT",
    "MAX_LINK_SAMPLES",
    "MIN_FIT_BYTES",
    "MIN_SPAN",
    "CostStore",
    "StoreChange",
    "tuning_cluster",
    "tuning_kind",
]

FORMAT = "graphir-cost-store/1"
MAX_LINK_SAMPLES = 4096
"""Transfer samples kept per ordered device pair (the most recent)."""
MIN_FIT_BYTES = 256 << 10
"""Largest sample size below which a pair's bandwidth is not fitted (see :meth:`CostStore.link_fit`)."""
MIN_SPAN = 16
"""Ratio between the largest and smallest sample sizes a bandwidth fit needs."""
EXPLORE_BANDWIDTH = 1e15
"""Bandwidth (bytes/s) of a pair never measured: FastT's cost 0, up to rounding."""


@dataclasses.dataclass(frozen=True)
class StoreChange:
    """What one update changed: ``relative`` L1 change of the existing entries, ``new`` entries, ``entries`` after."""

    relative: float
    new: int
    entries: int


@dataclasses.dataclass
class CostStore:
    """Per-(node, device) mean compute times and per-pair transfer samples of one model (module docstring).

    Attributes:
        model: the module name the costs belong to (a store refuses another model's module).
        ops: node name -> device name -> ``[mean seconds, samples]``.
        links: ``(src, dst)`` -> ``[(bytes, seconds)]``, oldest first.
        updates: measured runs recorded so far.
    """

    model: str
    ops: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    links: dict[tuple[str, str], list[tuple[int, float]]] = dataclasses.field(default_factory=dict)
    updates: int = 0

    # ------------------------------------------------------------------ files

    @classmethod
    def load(cls, path: Path, model: str | None = None) -> CostStore:
        """Read ``path``; with ``model``, check that the store belongs to it (a :class:`PassError` otherwise)."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise PassError(f"cannot read cost store '{path}': {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise PassError(f"cost store '{path}' is not JSON: {exc.msg} (line {exc.lineno})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise PassError(f'\'{path}\' is not a graphir cost store (expected "format": "{FORMAT}")')
        if model is not None and data.get("model") != model:
            raise PassError(f"cost store '{path}' holds costs of model '{data.get('model')}', not '{model}'")
        links = {}
        for key, samples in data.get("links", {}).items():
            src, _, dst = key.partition("->")
            links[(src, dst)] = [(int(b), float(s)) for b, s in samples]
        ops = {node: {dev: [float(m), float(c)] for dev, (m, c) in row.items()} for node, row in data["ops"].items()}
        return cls(str(data["model"]), ops, links, int(data.get("updates", 0)))

    @classmethod
    def open(cls, path: Path, model: str) -> CostStore:
        """The store at ``path`` if the file exists (checked to be ``model``'s), else an empty one."""
        return cls.load(path, model) if Path(path).exists() else cls(model)

    def to_json(self) -> str:
        """The file text (keys sorted: a store's text depends only on its content)."""
        data = {
            "format": FORMAT,
            "model": self.model,
            "updates": self.updates,
            "ops": {node: {dev: self.ops[node][dev] for dev in sorted(self.ops[node])} for node in sorted(self.ops)},
            "links": {f"{src}->{dst}": [list(s) for s in self.links[(src, dst)]] for src, dst in sorted(self.links)},
        }
        return json.dumps(data, indent=1) + "\n"

    def save(self, path: Path) -> None:
        """Write the store atomically."""
        write_atomically(Path(path), self.to_json(), PassError)

    # ------------------------------------------------------------------ updates

    def record(
        self,
        node_seconds: Mapping[str, float],
        node_devices: Mapping[str, str],
        transfers: Iterable[tuple[str, str, int, float]] = (),
    ) -> StoreChange:
        """Add one measured run: per node its time on the device it ran on; transfers ``(src, dst, bytes, s)``.

        Device names are the cluster's (not TF strings). Returns the change (module docstring).
        """
        before = {(node, dev): entry[0] for node, row in self.ops.items() for dev, entry in row.items()}
        for node, seconds in node_seconds.items():
            device = node_devices.get(node)
            if device is None:
                continue
            entry = self.ops.setdefault(node, {}).setdefault(device, [0.0, 0.0])
            count = entry[1] + 1
            entry[0] += (float(seconds) - entry[0]) / count  # running mean
            entry[1] = count
        for src, dst, nbytes, seconds in transfers:
            samples = self.links.setdefault((src, dst), [])
            samples.append((int(nbytes), float(seconds)))
            del samples[:-MAX_LINK_SAMPLES]
        self.updates += 1
        return self.change_since(before)

    def change_since(self, before: Mapping[tuple[str, str], float]) -> StoreChange:
        """The change from a snapshot ``{(node, device): mean}`` to now (module docstring)."""
        base = sum(before.values())
        moved = sum(abs(self.ops[node][dev][0] - old) for (node, dev), old in before.items())
        entries = sum(len(row) for row in self.ops.values())
        relative = moved / base if base > 0 else (0.0 if not before else float("inf"))
        return StoreChange(relative, entries - len(before), entries)

    # ------------------------------------------------------------------ queries

    def time(self, node: str, device: str) -> float | None:
        """Mean measured seconds of ``node`` on ``device``; ``None`` when never measured there."""
        entry = self.ops.get(node, {}).get(device)
        return None if entry is None else entry[0]

    def link_fit(self, src: str, dst: str) -> tuple[float, float] | None:
        """``(latency s, bandwidth bytes/s)`` fitted to the pair's samples; ``None`` when never measured.

        FastT's per-pair linear regression (``fit_linear`` of ``calibrate-comm``, relative residuals
        as on the rig), on the **lower envelope** of the samples: per power-of-two size bucket, the
        fastest time. A transfer measured on the rig runs from the producer's kernel end to the
        receiver's ``RecvTensor`` end, so it includes waiting for the core both ends share with
        computation (``fidelity.md``: 9-190x the link model when that core is busy; on the loaded
        machine of ``online.md`` most transfers of a split training step wait 10-100 ms while the
        fastest take 0.1-0.3 ms, the calibrated latency); the simulator adds its own queueing (the
        ``task`` rule books that core), so the model keeps the transfer's own cost. A slope is
        only fitted when the samples span sizes (the largest at least :data:`MIN_FIT_BYTES` and
        :data:`MIN_SPAN` times the smallest): tensors of a few bytes say nothing about bandwidth,
        and a line through them extrapolated to megabytes is absurd. Otherwise the latency is the
        fastest transfer and the per-byte cost is unknown, so 0 (FastT's rule: the bandwidth is
        unbounded until larger tensors have been measured).
        """
        samples = self.links.get((src, dst))
        if not samples:
            return None
        buckets: dict[int, list[tuple[int, float]]] = {}
        for nbytes, seconds in samples:
            buckets.setdefault(max(int(nbytes), 1).bit_length(), []).append((nbytes, seconds))
        envelope = [
            (int(np.median([b for b, _ in rows])), min(t for _, t in rows)) for _, rows in sorted(buckets.items())
        ]
        sizes = [b for b, _ in samples]
        if len(envelope) < 2 or max(sizes) < MIN_FIT_BYTES or max(sizes) < MIN_SPAN * max(min(sizes), 1):
            return min(t for _, t in envelope), EXPLORE_BANDWIDTH
        from graphir.passes.profile.calibrate_comm import fit_linear

        latency, bandwidth, _ = fit_linear(envelope, relative=True)
        return latency, min(bandwidth, EXPLORE_BANDWIDTH)

    def snapshot(self) -> dict[tuple[str, str], float]:
        """``{(node, device): mean}`` now (for :meth:`change_since`)."""
        return {(node, dev): entry[0] for node, row in self.ops.items() for dev, entry in row.items()}

    def coverage(self, nodes: Iterable[str], devices: Iterable[str]) -> float:
        """Share of the (node, device) pairs that have a measurement."""
        names, devs = list(nodes), list(devices)
        total = len(names) * len(devs)
        have = sum(1 for n in names for d in devs if d in self.ops.get(n, {}))
        return have / total if total else 1.0

    def summary(self) -> dict[str, Any]:
        """Counts for reports: entries, measured pairs, samples."""
        return {
            "entries": sum(len(row) for row in self.ops.values()),
            "nodes": len(self.ops),
            "pairs": len(self.links),
            "link-samples": sum(len(s) for s in self.links.values()),
            "updates": self.updates,
        }


def tuning_kind(device_kind: str, device_name: str) -> str:
    """The per-device kind of the tuning view: ``cpu@worker0`` (see :func:`tuning_cluster`); idempotent."""
    suffix = f"@{device_name}"
    return device_kind if device_kind.endswith(suffix) else device_kind + suffix


def tuning_cluster(cluster: Cluster, store: CostStore | None = None, explore: bool = True) -> Cluster:
    """The cluster as the tuning loop sees it: one kind per device, links from the store's fits.

    Costs are per device *kind* in graphir (``Cost``); FastT keeps one per (op, device). Giving every
    device its own kind (:func:`tuning_kind`) makes the per-kind costs of every placer and of the
    simulator per-device costs, with no change to either. Links: a pair the store has samples for
    gets its fitted ``latency + bytes / bandwidth`` (the fitted intercept holds the runtime's
    per-transfer cost, so ``transfer_overhead`` becomes 0); a pair never measured gets cost 0 when
    ``explore`` (FastT's rule), else keeps the cluster's calibrated link plus its transfer overhead.
    """
    devices = tuple(attrs.evolve(d, kind=tuning_kind(d.kind, d.name)) for d in cluster.devices)
    links = []
    for link in cluster.links:
        fit = store.link_fit(link.src, link.dst) if store is not None else None
        if fit is not None:
            links.append(Link(link.src, link.dst, max(fit[0], 0.0), fit[1]))
        elif explore:
            links.append(Link(link.src, link.dst, 0.0, EXPLORE_BANDWIDTH))
        else:
            links.append(attrs.evolve(link, latency=link.latency + cluster.transfer_overhead, route=()))
    return attrs.evolve(cluster, devices=devices, links=tuple(links), topology=None, transfer_overhead=0.0)
