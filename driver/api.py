"""The Python API: from a model in memory (or on disk) to a placed, simulated plan.

``graphir-opt`` and these functions share one path: the command line parses its flags and calls
:func:`run_pipeline`, as :func:`place` does, so the same model, pipeline, cluster and seed give the
same placement, makespan and report either way::

    import graphir

    plan = graphir.place("examples/squeezenet.onnx", cluster="celeritas", passes="fuse,place")
    print(plan.makespan, plan.fits, plan.peak_memory["gpu0"])
    print(plan.report())                      # the text of --emit=report
    plan.save("out/plan.json", emit="placement")
    outputs = plan.to_tf()(images)            # the lowered tf.function, every op on its device

A model is a path (every input ``graphir-opt`` takes, ``zoo:<name>`` included), an
``onnx.ModelProto``, a ``tf.Graph`` or ``GraphDef``, a ``tf.function`` (with its input signature)
or its concrete function, a Keras model (its forward pass; its training step with ``train=True``, a
``loss`` and an ``optimizer``), or a :class:`~graphir.ir.Module`.

Errors are the command line's: a :class:`~graphir.errors.GraphIRError` subclass carrying the same
one-line message (``PassOptionError`` for a bad pipeline, ``ImportError_`` for an unreadable
model...), never ``SystemExit``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from graphir.budget import ALLOW_OOM
from graphir.cluster import DEFAULT_CLUSTER
from graphir.comparison import ComparisonRow
from graphir.driver.builtin import load_builtin_emitters, load_builtin_passes
from graphir.driver.clusters import resolve_cluster
from graphir.emit import CURRENT_RUN, PipelineRun
from graphir.errors import GraphIRError, ImportError_
from graphir.fileio import write_atomically
from graphir.importers import load_module
from graphir.ir import Module
from graphir.pass_infra import Pass, PassContext, PassResult, Stat
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline
from graphir.runguard import ALLOW_IO_OPS
from graphir.simulator import SimResult, simulate

if TYPE_CHECKING:
    from graphir.backends.tf.lowering import LoweredGraph

__all__ = ["Compared", "Plan", "compare", "load", "parallelize", "place", "run_pipeline"]

_SUFFIX_EMITTERS = {
    ".gir": "gir",
    ".json": "json",
    ".pb": "tf-graphdef",
    ".pbtxt": "tf-graphdef",
    ".html": "report",
}
"""The emitter :meth:`Plan.save` picks from the path's suffix when ``emit`` is not given."""

_LOAD_OPTIONS = frozenset({"train", "loss", "optimizer", "input_signature", "label_signature", "tf_variables", "name"})
_RUN_OPTIONS = frozenset({"verbose", "allow_oom", "allow_io_ops", "verify"})


# ------------------------------------------------------------------------------------ the plan


class Plan:
    """A module after a pass pipeline: its placement, simulated step and memory, and how to use it.

    The numbers come from the simulator under the rules of the pipeline's last ``simulate`` pass
    (the defaults without one), exactly what ``--emit=report`` prints.

    Attributes:
        module: the module the pipeline produced (placed when the pipeline placed it).
        run: the passes that ran, with their statistics (what the report's header lists).
    """

    def __init__(self, module: Module, run: PipelineRun) -> None:
        self.module = module
        self.run = run

    def __repr__(self) -> str:
        placed = "placed" if self.placement else "not placed"
        return f"Plan({self.module.name!r}, {len(self.module.graph)} nodes, {placed})"

    @functools.cached_property
    def placement(self) -> dict[str, str]:
        """Node name -> device name, for every node the pipeline placed."""
        out: dict[str, str] = {}
        for node in self.module.graph.nodes:
            device = node.annotations.get("device")
            if isinstance(device, str):
                out[node.name] = device
        return out

    @functools.cached_property
    def simulation(self) -> SimResult:
        """The simulator's result for the placed module (raises ``PassError`` when it is not placed)."""
        from graphir.backends.report.data import simulate_rules

        congestion, order = simulate_rules(self.run)
        return simulate(self.module, congestion, order)

    @property
    def makespan(self) -> float:
        """Simulated step time in seconds."""
        return float(self.simulation.makespan)

    @property
    def peak_memory(self) -> dict[str, int]:
        """Device name -> simulated peak bytes (persistent + live activations + temporaries)."""
        sim = self.simulation
        return {name: int(sim.peak_memory[k]) for k, name in enumerate(sim.device_names)}

    @property
    def fits(self) -> bool:
        """Whether every device's peak memory is within its capacity."""
        sim = self.simulation
        return bool((sim.peak_memory <= sim.memory_limit).all())

    @property
    def stats(self) -> dict[str, Stat]:
        """Every pass's statistics as ``pass.key -> value`` (what ``--stats`` prints; a later pass wins)."""
        out: dict[str, Stat] = {}
        for spec, _auto, stats in self.run.passes:
            name = spec.split("{", 1)[0].strip()
            for key, value in stats.items():
                out[f"{name}.{key}"] = value
        return out

    def emit(self, emit: str, output: str | Path | None = None) -> str:
        """The text of ``--emit=<emit>`` for this plan (with ``output``, also the files it writes)."""
        emitters = load_builtin_emitters()
        if emit not in emitters:
            raise GraphIRError(f"unknown output format '{emit}' (known: {', '.join(sorted(emitters))})")
        token = CURRENT_RUN.set(self.run)
        try:
            return emitters[emit].run(self.module, None if output is None else Path(output))
        finally:
            CURRENT_RUN.reset(token)

    def report(self) -> str:
        """The text ``--emit=report`` prints: makespan, busy time, memory, links, OOM devices."""
        return self.emit("report")

    def save(self, path: str | Path, emit: str | None = None) -> Path:
        """Write the plan as ``graphir-opt -o path --emit=<emit>`` would; returns the path written.

        Args:
            path: the output file (or directory, for ``tf-savedmodel`` and the report's files).
            emit: an emitter name (``--list-emitters``); default from the suffix: ``.gir`` gir,
                ``.json`` json, ``.pb``/``.pbtxt`` tf-graphdef, ``.html`` report.
        """
        target = Path(path)
        if emit is None:
            emit = _SUFFIX_EMITTERS.get(target.suffix)
            if emit is None:
                known = ", ".join(f"{suffix} ({name})" for suffix, name in _SUFFIX_EMITTERS.items())
                raise GraphIRError(f"'{target}': no output format for this suffix; pass emit=... (suffixes: {known})")
        text = self.emit(emit, target)  # an emitter that writes files writes them here
        write_atomically(load_builtin_emitters()[emit].text_path(target), text)  # then the text, as -o does
        return target

    def to_tf(self) -> LoweredGraph:
        """The module lowered to TensorFlow, every op on its device: call it with the inputs.

        Returns a :class:`~graphir.backends.tf.lowering.LoweredGraph` (a callable whose
        ``function`` is the ``tf.function``; ``graph_def()`` gives the GraphDef). A module with
        TensorFlow variables (a training step, a ``tf.function`` that reads ``tf.Variable``s)
        lowers to a graph whose variables start uninitialised: run their initialisers, or
        place a frozen graph (a Keras model's forward pass is frozen by :func:`load`).
        """
        from graphir.backends.tf import lower

        return lower(self.module)


# ------------------------------------------------------------------------------------ loading


def load(model: object, **options: Any) -> Module:
    """Import ``model`` into graphir's IR.

    ``model`` is typed ``object``: ONNX, TensorFlow and Keras types are not importable without
    their frameworks, so they are told apart by what they are at run time.

    Args:
        model: a path (``.onnx``, ``.gir``, ``.pb``/``.pbtxt``, a SavedModel directory, ``zoo:<name>``),
            an ``onnx.ModelProto``, a ``tf.Graph`` or ``GraphDef``, a ``tf.function`` (with an input
            signature, or pass ``input_signature``), a concrete function, a Keras model or a Module
            (returned as it is).
        **options: ``name`` (the module's name); ``tf_variables`` (a checkpoint completing a
            GraphDef path's variable shapes); for a ``tf.function`` or Keras model,
            ``input_signature`` (a list of ``tf.TensorSpec``; a Keras model's own inputs by
            default); for a Keras model, ``train=True`` with ``loss`` (a Keras loss or its name) and
            ``optimizer`` (a Keras optimizer or its name) to import one training step (forward,
            gradients, update; its variables stay variables) instead of the forward pass (whose
            weights are frozen into constants, as in an exported inference graph), and
            ``label_signature`` (a ``tf.TensorSpec``; default: the model output's shape and dtype).

    Raises:
        ImportError_: the model cannot be read or converted (one line naming it).
    """
    unknown = set(options) - _LOAD_OPTIONS
    if unknown:
        raise GraphIRError(
            f"graphir.load: unknown option(s) {', '.join(sorted(unknown))} (known: {_known(_LOAD_OPTIONS)})"
        )
    name = options.get("name")
    if isinstance(model, Module):
        return model
    if isinstance(model, (str, Path)):
        variables = options.get("tf_variables")
        module = load_module(model, tf_variables=None if variables is None else Path(variables))
    else:
        module = _load_object(model, options)
    if name is not None:
        module.name = str(name)
    return module


def _known(names: frozenset[str]) -> str:
    return ", ".join(sorted(names))


def _load_object(model: Any, options: Mapping[str, Any]) -> Module:
    """An in-memory model by what it is (duck-typed: no framework is imported to tell)."""
    kind = type(model).__name__
    if kind == "ModelProto" and hasattr(model, "graph"):
        return _load_onnx_proto(model)
    if hasattr(model, "as_graph_def") and hasattr(model, "get_operations"):  # tf.Graph
        return _load_graphdef(model.as_graph_def(), options, "<tf.Graph>")
    if kind == "GraphDef" and hasattr(model, "node"):
        return _load_graphdef(model, options, "<GraphDef>")
    if _is_keras_model(model):
        return _load_keras(model, options)
    if hasattr(model, "structured_input_signature") and hasattr(model, "graph"):  # a concrete function
        return _from_concrete(model, options)
    if hasattr(model, "get_concrete_function"):  # a tf.function
        signature = options.get("input_signature")
        try:
            concrete = model.get_concrete_function(*signature) if signature else model.get_concrete_function()
        except (TypeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ImportError_(
                f"cannot trace the tf.function: {first} (give it an input_signature, or pass input_signature=[...])"
            ) from None
        return _from_concrete(concrete, options)
    raise ImportError_(
        f"graphir.load: cannot import a {type(model).__module__}.{kind} (expected a path, onnx.ModelProto, "
        "tf.Graph, GraphDef, tf.function, concrete function, Keras model or Module)"
    )


def _load_onnx_proto(model: Any) -> Module:
    import onnx

    from graphir.importers.onnx import import_onnx

    stem = re.sub(r"[^A-Za-z0-9_]", "_", str(model.graph.name or "model")) or "model"
    with tempfile.TemporaryDirectory(prefix="graphir-onnx-") as folder:
        path = Path(folder) / f"{stem}.onnx"
        onnx.save_model(model, str(path))
        return import_onnx(path)


def _load_graphdef(graph_def: Any, options: Mapping[str, Any], source: str) -> Module:
    from graphir.importers.tf import import_graphdef

    variables = options.get("tf_variables")
    return import_graphdef(
        graph_def,
        name=str(options.get("name") or "graph"),
        source=source,
        variables=None if variables is None else Path(variables),
    )


def _from_concrete(concrete: Any, options: Mapping[str, Any]) -> Module:
    from graphir.importers.tf import from_concrete_function

    name = options.get("name")
    return from_concrete_function(concrete, name=None if name is None else str(name))


def _is_keras_model(model: Any) -> bool:
    """A Keras model (Keras 3 or tf-keras): callable, with layers and trainable variables."""
    return (
        type(model).__module__.startswith(("keras", "tf_keras"))
        and callable(model)
        and hasattr(model, "layers")
        and hasattr(model, "trainable_variables")
    )


def _keras_specs(model: Any, options: Mapping[str, Any]) -> list[Any]:
    import tensorflow as tf

    signature = options.get("input_signature")
    if signature:
        return list(signature)
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise ImportError_(
            f"Keras model '{getattr(model, 'name', 'model')}' has no known inputs (a subclassed model "
            "that was never built): pass input_signature=[tf.TensorSpec(shape, dtype), ...]"
        )
    specs = []
    for k, tensor in enumerate(inputs):
        shape = tuple(tensor.shape)
        if any(d is None for d in shape):
            raise ImportError_(
                f"Keras model '{model.name}': input {k} has shape {shape} with an unknown dimension (the batch): "
                "pass input_signature=[tf.TensorSpec((batch, ...), dtype), ...] with every dimension known"
            )
        specs.append(tf.TensorSpec(shape, tf.as_dtype(str(tensor.dtype)), name=f"input_{k}"))
    return specs


def _load_keras(model: Any, options: Mapping[str, Any]) -> Module:
    import tensorflow as tf

    specs = _keras_specs(model, options)
    single = len(specs) == 1
    name = str(options.get("name") or getattr(model, "name", "model"))
    if not options.get("train"):

        def forward(*inputs: Any) -> Any:
            return model(inputs[0] if single else list(inputs), training=False)

        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        concrete = tf.function(forward, autograph=False).get_concrete_function(*specs)
        # The forward pass of a trained model: its weights are constants (as in an exported
        # inference graph), so the plan's ``to_tf()`` carries them and computes what the model does.
        return _from_concrete(convert_variables_to_constants_v2(concrete), {"name": name})
    import keras

    loss_option, optimizer_option = options.get("loss"), options.get("optimizer")
    if loss_option is None or optimizer_option is None:
        raise ImportError_("graphir.load: train=True needs loss=... and optimizer=... (a Keras loss and optimizer)")
    loss_fn: Any = keras.losses.get(loss_option) if isinstance(loss_option, str) else loss_option
    optimizer: Any = keras.optimizers.get(optimizer_option) if isinstance(optimizer_option, str) else optimizer_option
    label_spec = options.get("label_signature")
    if label_spec is None:
        out = model.compute_output_spec(*[keras.KerasTensor(s.shape, s.dtype.name) for s in specs])
        label_spec = tf.TensorSpec(tuple(out.shape), tf.as_dtype(str(out.dtype)), name="labels")
    trainable = list(model.trainable_variables)
    optimizer.build(trainable)

    def step(*tensors: Any) -> Any:
        *inputs, labels = tensors
        with tf.GradientTape() as tape:
            prediction = model(inputs[0] if single else list(inputs), training=True)
            loss = loss_fn(labels, prediction)
        gradients = tape.gradient(loss, trainable)
        optimizer.apply_gradients(zip(gradients, trainable, strict=True))
        return loss

    concrete = tf.function(step, autograph=False).get_concrete_function(*specs, label_spec)
    return _from_concrete(concrete, {"name": name})


# ------------------------------------------------------------------------------------ running


@contextlib.contextmanager
def _run_options(options: Mapping[str, Any]) -> Iterator[None]:
    """The run-wide switches the command line sets from its flags (``--allow-oom``, ``--allow-io-ops``)."""
    oom = ALLOW_OOM.set(bool(options.get("allow_oom", False)))
    io = ALLOW_IO_OPS.set(bool(options.get("allow_io_ops", False)))
    try:
        yield
    finally:
        ALLOW_IO_OPS.reset(io)
        ALLOW_OOM.reset(oom)


def run_pipeline(
    module: Module,
    passes: str | Sequence[Pass],
    *,
    cluster: str | None = None,
    seed: int = 0,
    verbose: bool = False,
    verify: bool = True,
    verify_full: bool = False,
    print_ir_after_all: bool = False,
    print_ir_after: frozenset[str] = frozenset(),
    finished: Callable[[PassManager], None] | None = None,
) -> Plan:
    """Run a pass pipeline over ``module`` in place: the one path of ``graphir-opt`` and :func:`place`.

    Args:
        module: the module (changed in place).
        passes: pipeline text (``fuse,place{algo=metis}``) or parsed passes.
        cluster: cluster spec (preset, shorthand or TOML path); ``None`` keeps the module's own.
        seed: the pipeline seed.
        verbose: progress and auto-inserted passes on stderr.
        verify: run the verifier after each pass.
        verify_full: make each of those checks the full one (``--verify-each``).
        print_ir_after_all: print the IR to stderr after every pass.
        print_ir_after: pass names after which to print the IR.
        finished: called with the pass manager after the run, also when a pass failed (the
            command line prints ``--timing`` and ``--stats`` there).

    Raises:
        GraphIRError: a bad pipeline, cluster or input, or a pass that refuses the module.
    """
    if cluster:
        module.set_cluster(resolve_cluster(cluster))
    pipeline = list(_parse(passes)) if isinstance(passes, str) else list(passes)
    manager = PassManager(
        pipeline,
        verify_each=verify,
        verify_full=verify_full,
        print_ir_after_all=print_ir_after_all,
        print_ir_after=print_ir_after,
    )
    try:
        manager.run(module, PassContext(seed=seed, verbose=verbose))
    finally:
        if finished is not None:
            finished(manager)
    records = tuple((r.pass_.spec(), r.auto, dict(r.result.stats)) for r in manager.records)
    return Plan(module, PipelineRun(records))


def _parse(passes: str) -> list[Pass]:
    if not passes.strip():
        return []
    load_builtin_passes()
    return parse_pipeline(passes)


def _split_options(
    options: Mapping[str, Any], extra: frozenset[str] = frozenset()
) -> tuple[dict[str, Any], dict[str, Any]]:
    known = _LOAD_OPTIONS | _RUN_OPTIONS | extra
    unknown = set(options) - known
    if unknown:
        raise GraphIRError(f"unknown option(s) {', '.join(sorted(unknown))} (known: {_known(known)})")
    load_options = {k: v for k, v in options.items() if k in _LOAD_OPTIONS}
    run_options = {k: v for k, v in options.items() if k in _RUN_OPTIONS}
    return load_options, run_options


def place(
    model: object,
    cluster: str = DEFAULT_CLUSTER,
    passes: str = "fuse,place",
    seed: int = 0,
    **options: Any,
) -> Plan:
    """Import ``model`` (a Module is used as it is, not copied), run ``passes`` on ``cluster``, return the plan.

    The same as ``graphir-opt MODEL --cluster=CLUSTER --passes=PASSES --seed=SEED``.

    Args:
        model: anything :func:`load` takes, or a Module.
        cluster: cluster spec: a preset (``celeritas``), a shorthand (``4xV100``) or a TOML file.
        passes: the pass pipeline (``--passes``); prerequisites such as ``profile`` run on their own.
        seed: the pipeline seed.
        **options: :func:`load`'s options, plus ``verbose`` (progress on stderr), ``verify``
            (default true), ``allow_oom`` and ``allow_io_ops`` (``--allow-oom``, ``--allow-io-ops``).

    Raises:
        GraphIRError: the command line's errors (``PassOptionError`` for a bad pipeline...).
    """
    load_options, run_options = _split_options(options)
    pipeline = _parse(passes)  # a bad pipeline fails before a (possibly slow) import, as on the command line
    resolve_cluster(cluster)
    module = load(model, **load_options)
    with _run_options(run_options):
        return run_pipeline(
            module,
            pipeline,
            cluster=cluster,
            seed=seed,
            verbose=bool(run_options.get("verbose", False)),
            verify=bool(run_options.get("verify", True)),
        )


def parallelize(
    model: object,
    cluster: str = DEFAULT_CLUSTER,
    seed: int = 0,
    **options: Any,
) -> Plan:
    """Plan a training step for many devices: data parallelism x pipeline stages x micro-batches, or op placement.

    The same as ``--passes=parallelize`` (:mod:`graphir.passes.parallelize`): the fastest
    memory-feasible candidate as judged by the simulator; ``plan.stats`` lists every candidate.

    Args:
        model: a training graph, or anything :func:`load` takes (a Keras model with ``train=True``).
        cluster: cluster spec.
        seed: the pipeline seed.
        **options: :func:`place`'s, plus ``passes_before`` (pipeline text run first) and
            ``pass_options`` (a dict of ``parallelize`` options, e.g. ``{"max-microbatches": 8}``).
    """
    extra = frozenset({"passes_before", "pass_options"})
    load_options, run_options = _split_options(options, extra)
    pass_options: Mapping[str, object] = options.get("pass_options") or {}
    spec = "parallelize"
    if pass_options:
        spec += "{" + " ".join(f"{key}={_option_text(value)}" for key, value in pass_options.items()) + "}"
    before = str(options.get("passes_before") or "").strip()
    return place(model, cluster, f"{before},{spec}" if before else spec, seed, **load_options, **run_options)


def _option_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_option_text(v) for v in cast("Sequence[object]", value))
    return str(value)


@dataclasses.dataclass(frozen=True)
class Compared:
    """One placer of :func:`compare`: its row of the ``--compare`` table and its plan (``None`` if it failed)."""

    row: ComparisonRow
    plan: Plan | None


_CAPTURED: ContextVar[list[tuple[ComparisonRow, tuple[Module, SimResult] | None]] | None] = ContextVar(
    "graphir_api_compare", default=None
)


def _capturing(judge: Pass) -> Pass:
    """``judge`` (the ``compare`` pass) as one that also hands its placed clones to :func:`compare`.

    The passes are imported here, not at the top: ``graphir-opt`` imports this module and runs
    without any pass when its pipeline is empty.
    """
    from graphir.passes.compare import Compare

    class _CapturingCompare(Compare):
        """The ``compare`` pass that also hands its placed clones to :func:`compare` (not registered)."""

        def run(self, module: Module, ctx: PassContext) -> PassResult:
            placements = self.placements(module, ctx)
            captured = _CAPTURED.get()
            if captured is not None:
                captured.extend(placements)
            return self.record(module, placements, ctx)

    assert isinstance(judge, Compare), "the pipeline ends with the compare pass"
    return _CapturingCompare(**{f.name: getattr(judge, f.name) for f in dataclasses.fields(judge)})


def compare(
    model: object,
    cluster: str = DEFAULT_CLUSTER,
    placers: Sequence[str] = (),
    passes: str = "",
    seed: int = 0,
    **options: Any,
) -> list[Compared]:
    """Run several placers on one model and judge each with the simulator: what ``--compare`` prints.

    The same as ``graphir-opt MODEL --cluster=CLUSTER --passes=PASSES --compare=PLACERS``: the
    pipeline runs, then ``compare`` places a copy of the module per placer and simulates it; the
    module itself keeps the best placement that fits (the last entry's ``plan.module`` is not it:
    each plan holds its own copy).

    Args:
        model: anything :func:`load` takes, or a Module (placed in place with the best placement).
        cluster: cluster spec.
        placers: placer names (``place``'s algorithms); empty: single device and the published ones.
        passes: pipeline text run before the placers (e.g. ``fuse``).
        seed: the pipeline seed.
        **options: :func:`place`'s options.

    Returns:
        One entry per placer, in table order: its row (makespan, peak memory, status, place time)
        and its plan (``None`` when the placer refused the module).
    """
    load_options, run_options = _split_options(options)
    algos = ",".join(name.strip() for name in placers if name.strip())
    step = f"compare{{algos={algos}}}" if algos else "compare"
    pipeline = _parse(f"{passes},{step}" if passes.strip() else step)
    judge = pipeline[-1]
    capturing = _capturing(judge)
    resolve_cluster(cluster)
    module = load(model, **load_options)
    captured: list[tuple[ComparisonRow, tuple[Module, SimResult] | None]] = []
    token = _CAPTURED.set(captured)
    try:
        with _run_options(run_options):
            done = run_pipeline(
                module,
                [*pipeline[:-1], capturing],
                cluster=cluster,
                seed=seed,
                verbose=bool(run_options.get("verbose", False)),
                verify=bool(run_options.get("verify", True)),
            )
    finally:
        _CAPTURED.reset(token)
    before = done.run.passes[:-1]
    out: list[Compared] = []
    for row, placed in captured:
        plan = None
        if placed is not None:
            spec = row.spec
            plan = Plan(placed[0], PipelineRun((*before, (spec, False, {}))))
            plan.__dict__["simulation"] = placed[1]  # the compare pass's own simulation (its rules)
        out.append(Compared(row, plan))
    return out
