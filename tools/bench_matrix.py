"""``graphir-bench``'s matrix: what to run (models x clusters x labelled pipelines) and each cell's result.

:func:`build_matrix` merges a TOML matrix file (:func:`load_matrix_file`) with the command-line
flags; :func:`label_pipelines` names unlabelled pipelines after their ``place`` algorithm. The file
format and the meaning of every :class:`CellResult` field are described in :mod:`graphir.tools.bench`.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphir.errors import GraphIRError
from graphir.pipeline import parse_pipeline_text

_LABEL = re.compile(r"^([A-Za-z0-9_.+-]+)=(.*)$", re.DOTALL)


class BenchError(GraphIRError):
    """A bad matrix file or command line."""


@dataclasses.dataclass(frozen=True)
class Matrix:
    """What to run.

    Attributes:
        name: title of the tables.
        models: model specs (file paths, ``zoo:<name>``).
        clusters: cluster specs (shorthand, preset, TOML file).
        pipelines: ``(label, pipeline text)`` in table order.
        seed: the pipelines' seed.
        verify: run the verifier after every pass.
        timeout: seconds per cell (``None``: no limit).
        out: output path without suffix (``None``: Markdown to stdout only).
        source: the matrix file, if any.
    """

    name: str
    models: tuple[str, ...]
    clusters: tuple[str, ...]
    pipelines: tuple[tuple[str, str], ...]
    seed: int = 0
    verify: bool = True
    timeout: float | None = None
    out: Path | None = None
    source: str | None = None


@dataclasses.dataclass
class CellResult:
    """One cell of the matrix (see the module docstring for the fields' meaning)."""

    model: str
    cluster: str
    label: str
    pipeline: str
    makespan: float | None = None
    ratio: float | None = None
    placement_s: float | None = None
    pipeline_s: float | None = None
    nodes: int | None = None
    peak_memory: dict[str, int] = dataclasses.field(default_factory=dict)
    memory_limit: dict[str, int] = dataclasses.field(default_factory=dict)
    oom: list[str] = dataclasses.field(default_factory=list)
    error: str | None = None
    auto: dict[str, Any] = dataclasses.field(default_factory=dict)
    """``place{algo=auto}``'s statistics (``auto.*``: every candidate's makespan, the refinement's gain)."""

    def as_json(self) -> dict[str, Any]:
        """The cell as JSON-ready data."""
        return dataclasses.asdict(self)


def split_label(text: str) -> tuple[str | None, str]:
    """``label=pipeline`` -> ``(label, pipeline)``; a bare pipeline -> ``(None, pipeline)``."""
    match = _LABEL.match(text.strip())
    if match is None:
        return None, text.strip()
    return match.group(1), match.group(2).strip()


def _place_algo(pipeline: str) -> str | None:
    """The ``algo`` of the pipeline's only ``place`` pass (``None``: none, several, or the default)."""
    places = [p for p in parse_pipeline_text(pipeline) if p.name == "place"]
    if len(places) != 1:
        return None
    algo = next((o.value for o in places[0].options if o.key == "algo"), None)
    return algo if isinstance(algo, str) else None


def label_pipelines(entries: Sequence[tuple[str | None, str]]) -> tuple[tuple[str, str], ...]:
    """Give every pipeline a unique label: its own, its ``place`` algorithm, or its text.

    Raises:
        BenchError: a pipeline does not parse, or two pipelines have the same label.
    """
    checked: list[tuple[str | None, str]] = []
    for label, pipeline in entries:
        try:
            algo = _place_algo(pipeline)
        except GraphIRError as exc:
            raise BenchError(f"pipeline '{pipeline}': {exc.message}") from None
        checked.append((label, pipeline) if label else (algo, pipeline))
    counts: dict[str | None, int] = {}
    for label, _ in checked:
        counts[label] = counts.get(label, 0) + 1
    labelled: list[tuple[str, str]] = []
    for (label, pipeline), (given, _) in zip(checked, entries, strict=True):
        final = label if label is not None and (given or counts[label] == 1) else pipeline
        if any(final == seen for seen, _ in labelled):
            raise BenchError(f"two pipelines are labelled '{final}'")
        labelled.append((final, pipeline))
    return tuple(labelled)


def _string_list(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise BenchError(f"{where}: '{key}' must be a list of non-empty strings")
    return value


def load_matrix_file(path: Path) -> dict[str, Any]:
    """Read a matrix TOML file into plain settings (see the module docstring for the keys).

    Raises:
        BenchError: the file cannot be read or has unknown keys or wrong types.
    """
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise BenchError(f"cannot read matrix '{path}': {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"{path}: invalid TOML: {exc}") from None
    known = {"name", "out", "seed", "timeout", "verify", "models", "clusters", "pipelines"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise BenchError(f"{path}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    settings: dict[str, Any] = {"source": str(path)}
    for key in ("models", "clusters"):
        if key in data:
            settings[key] = _string_list(data[key], key, str(path))
    pipelines = data.get("pipelines")
    if isinstance(pipelines, dict):
        if not all(isinstance(v, str) for v in pipelines.values()):
            raise BenchError(f"{path}: every entry of [pipelines] must be a pipeline string")
        settings["pipelines"] = [(str(k), v) for k, v in pipelines.items()]
    elif pipelines is not None:
        settings["pipelines"] = [split_label(p) for p in _string_list(pipelines, "pipelines", str(path))]
    expected: dict[str, tuple[type, ...]] = {
        "name": (str,),
        "out": (str,),
        "seed": (int,),
        "timeout": (int, float),
        "verify": (bool,),
    }
    for key, kinds in expected.items():
        if key not in data:
            continue
        value = data[key]
        # TOML booleans are Python bools, which are ints too: only 'verify' takes one.
        if not isinstance(value, kinds) or (isinstance(value, bool) and key != "verify"):
            raise BenchError(f"{path}: '{key}' must be {' or '.join(k.__name__ for k in kinds)}")
        settings[key] = value
    return settings


def build_matrix(args: argparse.Namespace) -> Matrix:
    """The matrix from ``--matrix`` and the flags (flags override the file).

    Raises:
        BenchError: nothing to run, or a bad file or pipeline.
    """
    settings: dict[str, Any] = load_matrix_file(Path(args.matrix)) if args.matrix else {}
    if args.models:
        settings["models"] = [m for item in args.models for m in item.split(",") if m]
    if args.clusters:
        settings["clusters"] = [c for item in args.clusters for c in item.split(",") if c]
    if args.pipelines:
        settings["pipelines"] = [split_label(p) for item in args.pipelines for p in item.split(";") if p.strip()]
    for key, flag in (("models", "--models"), ("clusters", "--clusters"), ("pipelines", "--pipelines")):
        if not settings.get(key):
            raise BenchError(f"no {key} to run: give {flag} or a --matrix file that lists them")
    out = args.out if args.out is not None else settings.get("out")
    timeout = args.timeout if args.timeout is not None else settings.get("timeout")
    return Matrix(
        name=args.name or settings.get("name") or (Path(out).name if out else "graphir-bench"),
        models=tuple(settings["models"]),
        clusters=tuple(settings["clusters"]),
        pipelines=label_pipelines(settings["pipelines"]),
        seed=args.seed if args.seed is not None else int(settings.get("seed", 0)),
        verify=not args.no_verify and bool(settings.get("verify", True)),
        timeout=float(timeout) if timeout else None,
        out=_strip_suffix(Path(out)) if out else None,
        source=settings.get("source"),
    )


def _strip_suffix(path: Path) -> Path:
    return path.with_suffix("") if path.suffix in {".md", ".json"} else path
