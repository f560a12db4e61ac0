"""``graphir-opt``: import a model, run a pass pipeline, emit the result.

Examples::

    graphir-opt model.onnx --emit=summary
    graphir-opt model.gir --passes='dce,strip-annotations{keys=device,order}' -o out.gir
    graphir-opt model.onnx --passes=critical-path --load-plugin=examples/uniform_cost.py --stats

User errors (bad input file, bad pipeline, verifier failures) print one line
``where: error: what`` (then, for text inputs, the source line and a caret) and exit 1; no output
file is left behind. Any other exception is a graphir bug: it prints
``error: internal error in <stage>: <type>: <message> (please report: ...)`` and exits 2, with the
traceback only under ``--debug``.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import re
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from graphir.budget import ALLOW_OOM
from graphir.cluster import DEFAULT_CLUSTER
from graphir.driver.api import run_pipeline
from graphir.driver.builtin import load_builtin_emitters, load_builtin_passes
from graphir.driver.clusters import list_clusters, resolve_cluster
from graphir.emit import CURRENT_RUN, RUNNERS, PipelineRun
from graphir.errors import GraphIRError, describe_exception
from graphir.fileio import write_atomically
from graphir.gcpause import freeze_after_pauses
from graphir.importers import load_module
from graphir.ir import Module
from graphir.parser import parse_module
from graphir.pass_infra import (
    OptionInfo,
    Pass,
    format_option,
    load_pass_plugins,
    load_plugin,
    pass_options,
    plain_summary,
)
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.printer import PRINT_JOBS
from graphir.runguard import ALLOW_IO_OPS, DEFAULT_RUN_TIMEOUT_S, IO_FLAG, RUN_MEMORY_LIMIT, RUN_TIMEOUT

SPLIT_MARKER = "// -----"


def _integer_at_least(minimum: int, what: str, meaning: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``minimum``, else a one-line error naming ``what``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"invalid {what} '{text}': expected an integer >= {minimum}{meaning}")
        return value

    return parse


_seed = _integer_at_least(0, "seed")
_steps = _integer_at_least(1, "step count")
_jobs = _integer_at_least(0, "job count", " (0: automatic)")


def _seconds(text: str) -> float:
    """An argparse ``type``: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"invalid time limit '{text}': expected a positive number of seconds")
    return value


class _StoreEmit(argparse.Action):
    """``--emit``: store the format and note that it was given (``--compare`` changes only the default)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option: object = None
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.emit_given = True


class _ArgumentParser(argparse.ArgumentParser):
    """Usage errors are user errors too: one line, exit status 1 (argparse's default is 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(1, f"{self.prog}: error: {message} (see --help)\n")


def build_arg_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = _ArgumentParser(
        prog="graphir-opt",
        description=(
            "Import a model, run a pass pipeline over its typed graph IR, and emit the result. Inputs: ONNX "
            "(.onnx), graphir text (.gir; '-' reads it from stdin), a TensorFlow GraphDef (.pb binary, .pbtxt "
            "text) or a TensorFlow SavedModel directory (one holding saved_model.pb)."
        ),
        epilog=(
            "Pipelines use the xDSL/MLIR grammar: 'a,b{key=value list=x,y},c'. Missing prerequisites "
            f"(facts a pass requires) are produced by the pass that provides them. Default cluster: {DEFAULT_CLUSTER}. "
            "Exit status: 0 on success; 1 on a user error (bad input, pipeline or option; reported in one line); "
            "2 on an internal error (a graphir bug: one line naming the stage, --debug prints the traceback); "
            "130 when interrupted."
        ),
    )
    parser.add_argument(
        "input",
        nargs="?",
        help="model: .onnx, .gir, TensorFlow GraphDef .pb/.pbtxt, SavedModel directory, or '-' for .gir on stdin",
    )
    parser.add_argument(
        "--tf-variables",
        metavar="CKPT",
        type=Path,
        help="TensorFlow checkpoint (prefix, directory or SavedModel) giving the variable shapes a GraphDef "
        "input saved with as_graph_def()/tf.io.write_graph lacks",
    )
    parser.add_argument("-p", "--passes", default="", metavar="PIPELINE", help="pass pipeline to run")
    parser.add_argument("--cluster", metavar="SPEC", help=f"cluster shorthand or TOML file (default {DEFAULT_CLUSTER})")
    parser.add_argument(
        "--emit", default="gir", action=_StoreEmit, metavar="FORMAT", help="output format (see --list-emitters)"
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write output to FILE instead of stdout ('-': stdout, as without -o)"
    )
    parser.add_argument(
        "--compare",
        metavar="PLACERS",
        help="run these placers (comma-separated names from --list-passes, place's algorithms; empty: "
        "single and the published ones) on copies of the module after the pipeline, keep the best placement "
        "and emit the comparison (--emit=compare unless another format is given: a table; with -o DIR/ "
        "also JSON and an HTML page)",
    )
    parser.add_argument("--seed", type=_seed, default=0, help="seed (>= 0) for randomised passes (default 0)")
    parser.add_argument("--split-input-file", action="store_true", help=f"process chunks separated by '{SPLIT_MARKER}'")
    parser.add_argument(
        "--verify-diagnostics",
        action="store_true",
        help="check errors against '// expected-error@+N {{text}}' comments in the .gir input (exit 0 when all match)",
    )
    parser.add_argument("--no-verify", action="store_true", help="do not run the verifier after each pass")
    parser.add_argument(
        "--verify-each",
        action="store_true",
        help="run the full verifier after every pass (default: after the first check, only what the pass changed)",
    )
    parser.add_argument("--print-ir-after-all", action="store_true", help="print the IR to stderr after every pass")
    parser.add_argument(
        "--print-ir-after", action="append", default=[], metavar="PASS", help="print the IR after PASS (repeatable)"
    )
    parser.add_argument("--timing", action="store_true", help="print a pass timing report to stderr")
    parser.add_argument("--stats", action="store_true", help="print pass statistics to stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="progress and auto-inserted passes on stderr")
    parser.add_argument(
        "--load-plugin", action="append", default=[], metavar="MODULE", help="import a pass plugin (module or .py file)"
    )
    parser.add_argument(
        "--run-tf",
        type=_steps,
        metavar="STEPS",
        help="after the pipeline, run STEPS timed steps of the lowered graph on TensorFlow (the cluster's devices) "
        "and print the median step time next to the simulated makespan on stderr",
    )
    parser.add_argument(
        IO_FLAG,
        action="store_true",
        help="run models whose ops read or write files, use the network or other processes, call back into "
        "Python or are not registered in TensorFlow (profile modes that measure, --run-tf); refused by default, "
        "before anything runs (importing, placing, simulating and lowering them is always allowed)",
    )
    parser.add_argument(
        "--run-timeout",
        type=_seconds,
        default=DEFAULT_RUN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"time limit of each run of the model (a measuring profile mode, --run-tf; default "
        f"{DEFAULT_RUN_TIMEOUT_S:g}): a run still going is ended, its workers stopped, and reported in one line",
    )
    parser.add_argument(
        "--run-memory-mb",
        type=_integer_at_least(1, "memory limit"),
        metavar="MIB",
        help="memory a run of the model may use, in MiB (default: what the machine has available); a run that "
        "would need more, as far as it is known beforehand, is refused before it starts",
    )
    parser.add_argument(
        "--allow-oom",
        action="store_true",
        help="let placement place nodes whose own memory exceeds every device (for analysis; refused by default)",
    )
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=0,
        metavar="N",
        help="processes that print the .gir text of a graph of 20,000 nodes or more (forked copies of this one; "
        "the output is the same bytes); default 0: two when two cores are available and the graph has at most "
        "400,000 nodes (above, the copied pages cost what the second process saves), else one",
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error (exit status 2)")
    parser.add_argument("--list-passes", action="store_true", help="list passes with their options and exit")
    parser.add_argument("--list-emitters", action="store_true", help="list output formats and exit")
    parser.add_argument("--list-clusters", action="store_true", help="list cluster presets and shorthands and exit")
    return parser


def list_passes() -> str:
    """Every registered pass with its description, requirements and typed options."""
    lines = []
    for name, cls in sorted(load_builtin_passes().items()):
        lines.append(f"{name}: {plain_summary(cls)}")
        if cls.requires:
            lines.append(f"    requires: {', '.join(cls.requires)}")
        if cls.provides:
            lines.append(f"    provides: {', '.join(cls.provides)}")
        lines += _option_lines(pass_options(cls).values(), "    ")
        if cls.algorithms is not None:
            selector = cls.algorithm_selector.replace("_", "-")
            for algo, algorithm in sorted(cls.algorithms.items()):
                lines.append(f"    {selector}={algo}: {plain_summary(algorithm)}")
                lines += _option_lines(pass_options(algorithm).values(), "        ")
    return "\n".join(lines) + "\n"


def _option_lines(options: Iterable[OptionInfo], indent: str) -> list[str]:
    """``name: type = default`` per option."""
    out = []
    for option in options:
        shown = "none" if option.default is None else format_option(option.default)
        out.append(f"{indent}{option.name}: {option.type_text} = {shown}")
    return out


def _load_inputs(args: argparse.Namespace) -> list[tuple[str, int]] | Module:
    """The input as one module, or as `.gir` chunks (text, first line number) with --split-input-file."""
    if args.input == "-":
        text, name = sys.stdin.read(), "<stdin>"
    elif args.split_input_file or args.verify_diagnostics:
        path = Path(args.input)
        try:
            text, name = path.read_text(), str(path)
        except OSError as exc:
            raise GraphIRError(f"cannot read '{path}': {exc.strerror or exc}") from None
    else:
        return load_module(args.input, tf_variables=args.tf_variables)
    args.input_name = name
    if not args.split_input_file:
        return [(text, 0)]
    chunks: list[tuple[str, int]] = []
    current: list[str] = []
    first_line = 0
    for number, line in enumerate(text.splitlines(keepends=True)):
        if line.strip() == SPLIT_MARKER:
            chunks.append(("".join(current), first_line))
            current, first_line = [], number + 1
        else:
            current.append(line)
    chunks.append(("".join(current), first_line))
    return chunks


def _pipeline(args: argparse.Namespace) -> list[Pass]:
    """The passes of ``--passes``.

    Without any, only the pass plugins are imported (see
    :func:`~graphir.pass_infra.load_pass_plugins`), not the built-in passes.
    """
    if not args.passes:
        load_pass_plugins()
        return []
    load_builtin_passes()
    return parse_pipeline(args.passes)


def _process(module: Module, args: argparse.Namespace, chunk: int | None = None) -> str:
    passes = _pipeline(args)
    for name in (n for item in args.print_ir_after for n in item.split(",")):
        known = load_builtin_passes()
        if name not in known:
            raise GraphIRError(f"--print-ir-after: unknown pass '{name}' (known passes: {', '.join(sorted(known))})")

    def report_timing_and_stats(manager: PassManager) -> None:
        if args.timing:
            print(manager.timing_report(), file=sys.stderr)
        if args.stats and manager.records:
            print(manager.stats_report(), file=sys.stderr)

    args.stage = "the pass pipeline"
    plan = run_pipeline(
        module,
        passes,
        cluster=args.cluster,
        seed=args.seed,
        verbose=args.verbose,
        verify=not args.no_verify,
        verify_full=args.verify_each,
        print_ir_after_all=args.print_ir_after_all,
        print_ir_after=frozenset(n for item in args.print_ir_after for n in item.split(",")),
        finished=report_timing_and_stats,
    )
    emitters = load_builtin_emitters()
    if args.run_tf:
        print(RUNNERS["tf"](module, args.run_tf, args.seed), file=sys.stderr)
    args.stage = f"emitter '{args.emit}'"
    token = CURRENT_RUN.set(PipelineRun(plan.run.passes, chunk))
    try:
        return emitters[args.emit].run(module, Path(args.output) if args.output else None)
    finally:
        CURRENT_RUN.reset(token)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    try:
        args = build_arg_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already reported in one line
        return exc.code if isinstance(exc.code, int) else 1
    if args.output == "-":
        args.output = None  # the usual spelling of standard output, not a file named '-'
    args.stage = "start-up"
    token = ALLOW_OOM.set(args.allow_oom)
    jobs_token = PRINT_JOBS.set(args.jobs)
    io_token = ALLOW_IO_OPS.set(args.allow_io_ops)
    timeout_token = RUN_TIMEOUT.set(args.run_timeout)
    memory_token = RUN_MEMORY_LIMIT.set(None if args.run_memory_mb is None else args.run_memory_mb << 20)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning(args)
            return _run(args)
    except GraphIRError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("graphir-opt: interrupted", file=sys.stderr)
        return 130
    except RecursionError:  # hostile nesting ([[[[...) reached a recursive reader: the input's fault
        where = f"{args.input}: " if args.input else ""
        print(f"{where}error: input nested too deeply (recursion limit reached in {args.stage})", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug, not a user error: one line, exit 2, the traceback on request
        _report_internal_error(exc, args)
        return 2
    finally:
        RUN_MEMORY_LIMIT.reset(memory_token)
        RUN_TIMEOUT.reset(timeout_token)
        ALLOW_IO_OPS.reset(io_token)
        PRINT_JOBS.reset(jobs_token)
        ALLOW_OOM.reset(token)


def _one_line_warning(args: argparse.Namespace) -> object:
    """Library warnings (numpy overflow casts...) as one ``<input>: warning: ...`` line, not two with source."""

    def show(message: Warning | str, category: type[Warning], *_: object, **__: object) -> None:
        where = f"{args.input}: " if args.input else ""
        text = " ".join(str(message).split())
        print(f"{where}warning: {category.__name__}: {text}", file=sys.stderr)

    return show


_PASS_INTERNAL = re.compile(r"^internal error in (pass '[^']*')")


def _report_internal_error(exc: Exception, args: argparse.Namespace) -> None:
    """``error: internal error in <stage>: <type>: <message> (please report ...)``, traceback with --debug.

    The pass manager wraps a pass's exception as ``RuntimeError("internal error in pass 'x' ...")``
    chained to the original: the stage is then that pass and the message the original's.
    """
    stage, cause = args.stage, exc
    match = _PASS_INTERNAL.match(str(exc))
    if match and exc.__cause__ is not None:
        stage, cause = match.group(1), exc.__cause__
    sys.stdout.flush()
    if args.debug:
        traceback.print_exception(exc, file=sys.stderr)
    print(
        f"error: internal error in {stage}: {describe_exception(cause)} "
        "(please report: rerun with --debug for the traceback)",
        file=sys.stderr,
    )


def _run(args: argparse.Namespace) -> int:
    """The driver proper: user errors propagate as :class:`GraphIRError` to :func:`run`."""
    for plugin in args.load_plugin:
        load_plugin(plugin)
    if args.list_passes:
        sys.stdout.write(list_passes())
        return 0
    if args.list_clusters:
        sys.stdout.write(list_clusters())
        return 0
    emitters = load_builtin_emitters()
    if args.list_emitters:
        for name, emitter in sorted(emitters.items()):
            print(f"{name}: {emitter.help}")
        return 0
    if args.input is None:
        raise GraphIRError("no input file given (try 'graphir-opt --help')")
    if args.emit not in emitters:
        raise GraphIRError(f"unknown output format '{args.emit}' (known: {', '.join(sorted(emitters))})")
    if args.cluster:
        resolve_cluster(args.cluster)
    if args.compare is not None:
        _add_compare(args)
    _pipeline(args)  # report pipeline errors before any (possibly slow) import
    if args.output and args.output.endswith(("/", os.sep)) and emitters[args.emit].writes_files:
        _make_output_dir(Path(args.output))  # `-o out/` names a directory even before it exists
    args.stage = "the importer"
    loaded = _load_inputs(args)
    if isinstance(loaded, Module):
        output = _process(loaded, args)
        failed = False
    else:
        output, failed = _process_chunks(loaded, args)
    args.stage = "writing the output"
    if args.output and not failed:
        write_atomically(emitters[args.emit].text_path(Path(args.output)), output)
    elif not args.output:
        sys.stdout.write(output)
    return 1 if failed else 0


def _add_compare(args: argparse.Namespace) -> None:
    """``--compare=a,b``: append ``compare{algos=a,b}`` to the pipeline; emit the comparison by default."""
    algos = ",".join(name.strip() for name in args.compare.split(",") if name.strip())
    step = f"compare{{algos={algos}}}" if algos else "compare"
    args.passes = f"{args.passes},{step}" if args.passes.strip() else step
    if not getattr(args, "emit_given", False):  # by default a comparison run emits the comparison
        args.emit = "compare"


def _make_output_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GraphIRError(f"cannot create directory '{path}': {exc.strerror or exc}") from None


_EXPECTED = re.compile(r"//\s*expected-error(?:@([+-]\d+))?\s*\{\{(.*?)\}\}")


def _verify_chunk(text: str, first_line: int, args: argparse.Namespace) -> bool:
    """``--verify-diagnostics``: the chunk's error must be the one its comments announce.

    ``// expected-error {{text}}`` expects an error on its own line whose message contains
    ``text``; ``// expected-error@+1 {{text}}`` (or ``@-2``) on a line relative to the comment. A
    chunk that announces nothing must succeed. Mismatches are reported as errors; matched ones
    print nothing.
    """
    expected: list[tuple[int, str, int]] = []  # (target line, text, comment line)
    for number, line in enumerate(text.splitlines(), start=first_line + 1):
        for match in _EXPECTED.finditer(line):
            offset = int(match.group(1)) if match.group(1) else 0
            expected.append((number + offset, match.group(2), number))
    error: GraphIRError | None = None
    try:
        _process(parse_module("\n" * first_line + text, args.input_name), args)
    except GraphIRError as exc:
        error = exc
    ok = True
    if error is not None:
        hit = next((e for e in expected if e[0] == error.loc.line and e[1] in error.message), None)
        if hit is None:
            print(f"{args.input_name}:{error.loc.line}: error: unexpected error: {error.one_line()}", file=sys.stderr)
            ok = False
        else:
            expected.remove(hit)
    for _, message, comment_line in expected:
        print(f"{args.input_name}:{comment_line}: error: expected error '{message}' was not produced", file=sys.stderr)
        ok = False
    return ok


def _process_chunks(chunks: list[tuple[str, int]], args: argparse.Namespace) -> tuple[str, bool]:
    """Run every chunk; errors are reported per chunk and make the run fail at the end."""
    outputs: list[str] = []
    failed = False
    for position, (text, first_line) in enumerate(chunks):
        if args.verify_diagnostics:
            failed |= not _verify_chunk(text, first_line, args)
            continue
        try:
            module = parse_module("\n" * first_line + text, args.input_name)
            outputs.append(_process(module, args, position if len(chunks) > 1 else None))
        except GraphIRError as exc:
            print(exc.render(), file=sys.stderr)
            failed = True
    return f"{SPLIT_MARKER}\n".join(outputs), failed


def main() -> None:
    """Console-script entry point.

    The process is one-shot: the imported graph lives until exit, so the cyclic collector is
    told never to walk it again (:func:`~graphir.gcpause.freeze_after_pauses`; the objects of the
    imported Python modules are frozen first), and the process ends without freeing it
    (:func:`exit_without_teardown`).
    """
    gc.freeze()
    freeze_after_pauses()
    exit_without_teardown(run())


def exit_without_teardown(status: int) -> NoReturn:
    """End the process with ``status`` as :func:`sys.exit` would, but without the interpreter's teardown.

    The teardown frees every object still alive one by one, the frozen graph included: 0.7 s of a
    1M-node ``--emit=summary`` (0.05 s at 100k nodes), for memory the operating system takes back
    at once. The exit handlers (:mod:`atexit`: logging, ``weakref.finalize``, TensorFlow's) still
    run and the standard streams are flushed. While a thread that is not a daemon is still running,
    the normal exit (which waits for it) is taken instead.
    """
    threading = sys.modules.get("threading")
    if threading is not None:
        main_thread = threading.main_thread()
        if any(t is not main_thread and not t.daemon and t.is_alive() for t in threading.enumerate()):
            sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (`| head`), or a closed stream
            pass
    os._exit(status)
