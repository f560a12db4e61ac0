"""The ``profile`` pass and the one profiler API: :class:`ProfileMode`, its registry :data:`MODES`.

See :mod:`graphir.passes.profile` for the pass and its modes. This module sits below the modes:
each mode's module imports the API from here and the package imports the modes' modules, so
:data:`MODES` is filled from above and no mode imports the package back.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, TypeVar

import numpy as np

from graphir.cluster import Cluster
from graphir.errors import PassError
from graphir.ir import Module
from graphir.pass_infra import (
    Algorithm,
    AlgorithmRegistry,
    Pass,
    PassContext,
    PassResult,
    pass_options,
    register_algorithm,
    register_pass,
)
from graphir.passes.profile.roofline import GraphWork
from graphir.runguard import RunMemoryError, check_run_memory, check_runnable

DEFAULT_MODE = "analytical"
"""The mode ``profile`` runs when no ``mode`` is given (and when the pass manager auto-runs it)."""


@dataclasses.dataclass(frozen=True)
class ProfileMode(Algorithm):
    """Base of the modes of ``profile{mode=...}`` (frozen dataclasses; fields are their options).

    A mode that runs the model (``runs``) is guarded by :class:`Profile` before it starts: the
    module's ops (:func:`graphir.runguard.check_runnable`, ``--allow-io-ops``) and, when the mode
    runs the module at its own size (``checks_memory``), its memory against this machine's
    (:func:`graphir.runguard.check_run_memory`).
    """

    runs: ClassVar[bool] = False
    checks_memory: ClassVar[bool] = True

    def profile(self, module: Module, ctx: PassContext) -> PassResult:
        """Annotate ``cost`` and ``mem`` on every node of ``module``; the statistics."""
        raise NotImplementedError


MODES: dict[str, type[ProfileMode]] = {}
"""Every profiling mode by ``mode`` name (``tf`` and ``regression`` are in :mod:`graphir.passes.profile.tf`,
``tf-run`` in :mod:`graphir.passes.profile.tf_run`)."""


@register_pass
@dataclasses.dataclass(frozen=True)
class Profile(Pass):
    """Annotate cost (per device kind) and mem on every node with the chosen mode. Provides: cost, mem.

    Options:
        mode: how costs are obtained, a name from the mode registry (``register_profile_mode``):
            ``analytical`` (roofline from shapes), ``onnxruntime`` or ``tf`` (measured on this CPU),
            ``tf-run`` (the module run on the cluster's TF workers), ``regression`` (Celeritas's
            Standard Evaluation); each mode has its own options, listed with it.
    """

    name: ClassVar[str] = "profile"
    provides: ClassVar[tuple[str, ...]] = ("cost", "mem")
    algorithms: ClassVar[AlgorithmRegistry | None] = MODES
    algorithm_selector: ClassVar[str] = "mode"
    algorithm_field: ClassVar[str] = "profiler"
    algorithm_kind: ClassVar[str] = "profiling mode"
    mode: str = DEFAULT_MODE
    profiler: ProfileMode | None = None

    def __post_init__(self) -> None:
        """Reject an unknown mode when the pipeline is parsed; default the mode's options."""
        self.bind_algorithm()

    @classmethod
    def of(cls, mode: str = DEFAULT_MODE, **options: object) -> Profile:
        """``profile{mode=MODE key=value ...}`` from Python: ``Profile.of("tf", iterations=3)``.

        Raises:
            ValueError: unknown mode.
            TypeError: an option the mode does not have.
        """
        if mode not in MODES:
            raise ValueError(cls.unknown_algorithm(mode))
        profiler = MODES[mode]
        own = pass_options(profiler)
        known = {info.field for info in own.values()}
        for key in options:
            if key not in known:
                raise TypeError(
                    f"option '{key.replace('_', '-')}' does not apply to mode={mode} "
                    f"({mode} options: {', '.join(own) or 'none'}; profile options: {', '.join(pass_options(cls))})"
                )
        return cls(mode, profiler(**options))

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        """Run the chosen mode's profiler, which writes the annotations (a running mode is guarded first)."""
        profiler = self.profiler
        assert profiler is not None
        if not profiler.runs:
            return profiler.profile(module, ctx)
        what = f"profile{{mode={profiler.name}}}"
        check_runnable(module, what)
        if profiler.checks_memory:
            check_run_memory(module, what)
        try:
            return profiler.profile(module, ctx)
        except MemoryError:  # sizes the check could not know (unknown dims): still one line
            raise RunMemoryError(f"{what}: this machine cannot allocate the memory the run needs") from None


_ModeT = TypeVar("_ModeT", bound=type[ProfileMode])


def register_profile_mode(cls: _ModeT) -> _ModeT:
    """Class decorator: make ``cls`` available as ``profile{mode=cls.name}``.

    Raises:
        TypeError: no name, a name taken by another class, an unsupported option type, or an
            option named ``mode``.
    """
    register_algorithm(Profile, cls)
    return cls


def check_measurement(iterations: int, warmup: int, threads: int = 0) -> None:
    """Reject measurement options a measured mode cannot run with (a :class:`PassError`)."""
    if iterations < 1:
        raise PassError(f"'iterations' must be >= 1, got {iterations}")
    if warmup < 0 or threads < 0:
        raise PassError("'warmup' and 'threads' must be >= 0")


def kind_times(cluster: Cluster, work: GraphWork) -> dict[str, np.ndarray]:
    """Roofline time per node for each device kind of ``cluster`` (kinds sorted by name)."""
    return {kind: work.times(cluster.kind_device(kind)) for kind in sorted(cluster.kinds)}
