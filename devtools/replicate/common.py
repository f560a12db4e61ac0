"""What the replication modules share: running pipelines on cached profiled models, and writing tables.

Every experiment runs its pipelines through the pass manager on a fresh copy of a profiled model,
exactly as ``graphir-bench`` does (the imported and profiled ``.gir`` text is cached per model and
cluster by :class:`graphir.tools.bench.ModuleCache`, so every placer of a model sees identical
costs), then scores the result with the simulator, the one ruler. A :class:`Run` keeps what the
tables need: simulated makespan, OOM devices, per-pass statistics and wall times.

Tables are Markdown, written atomically to ``<out>/replicate_<paper>.md``. Only the wall-time columns
(marked "wall") and the "Generated ..." line depend on the machine and the moment; everything else
is a function of the zoo, the presets and the seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from graphir.cluster import device_toml, link_toml
from graphir.driver import load_builtin_passes
from graphir.driver.clusters import resolve_cluster
from graphir.errors import GraphIRError
from graphir.fileio import write_atomically
from graphir.pass_infra import PassContext, Stat
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.simulator import simulate
from graphir.tools.bench import CachedPrefix, ModuleCache, one_line_error

DEFAULT_OUT = Path("benchmarks/results")
"""Where the committed tables live (relative to the repository root)."""

QUICK_MODEL = "examples/squeezenet.onnx"
"""The bundled model every ``--quick`` run uses."""

SEED = 0
"""Seed of every pipeline."""

PROFILE = "profile"
"""The profiling pass every experiment starts with (analytical roofline costs)."""


class ReplicateError(GraphIRError):
    """A bad command line or an experiment that cannot run at all."""


@dataclasses.dataclass
class Run:
    """One pipeline on one model and cluster.

    Attributes:
        model: model spec (``zoo:<name>`` or a path).
        cluster: cluster spec.
        pipeline: the pipeline after ``profile``.
        makespan: simulated seconds of one step.
        oom: devices whose peak memory exceeds their capacity.
        peak: peak bytes per device, in cluster order.
        capacity: memory bytes per device, in cluster order.
        stats: ``{pass name: stats}`` of the pipeline's passes (the last run of a name wins).
        seconds: ``{pass name: wall seconds}`` summed per pass name.
        nodes: fine nodes of the graph.
        error: one line when the run failed (then the other fields are empty).
    """

    model: str
    cluster: str
    pipeline: str
    makespan: float | None = None
    oom: tuple[str, ...] = ()
    peak: tuple[int, ...] = ()
    capacity: tuple[int, ...] = ()
    stats: dict[str, dict[str, Stat]] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    nodes: int = 0
    error: str | None = None

    @property
    def placement_s(self) -> float:
        """Placement generation time: wall seconds of the ``fuse`` and ``place`` passes (Celeritas §6.3)."""
        return self.seconds.get("fuse", 0.0) + self.seconds.get("place", 0.0)

    def stat(self, pass_name: str, key: str) -> Stat | None:
        """One statistic of one pass (``None`` when absent)."""
        return self.stats.get(pass_name, {}).get(key)


class Runner:
    """Runs pipelines on profiled models (one model cached at a time) and reports progress.

    Args:
        verify: run the verifier after every pass.
        progress: where progress lines go (``None``: nowhere).
    """

    def __init__(self, verify: bool = True, progress: object = sys.stderr) -> None:
        self.cache = ModuleCache()
        self.verify = verify
        self.progress = progress

    def log(self, text: str) -> None:
        """One progress line."""
        if self.progress is not None:
            print(text, file=self.progress, flush=True)

    def run(self, model: str, cluster: str, pipeline: str) -> Run:
        """Profile (cached), run ``pipeline`` and simulate; a failure is recorded in ``Run.error``."""
        run = Run(model, cluster, pipeline)
        load_builtin_passes()
        started = time.perf_counter()
        try:
            module = self.cache.profiled(model, cluster, PROFILE, SEED, self.verify)
            passes = [CachedPrefix(), *parse_pipeline(pipeline)]
            records = PassManager(passes, verify_each=self.verify).run(module, PassContext(seed=SEED))
            result = simulate(module)
        except Exception as exc:  # a failing cell is a row, not a crash
            run.error = one_line_error(exc)
            self.log(f"  {model} | {cluster} | {pipeline}: ERROR {run.error}")
            return run
        for record in records:
            name = record.pass_.name
            if name == CachedPrefix.name:
                continue
            run.stats[name] = dict(record.result.stats)
            run.seconds[name] = run.seconds.get(name, 0.0) + record.seconds
        run.makespan = result.makespan
        run.oom = tuple(result.oom_devices)
        run.peak = tuple(int(b) for b in result.peak_memory.tolist())
        run.capacity = tuple(int(b) for b in result.memory_limit.tolist())
        run.nodes = module.graph.index().num_nodes
        oom = f", OOM {','.join(run.oom)}" if run.oom else ""
        self.log(
            f"  {model} | {cluster} | {pipeline}: {run.makespan * 1e3:.3f} ms{oom}, placement {run.placement_s:.2f} s "
            f"({time.perf_counter() - started:.1f} s)"
        )
        return run

    def best_of(self, model: str, cluster: str, pipeline: str, repeats: int) -> Run:
        """Run ``repeats`` times; the run with the median placement time (the results are identical)."""
        runs = [self.run(model, cluster, pipeline) for _ in range(max(1, repeats))]
        if any(r.error for r in runs):
            return next(r for r in runs if r.error)
        runs.sort(key=lambda r: r.placement_s)
        return runs[len(runs) // 2]


# --------------------------------------------------------------------------- formatting


def ms(run: Run) -> str:
    """The simulated makespan in ms, ``OOM (x)`` when a device overflows, the error otherwise."""
    if run.error is not None:
        return f"error: {cell(run.error)}"
    assert run.makespan is not None
    value = run.makespan * 1e3
    text = f"{value:.1f}" if value >= 100 else f"{value:.3f}"
    return f"OOM ({text})" if run.oom else text


def secs(value: float | None) -> str:
    """Wall seconds with 2 decimals (``-`` when missing)."""
    return "-" if value is None else f"{value:.2f}"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> list[str]:
    """A Markdown table; ``align`` holds one of ``l``/``r`` per column (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---" if a == "l" else "--:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(marks) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def machine_line() -> str:
    """The machine the wall times were measured on."""
    return (
        f"{platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def generated_line(command: str, seconds: float) -> str:
    """The one line that changes with every run: command, date, duration, machine."""
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return (
        f"Generated by `{command}` on {date} in {seconds:.0f} s ({machine_line()}); wall-time columns vary with load."
    )


def write_text(path: Path, text: str) -> None:
    """Write atomically (:func:`graphir.fileio.write_atomically`), so a failed run leaves the previous table intact.

    Raises:
        ReplicateError: the file cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReplicateError(f"cannot write '{path}': {exc.strerror or exc}") from None
    write_atomically(path, text, ReplicateError)


def shrunk_cluster(preset: str, memory: int, directory: Path) -> str:
    """Write ``preset`` with every device's memory set to ``memory`` bytes as a cluster TOML file.

    ``--quick`` runs use it so that the small bundled model overflows one device like the papers'
    large models do, on the preset's own devices and links. Returns the file's path (a cluster spec).
    """
    cluster = resolve_cluster(preset)
    lines = [f"# {preset} with {memory} bytes per device (replication --quick)"]
    for device in cluster.devices:
        lines += device_toml(device, memory)
    for link in cluster.links:
        lines += link_toml(link.src, link.dst, link.latency, link.bandwidth)
    path = directory / f"{preset}-{memory}.toml"
    write_text(path, "\n".join(lines) + "\n")
    return str(path)


# --------------------------------------------------------------------------- command line


class ArgumentParser(argparse.ArgumentParser):
    """Usage errors as one line ``prog: error: what`` and exit status 1."""

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message`` and exit with status 1."""
        self.exit(1, f"{self.prog}: error: {message}\n")


def paper_parser(paper: str, description: str) -> ArgumentParser:
    """The command line every paper module accepts: ``--out DIR``, ``--quick``, ``--quiet``."""
    parser = ArgumentParser(prog=f"devtools.replicate.{paper}", description=description)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory of the tables (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="tiny settings (bundled SqueezeNet, short limits)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--no-verify", action="store_true", help="do not run the verifier after every pass")
    return parser


def run_main(paper: str, body: object, argv: Sequence[str] | None, description: str) -> int:
    """Parse the common options, run ``body(args, runner) -> Path`` and turn errors into one line + exit 1."""
    parser = paper_parser(paper, description)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"replicate {paper}: error: --out '{out}' is not a directory", file=sys.stderr)
        return 1
    runner = Runner(verify=not args.no_verify, progress=None if args.quiet else sys.stderr)
    started = time.perf_counter()
    try:
        path = body(args, runner)
    except GraphIRError as exc:
        print(f"replicate {paper}: {exc.one_line()}", file=sys.stderr)
        return 1
    runner.log(f"replicate {paper}: wrote {path} in {time.perf_counter() - started:.1f} s")
    return 0
