"""Train under one placement strategy on the rig, carrying the variables in and out (FastT's strategy switch).

FastT activates a new strategy by checkpointing the parameters, building the new graph and restoring
them (§4, "Workflow"). The TF 2-era equivalent here: every strategy is its own lowered graph in its
own session on the same running rig workers (:mod:`graphir.backends.tf.rig`); the caller passes the
variables the previous strategy ended with (``variables``), the session assigns them before the
first step, and :attr:`StrategyRun.variables` are the values after the last step. Training therefore
continues across a switch exactly as if the strategy had never changed: the same seeded batch is fed
every step, so the loss after N steps equals that of N steps under one strategy (the rollback test
checks it within 1e-6).

Steps, each one a training step (every step updates the variables): ``warmup`` untimed, then
``trace_steps`` traced (``FULL_TRACE`` ``RunMetadata``), then ``steps`` timed untraced steps, so the
last step of a round is an ordinary one. ``delay_s`` adds that many seconds of wall time to each timed
step: the fault-injection seam that lets a test (or ``graphir-tune --inject-delay``) make one
strategy slow, as a congested link would. The per-node and per-transfer medians and per-node memory
come from the rig's public :func:`graphir.backends.tf.rig.harvest`, as
:func:`graphir.backends.tf.rig.run_on_rig` reports them.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from graphir.attributes import numpy_dtype
from graphir.backends.tf.rig import RigRun, harvest
from graphir.errors import BackendError
from graphir.ir import Module

__all__ = ["StrategyRun", "initial_variables", "optimizer_state", "run_strategy"]


@dataclasses.dataclass
class StrategyRun:
    """One strategy trained for a few steps on the rig.

    Attributes:
        run: the measurements (timed steps, per-node medians, transfers), as :func:`run_on_rig` reports them.
        variables: every variable after the last step, by VarHandleOp node name.
        losses: the first output of every step, in step order (NaN for traced steps and non-numbers).
        steps_run: training steps run (warm-up + traced + timed).
    """

    run: RigRun
    variables: dict[str, np.ndarray]
    losses: list[float]
    steps_run: int

    @property
    def node_memory(self) -> dict[str, tuple[int, int]]:
        """IR node name -> (output bytes, temporary bytes): :attr:`RigRun.node_memory`."""
        return self.run.node_memory


def _handle(value: Any) -> Any:
    """The ``VarHandleOp`` behind a handle or a ``ReadVariableOp`` of it (``None`` otherwise)."""
    node = value.producer
    if node is not None and node.op == "tf.ReadVariableOp" and node.inputs:
        node = node.inputs[0].producer
    return node if node is not None and node.op == "tf.VarHandleOp" else None


def _constant(value: Any) -> np.ndarray | None:
    node = value.producer
    tensor = node.params.get("value") if node is not None and node.op == "tf.Const" else None
    return None if tensor is None else np.asarray(tensor.numpy())


def optimizer_state(module: Module) -> dict[str, np.ndarray]:
    """Adam's initial state for every ``ResourceApplyAdam``: slots ``m``, ``v`` zero, ``beta_power`` = ``beta``.

    The operands say which variable is which (``var, m, v, beta1_power, beta2_power, lr, beta1,
    beta2, epsilon, grad``), so no name is guessed. Seeded N(0,1) values there would make ``v``
    negative and ``1 - beta2_power`` meaningless: the first step's loss would be NaN.
    """
    from graphir.importers.tf import variable_type

    state: dict[str, np.ndarray] = {}
    for node in module.graph.nodes:
        if node.op != "tf.ResourceApplyAdam" or len(node.inputs) < 8:
            continue
        for slot in (node.inputs[1], node.inputs[2]):
            handle = _handle(slot)
            vtype = variable_type(handle) if handle is not None else None
            if handle is not None and vtype is not None and vtype.shape is not None:
                dims = cast(tuple[int, ...], vtype.shape)  # a variable's type is static
                state[handle.name] = np.zeros(tuple(int(d) for d in dims), np.dtype(numpy_dtype(vtype.dtype)))
        for power, beta in ((node.inputs[3], node.inputs[6]), (node.inputs[4], node.inputs[7])):
            handle, value = _handle(power), _constant(beta)
            if handle is not None and value is not None:
                state[handle.name] = value.astype(value.dtype)
    return state


def initial_variables(module: Module, seed: int) -> dict[str, np.ndarray]:
    """Seeded weights (:func:`graphir.backends.tf.session.random_variables`) with the optimizer's own initial state."""
    from graphir.backends.tf.session import random_variables

    return {**random_variables(module, seed), **optimizer_state(module)}


def _first_float(outputs: list[np.ndarray]) -> float:
    if not outputs or outputs[0].size == 0 or outputs[0].dtype.kind not in "fiu":
        return float("nan")
    return float(np.asarray(outputs[0], dtype=np.float64).mean())


def run_strategy(
    module: Module,
    servers: Any,
    *,
    variables: Mapping[str, Any] | None = None,
    steps: int = 5,
    warmup: int = 1,
    trace_steps: int = 2,
    seed: int = 0,
    delay_s: float = 0.0,
    timeout_s: float | None = None,
    what: str = "the strategy run",
) -> StrategyRun:
    """Lower the placed ``module``, assign ``variables`` (else seeded ones), train and measure (module docstring).

    ``timeout_s`` bounds the whole run (``None``: the run time limit, :func:`graphir.runguard.run_timeout`);
    ``what`` names the run in errors.
    """
    from graphir.backends.tf.lowering import lower
    from graphir.backends.tf.session import SessionRunner, random_inputs, remote_feeds
    from graphir.backends.tf.tf_graphdef import variable_values

    if steps < 1:
        raise BackendError(f"a strategy needs at least one timed step, got {steps}")
    placed = [n for n in module.graph.nodes if n.device is not None]
    lowered = lower(module, enforce_order=bool(placed) and all(n.order is not None for n in placed))
    given = {node.name: array for node, array in variable_values(module, variables or {}).items()}
    values = {**initial_variables(module, seed), **given}
    # Drawn in name order, not in the lowering's (which follows the placement): every strategy feeds
    # the same batch to the same input (a data-parallel graph's replicas keep their slices).
    by_name = sorted(lowered.input_names)
    drawn = dict(zip(by_name, random_inputs(module, by_name, seed), strict=True))
    fed = dict(zip(lowered.feeds, (drawn[name] for name in lowered.input_names), strict=True))
    held = {feed: fed.pop(feed) for feed in remote_feeds(lowered, servers.master_task)}  # as run_on_rig
    inputs = list(fed.values())
    losses: list[float] = []
    times: list[float] = []
    with SessionRunner(
        module, lowered, servers.target, variables=values, timeout_s=timeout_s, what=what, held_inputs=held
    ) as runner:
        for _ in range(warmup):
            losses.append(_first_float(runner.run(inputs)))
        metadata = []
        for _ in range(trace_steps):
            metadata.append(runner.run_metadata(inputs))
            losses.append(float("nan"))
        for _ in range(steps):
            begin = time.perf_counter()
            losses.append(_first_float(runner.run(inputs)))
            if delay_s > 0:
                time.sleep(delay_s)
            times.append(time.perf_counter() - begin)
        after = runner.read_variables()
    run = harvest(module, lowered, metadata, times, warmup)
    return StrategyRun(run, after, losses, warmup + trace_steps + steps)
