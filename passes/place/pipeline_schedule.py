"""Pipeline schedules: the order in which each stage runs its micro-batches' forward and backward passes.

A training step split into ``S`` stages (contiguous ranges of layers, each on its own device) and
``M`` micro-batches runs, on every stage, ``M`` forward passes ``F(m)`` and ``M`` backward passes
``B(m)``. ``F(s, m)`` needs ``F(s-1, m)``'s activations; ``B(s, m)`` needs ``B(s+1, m)``'s gradient
and stage ``s``'s own ``F(s, m)``. Two schedules are used in practice:

* **GPipe** (Huang et al., NeurIPS 2019, §2.2 and Fig. 2c): every stage runs all ``M`` forwards, then
  all ``M`` backwards. Each stage keeps the activations of all ``M`` micro-batches until their
  backward (``M`` copies). The backwards run in increasing micro-batch order, as PyTorch's
  ``ScheduleGPipe`` and Megatron-LM's "all forward, all backward" run them (the paper's figure draws
  them in decreasing order; both orders have the same bubble).
* **1F1B / PipeDream-Flush** (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN Training",
  ICML 2021, §3.1; Megatron-LM's non-interleaved schedule): stage ``s`` first runs
  ``w = min(S - 1 - s, M)`` warm-up forwards, then alternates one forward and one backward until
  the forwards are done, then runs the remaining backwards. A stage then holds at most
  ``min(M, S - s)`` micro-batches' activations at once (the first stage ``S``, the last one), and
  the bubble is GPipe's: ``(S - 1) / (M + S - 1)`` of the step with equal stages.

Both schedules end with one optimizer update per stage after its last backward (a *flush*: the
weights every micro-batch used are the step's one version, so the update is the un-pipelined
step's). :func:`stage_sequence` gives a stage's order, :func:`activation_copies` its peak number of
live micro-batches, and :func:`pipeline_timeline` the start of every stage pass when stage ``s``'s
passes take ``forward[s]`` and ``backward[s]`` seconds and its boundary transfers ``send[s]`` and
``send_back[s]`` seconds: the event model ``parallelize`` screens candidates with before the
simulator judges the finalists on the rewritten graph, and the order ``place{algo=pipeline}``
records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "BACKWARD",
    "FORWARD",
    "SCHEDULES",
    "PipelineTimeline",
    "activation_copies",
    "pipeline_timeline",
    "stage_sequence",
]

SCHEDULES = ("gpipe", "1f1b")
"""The schedules :func:`stage_sequence` knows (module docstring)."""

FORWARD = 0
"""Phase of a forward pass in :func:`stage_sequence`'s pairs."""
BACKWARD = 1
"""Phase of a backward pass in :func:`stage_sequence`'s pairs."""


def _check(schedule: str, stage: int, stages: int, microbatches: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule '{schedule}': expected one of {', '.join(SCHEDULES)}")
    if stages < 1 or microbatches < 1:
        raise ValueError(f"a pipeline needs stages >= 1 and micro-batches >= 1, got {stages} and {microbatches}")
    if not 0 <= stage < stages:
        raise ValueError(f"stage {stage} is not in 0..{stages - 1}")


def stage_sequence(schedule: str, stage: int, stages: int, microbatches: int) -> list[tuple[int, int]]:
    """The passes stage ``stage`` of ``stages`` runs, in order: ``(phase, micro-batch)`` pairs.

    ``phase`` is :data:`FORWARD` or :data:`BACKWARD`. GPipe: ``F0 .. F(M-1), B0 .. B(M-1)``. 1F1B:
    ``w = min(S - 1 - stage, M)`` forwards, then ``F(w+i), B(i)`` for ``i < M - w``, then the ``w``
    remaining backwards.

    Raises:
        ValueError: an unknown schedule, or counts out of range.
    """
    _check(schedule, stage, stages, microbatches)
    forwards = [(FORWARD, m) for m in range(microbatches)]
    backwards = [(BACKWARD, m) for m in range(microbatches)]
    if schedule == "gpipe":
        return forwards + backwards
    warmup = min(stages - 1 - stage, microbatches)
    sequence = forwards[:warmup]
    for i in range(microbatches - warmup):
        sequence.append(forwards[warmup + i])
        sequence.append(backwards[i])
    sequence.extend(backwards[microbatches - warmup :])
    return sequence


def activation_copies(schedule: str, stage: int, stages: int, microbatches: int) -> int:
    """The most micro-batches whose forward activations stage ``stage`` holds at once.

    Counted from :func:`stage_sequence` (a forward adds one, a backward frees one): ``M`` under
    GPipe, ``min(M, S - stage)`` under 1F1B.
    """
    live = peak = 0
    for phase, _ in stage_sequence(schedule, stage, stages, microbatches):
        live += 1 if phase == FORWARD else -1
        peak = max(peak, live)
    return peak


class PipelineTimeline:
    """Start and finish of every stage pass of one pipelined step (:func:`pipeline_timeline`).

    Attributes:
        start: ``start[s][(phase, m)]``: when stage ``s`` starts that pass (seconds).
        finish: the same for its end.
        makespan: the last stage's update end: the step's time.
        busy: compute seconds of each stage (passes and update).
    """

    def __init__(self, stages: int) -> None:  # noqa: D107
        self.start: list[dict[tuple[int, int], float]] = [{} for _ in range(stages)]
        self.finish: list[dict[tuple[int, int], float]] = [{} for _ in range(stages)]
        self.makespan = 0.0
        self.busy = [0.0] * stages


def pipeline_timeline(
    schedule: str,
    microbatches: int,
    forward: Sequence[float],
    backward: Sequence[float],
    *,
    send: Sequence[float] = (),
    send_back: Sequence[float] = (),
    update: Sequence[float] | np.ndarray = (),
) -> PipelineTimeline:
    """Run the schedule's event model: each stage runs its :func:`stage_sequence` in order.

    ``F(s, m)`` starts when stage ``s`` is free and ``F(s-1, m)`` ended ``send[s-1]`` seconds ago
    (the activations' transfer from stage ``s-1``); ``B(s, m)`` when stage ``s`` is free and
    ``B(s+1, m)`` ended ``send_back[s]`` seconds ago (the gradients' transfer back); the last
    stage's ``B(m)`` follows its ``F(m)``. After its last backward each stage runs its optimizer
    update (``update[s]`` seconds). Transfers overlap compute and do not contend (an estimate:
    the simulator is the judge).

    Args:
        schedule: one of :data:`SCHEDULES`.
        microbatches: ``M``.
        forward: seconds of one micro-batch's forward pass on each stage (``S`` entries).
        backward: the same for the backward pass.
        send: seconds to send one micro-batch's activations from stage ``s`` to ``s+1`` (``S - 1``
            entries; empty: free).
        send_back: seconds to send one micro-batch's gradients from stage ``s+1`` to ``s`` (entry
            ``s``; empty: free).
        update: seconds of each stage's optimizer update (empty: none).
    """
    stages = len(forward)
    if len(backward) != stages:
        raise ValueError("forward and backward need one entry per stage")
    sequences = [stage_sequence(schedule, s, stages, microbatches) for s in range(stages)]

    def link(times: Sequence[float] | np.ndarray, s: int) -> float:
        return float(times[s]) if s < len(times) else 0.0

    timeline = PipelineTimeline(stages)
    position = [0] * stages
    free = [0.0] * stages
    remaining = sum(len(seq) for seq in sequences)
    while remaining:
        progressed = False
        for s in range(stages):
            while position[s] < len(sequences[s]):
                phase, m = sequences[s][position[s]]
                if phase == FORWARD:
                    if s == 0:
                        ready = 0.0
                    elif (FORWARD, m) in timeline.finish[s - 1]:
                        ready = timeline.finish[s - 1][(FORWARD, m)] + link(send, s - 1)
                    else:
                        break
                    duration = float(forward[s])
                elif s == stages - 1:
                    ready = timeline.finish[s][(FORWARD, m)]
                    duration = float(backward[s])
                elif (BACKWARD, m) in timeline.finish[s + 1]:
                    ready = timeline.finish[s + 1][(BACKWARD, m)] + link(send_back, s)
                    duration = float(backward[s])
                else:
                    break
                begin = max(ready, free[s])
                timeline.start[s][(phase, m)] = begin
                timeline.finish[s][(phase, m)] = free[s] = begin + duration
                timeline.busy[s] += duration
                position[s] += 1
                remaining -= 1
                progressed = True
        assert progressed, "a pipeline schedule's passes always become ready"
    for s in range(stages):
        step = link(update, s)
        timeline.busy[s] += step
        timeline.makespan = max(timeline.makespan, free[s] + step)
    return timeline
