r"""``graphir-bench``: run a matrix of models x clusters x pipelines and tabulate the simulated results.

Every cell imports the model (cached, see below), attaches the cluster, runs the pipeline with the
pass manager (verification on unless ``--no-verify``) and scores the result with the simulator
(:func:`graphir.simulator.simulate`, the one ruler). Per cell it records:

* ``makespan``: simulated seconds of one step;
* ``ratio``: makespan / the best makespan of that model on that cluster, the best taken over the
  cells without error and without an out-of-memory device (over all cells without error when every
  cell is OOM); 1.0 marks the best;
* ``placement_s``: wall-clock seconds of the ``fuse`` and ``place`` passes (the pass manager's
  records), ``pipeline_s`` of every pass the cell ran;
* ``peak_memory`` and ``memory_limit`` per device, and ``oom``: the devices whose peak exceeds
  their memory;
* ``error``: one line when the cell failed (import, pipeline, placer or simulation error, or the
  per-cell ``--timeout``); the other cells still run.

Caching: each model is imported once and kept as ``.gir`` text; each cell parses a fresh copy
(``parse(print(m))`` is exact). When a pipeline starts with ``profile``, the profiled text is
cached per (model, cluster, profile options) and the cell runs the rest of the pipeline, so the
placers are compared on identical costs and profiling is paid once.

The matrix comes from a TOML file (``--matrix``) and/or flags, flags overriding the file::

    name = "placement"                      # title of the tables
    out = "benchmarks/results/placement"    # writes placement.md and placement.json
    seed = 0
    timeout = 1800                          # seconds per cell (optional)
    models = ["zoo:inception_v3_train", "examples/squeezenet.onnx"]
    clusters = ["celeritas", "4xV100"]
    [pipelines]                             # label = pipeline, in table order
    adjusting = "profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate"
    single = "profile,place{algo=single},simulate"

``pipelines`` may also be a list of strings; on the command line a pipeline may be given as
``label=pipeline``. An unlabelled pipeline is labelled by its ``place`` algorithm (or its text when
that is ambiguous). Relative model paths are relative to the current directory.

Command line::

    graphir-bench --matrix benchmarks/matrix.toml
    graphir-bench --models zoo:inception_v3_train,examples/squeezenet.onnx --clusters celeritas,4xV100 \\
        --pipelines 'profile,fuse{algo=cpd-topo},place{algo=adjusting},simulate' 'single=profile,place,simulate' \\
        --out benchmarks/results/mine

Progress goes to stderr, one line per cell; the Markdown table goes to ``OUT.md`` (and stdout when
no ``--out`` is given), the JSON to ``OUT.json``. Exit status: 0 when the matrix ran (failed cells
included), 1 on a bad matrix or command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import signal
import sys
import time
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TextIO

from graphir.cluster import resolve_cluster
from graphir.errors import GraphIRError
from graphir.importers import load_module
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import Pass, PassContext, PassResult
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline, parse_pipeline_text
from graphir.printer import print_module
from graphir.simulator import simulate

PLACEMENT_PASSES = frozenset({"fuse", "place"})
"""Passes whose wall time counts as placement time."""
MAX_ERROR_CHARS = 300
BEST_TOLERANCE = 1e-9
"""Ratios this close to 1 are shown as best (summation order can change the last bits of a makespan)."""
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

    def as_json(self) -> dict[str, Any]:
        """The cell as JSON-ready data."""
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- matrix


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


# --------------------------------------------------------------------------- running


class CellTimeout(BaseException):  # noqa: N818 - named for what happened, like KeyboardInterrupt
    """A cell ran longer than the matrix's ``timeout``.

    A ``BaseException`` like ``KeyboardInterrupt``: the pass manager turns an ``Exception`` raised
    inside a pass into an internal error, while the timeout must reach :func:`run_cell` unchanged.
    """


@contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`CellTimeout` in the block after ``seconds`` (needs POSIX timers and the main thread)."""
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return
    try:
        previous = signal.signal(signal.SIGALRM, _raise_timeout)
    except ValueError:  # not the main thread: no limit
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _raise_timeout(signum: int, frame: object) -> NoReturn:
    raise CellTimeout


def one_line_error(exc: BaseException) -> str:
    """An exception as one line of at most :data:`MAX_ERROR_CHARS` characters."""
    if isinstance(exc, GraphIRError):
        text = exc.one_line()
    else:
        text = f"{exc.__class__.__name__}: {exc}"
        if isinstance(exc, RuntimeError) and exc.__cause__ is not None:
            text += f" ({exc.__cause__.__class__.__name__})"
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


@dataclasses.dataclass(frozen=True)
class CachedPrefix(Pass):
    """Stands in for the pipeline's first pass when its result came from the cache.

    It keeps every later pass at its position in the pipeline, hence with the random stream
    :meth:`PassContext.rng` derives from (seed, position): a cell gives what ``graphir-opt`` gives for
    the same pipeline and seed. Not registered: it cannot appear in a pipeline string.
    """

    name: ClassVar[str] = "cached-prefix"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Nothing to do: the module already went through the cached pass."""
        return PassResult(False)


class ModuleCache:
    """Imported models as ``.gir`` text, and profiled copies per (cluster, profile options).

    One model at a time is kept (the runner goes model by model), so memory stays bounded.
    """

    def __init__(self) -> None:
        self._model: str | None = None
        self._text: str | Exception = ""
        self._profiled: dict[tuple[str, str], str] = {}

    def _load(self, model: str) -> str:
        if model != self._model:
            self._model, self._profiled = model, {}
            try:
                self._text = print_module(load_module(model))
            except CellTimeout:
                self._model = None  # not the model's fault: the next cell tries again
                raise
            except Exception as exc:  # recorded in every cell of this model
                self._text = exc
        if isinstance(self._text, Exception):
            raise self._text
        return self._text

    def fresh(self, model: str, cluster: str) -> Module:
        """A new copy of ``model`` placed on ``cluster``."""
        module = parse_module(self._load(model), model)
        module.set_cluster(resolve_cluster(cluster))
        return module

    def profiled(self, model: str, cluster: str, profile_spec: str, seed: int, verify: bool) -> Module:
        """A new copy of ``model`` on ``cluster`` after the pipeline ``profile_spec`` (cached)."""
        self._load(model)
        key = (cluster, profile_spec)
        if key not in self._profiled:
            module = self.fresh(model, cluster)
            PassManager(parse_pipeline(profile_spec), verify_each=verify).run(module, PassContext(seed=seed))
            self._profiled[key] = print_module(module)
        return parse_module(self._profiled[key], model)


def run_cell(cache: ModuleCache, model: str, cluster: str, label: str, pipeline: str, matrix: Matrix) -> CellResult:
    """Run one cell; any failure is recorded in ``CellResult.error``."""
    cell = CellResult(model, cluster, label, pipeline)
    try:
        with _time_limit(matrix.timeout):
            passes = parse_pipeline(pipeline)
            if passes and passes[0].name == "profile":
                module = cache.profiled(model, cluster, passes[0].spec(), matrix.seed, matrix.verify)
                passes = [CachedPrefix(), *passes[1:]]
            else:
                module = cache.fresh(model, cluster)
            manager = PassManager(passes, verify_each=matrix.verify)
            records = manager.run(module, PassContext(seed=matrix.seed))
            result = simulate(module)
    except CellTimeout:
        cell.error = f"timeout: the cell ran longer than {matrix.timeout:g} s"
        return cell
    except Exception as exc:  # a failing cell is a row, not a crash
        cell.error = one_line_error(exc)
        return cell
    cell.makespan = result.makespan
    cell.placement_s = sum(r.seconds for r in records if r.pass_.name in PLACEMENT_PASSES)
    cell.pipeline_s = sum(r.seconds for r in records)
    cell.nodes = module.graph.index().num_nodes
    cell.peak_memory = {d: int(b) for d, b in zip(result.device_names, result.peak_memory.tolist(), strict=True)}
    cell.memory_limit = {d: int(b) for d, b in zip(result.device_names, result.memory_limit.tolist(), strict=True)}
    cell.oom = list(result.oom_devices)
    return cell


def fill_ratios(results: Sequence[CellResult]) -> None:
    """Set ``ratio`` = makespan / best makespan per (model, cluster) (see the module docstring)."""
    groups: dict[tuple[str, str], list[CellResult]] = {}
    for cell in results:
        groups.setdefault((cell.model, cell.cluster), []).append(cell)
    for cells in groups.values():
        scored = [c for c in cells if c.makespan is not None]
        fitting = [c for c in scored if not c.oom] or scored
        if not fitting:
            continue
        best = min(c.makespan for c in fitting if c.makespan is not None)
        for cell in scored:
            assert cell.makespan is not None
            if best > 0:
                cell.ratio = cell.makespan / best
            elif cell.makespan == best:  # an empty graph: every placement is the best
                cell.ratio = 1.0


def run_matrix(matrix: Matrix, progress: TextIO | None = None) -> list[CellResult]:
    """Run every cell (model-major) and fill in the ratios; progress lines go to ``progress``."""
    total = len(matrix.models) * len(matrix.clusters) * len(matrix.pipelines)
    cache = ModuleCache()
    results: list[CellResult] = []
    for model in matrix.models:
        for cluster in matrix.clusters:
            for label, pipeline in matrix.pipelines:
                started = time.perf_counter()
                cell = run_cell(cache, model, cluster, label, pipeline, matrix)
                results.append(cell)
                if progress is not None:
                    elapsed = time.perf_counter() - started
                    if cell.error:
                        outcome = f"ERROR {cell.error}"
                    else:
                        assert cell.makespan is not None and cell.placement_s is not None
                        oom = f", OOM {','.join(cell.oom)}" if cell.oom else ""
                        outcome = f"makespan {cell.makespan * 1e3:.3f} ms, placement {cell.placement_s:.3f} s{oom}"
                    line = f"[{len(results)}/{total}] {model} | {cluster} | {label}: {outcome} ({elapsed:.1f} s)"
                    print(line, file=progress, flush=True)
    fill_ratios(results)
    return results


# --------------------------------------------------------------------------- output


def machine_line() -> str:
    """One line about the machine and Python the numbers were measured on."""
    return (
        f"{platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def _cell_text(text: str) -> str:
    return text.replace("|", "\\|")


def _model_name(model: str) -> str:
    """A model as shown in the table: absolute paths by their file name (the JSON keeps the spec)."""
    return Path(model).name if os.path.isabs(model) else model


def _gib(count: int) -> str:
    return f"{count / (1 << 30):.2f}"


def markdown_table(matrix: Matrix, results: Sequence[CellResult], date: str, seconds: float) -> str:
    """The results as Markdown: a header, the pipelines' legend, and one row per cell."""
    source = f"matrix `{matrix.source}`" if matrix.source else "command-line matrix"
    lines = [
        f"# graphir-bench: {matrix.name}",
        "",
        f"Generated by `graphir-bench` ({source}, seed {matrix.seed}) on {date} in {seconds:.0f} s; {machine_line()}.",
        "",
        "makespan: simulated time of one step (graphir's simulator, `graphir/simulator.py`). ratio: makespan / the "
        "best makespan of the model on the cluster among cells without OOM (**bold** = best). placement: wall time of "
        "the `fuse` and `place` passes. peak memory: GiB per device in cluster order. An error ends its row.",
        "",
        "| pipeline | passes |",
        "|---|---|",
    ]
    lines += [f"| {_cell_text(label)} | `{_cell_text(pipeline)}` |" for label, pipeline in matrix.pipelines]
    lines += [
        "",
        "| model | cluster | pipeline | nodes | makespan (ms) | ratio | placement (s) | peak memory (GiB) | OOM |",
        "|---|---|---|--:|--:|--:|--:|---|---|",
    ]
    for cell in results:
        head = f"| {_cell_text(_model_name(cell.model))} | {_cell_text(cell.cluster)} | {_cell_text(cell.label)} |"
        if cell.error is not None:
            lines.append(f"{head} | | | | | {_cell_text(cell.error)} |")
            continue
        assert cell.makespan is not None and cell.placement_s is not None
        ratio = "-" if cell.ratio is None else f"{cell.ratio:.3f}"
        if cell.ratio is not None and abs(cell.ratio - 1.0) <= BEST_TOLERANCE and not cell.oom:
            ratio = f"**{ratio}**"
        peaks = " / ".join(_gib(b) for b in cell.peak_memory.values())
        oom = ", ".join(cell.oom) or "-"
        lines.append(
            f"{head} {cell.nodes} | {cell.makespan * 1e3:.3f} | {ratio} | {cell.placement_s:.3f} | {peaks} | {oom} |"
        )
    return "\n".join(lines) + "\n"


def results_json(matrix: Matrix, results: Sequence[CellResult], date: str, seconds: float) -> dict[str, Any]:
    """The results as JSON-ready data."""
    return {
        "name": matrix.name,
        "matrix": matrix.source,
        "seed": matrix.seed,
        "date": date,
        "seconds": seconds,
        "machine": machine_line(),
        "models": list(matrix.models),
        "clusters": list(matrix.clusters),
        "pipelines": dict(matrix.pipelines),
        "results": [cell.as_json() for cell in results],
    }


def _write(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file (a failed run leaves the previous results intact)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BenchError(f"cannot write '{path}': {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- command line


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors in one line with exit status 1, like graphir-opt."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def build_arg_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = _ArgumentParser(
        prog="graphir-bench",
        description="Run models x clusters x pipelines through graphir and tabulate the simulated makespans.",
        epilog="Flags override the --matrix file. Progress goes to stderr; failed cells are recorded, not fatal.",
    )
    parser.add_argument("--matrix", metavar="FILE.toml", help="matrix file (models, clusters, [pipelines], out, ...)")
    parser.add_argument("--models", action="append", metavar="M,M", help="model files or zoo:<name>, comma-separated")
    parser.add_argument("--clusters", action="append", metavar="C,C", help="cluster specs, comma-separated")
    parser.add_argument(
        "--pipelines",
        nargs="+",
        action="extend",
        metavar="[LABEL=]PIPELINE",
        help="pipelines (one per argument, or separated by ';'), optionally labelled",
    )
    parser.add_argument("--out", metavar="PATH", help="write PATH.md and PATH.json (default: Markdown to stdout)")
    parser.add_argument("--name", help="title of the tables (default: the matrix's name or the --out file name)")
    parser.add_argument("--seed", type=int, help="pipeline seed (default: the matrix's, else 0)")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds per cell before it is recorded as an error")
    parser.add_argument("--no-verify", action="store_true", help="do not run the verifier after each pass")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    try:
        args = build_arg_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    try:
        matrix = build_matrix(args)
        for cluster in matrix.clusters:
            resolve_cluster(cluster)  # a bad cluster is a matrix error, reported before any work
        started = time.perf_counter()
        date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        results = run_matrix(matrix, None if args.quiet else sys.stderr)
        seconds = time.perf_counter() - started
        table = markdown_table(matrix, results, date, seconds)
        if matrix.out is None:
            sys.stdout.write(table)
        else:
            _write(matrix.out.with_name(matrix.out.name + ".md"), table)
            data = results_json(matrix, results, date, seconds)
            _write(matrix.out.with_name(matrix.out.name + ".json"), json.dumps(data, indent=1) + "\n")
        failed = sum(1 for cell in results if cell.error)
        if not args.quiet:
            where = f"; wrote {matrix.out}.md and {matrix.out}.json" if matrix.out else ""
            print(f"graphir-bench: {len(results)} cells, {failed} failed, {seconds:.1f} s{where}", file=sys.stderr)
        return 0
    except GraphIRError as exc:
        print(f"graphir-bench: {exc.one_line()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("graphir-bench: interrupted", file=sys.stderr)
        return 130


def main() -> None:
    """Console-script entry point."""
    sys.exit(run())


if __name__ == "__main__":
    main()
