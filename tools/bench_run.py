"""Running ``graphir-bench``'s matrix: the module cache, one cell under a time limit, the best-makespan ratios.

Each model is imported once and kept as ``.gir`` text, and a pipeline's leading ``profile`` is run
once per (model, cluster, profile options) (:class:`ModuleCache`, :class:`CachedPrefix`), so every
placer of a model sees identical costs. :func:`run_cell` runs one pipeline and scores it with the
simulator (under the congestion rule and order of the pipeline's last ``simulate``, else the
simulator's defaults); :func:`run_matrix` runs them all and fills :attr:`CellResult.ratio`.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import ClassVar, NoReturn, TextIO

from graphir.driver import load_builtin_passes
from graphir.driver.clusters import resolve_cluster
from graphir.errors import GraphIRError
from graphir.importers import load_module
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import Pass, PassContext, PassResult
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.printer import print_module
from graphir.simulator import simulate
from graphir.tools.bench_matrix import CellResult, Matrix

PLACEMENT_PASSES = frozenset({"fuse", "place"})
"""Passes whose wall time counts as placement time."""
MAX_ERROR_CHARS = 300
BEST_TOLERANCE = 1e-9
"""Ratios this close to 1 are shown as best (summation order can change the last bits of a makespan)."""


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
            load_builtin_passes()
            module = self.fresh(model, cluster)
            PassManager(parse_pipeline(profile_spec), verify_each=verify).run(module, PassContext(seed=seed))
            self._profiled[key] = print_module(module)
        return parse_module(self._profiled[key], model)


def run_cell(cache: ModuleCache, model: str, cluster: str, label: str, pipeline: str, matrix: Matrix) -> CellResult:
    """Run one cell; any failure is recorded in ``CellResult.error``."""
    cell = CellResult(model, cluster, label, pipeline)
    load_builtin_passes()
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
            judge = [p for p in passes if p.name == "simulate"]  # the pipeline's own rules, when it simulates
            result = simulate(module, judge[-1].congestion, judge[-1].order) if judge else simulate(module)
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
    for record in records:
        if record.pass_.name == "place":
            cell.auto = {k: v for k, v in record.result.stats.items() if k.startswith("auto.")}
        elif record.pass_.name == "parallelize":  # the plan it chose and how many candidates it judged
            kept = ("chosen", "makespan-ms", "candidates", "simulated", "fallback")
            cell.auto = {f"parallelize.{k}": v for k, v in record.result.stats.items() if k in kept}
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
