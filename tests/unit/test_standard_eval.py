"""``profile{mode=standard-eval}``: Celeritas's Standard Evaluation step 2 on the rig.

The two training graphs are ``benchmarks/results/online.md``'s small LSTM (batch 8) and GPT
(batch 4), built by the zoo's builder, each in a fresh process on the real 2-worker rig: step 1
measures on one rig worker at 1/4 and 1/2 of the batch, step 2 runs the sequential placement at the
batch; about 25 s each on this shared machine, so they are ``slow`` (``make test-all``).

Bounds asserted (stated here and in online.md), with what they were set from: 2-3 runs of each model
(step 1 on the rig, on b765b05) on 2026-11-24 04:01-04:11 UTC, load average 10-14 (other engineers' jobs):

* memory: mean per-node deviation (output + temporary bytes) < 10 % (Celeritas's own claim for
  its memory prediction); measured 1.3-2.5 %;
* time, median per-node deviation over nodes measured at >= 10 us: <= 50 %; measured lstm 16-26 %,
  gpt 15-26 %;
* time, deviation of the summed kernel times: <= 25 %; measured 0.3-8.7 %.

Before step 1 ran on the rig (it timed a local session, whose graph rewrite runs oneDNN's
``_MklMatMul`` where the rig's workers run Eigen's ``MatMul``), the same medians were 50-77 % with a
quarter of the nodes 10x off, and the asserted bound was 300 %.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from devtools.bench_online import MODELS
from graphir.cluster import resolve_cluster
from graphir.errors import PassError
from graphir.ir import Graph, Module
from graphir.pass_infra import PassContext
from graphir.passes.profile import Profile
from graphir.passes.profile.standard_eval import BFC_ALLOCATION_BYTES, unpadded_temporary
from graphir.types import DType, TensorType

MEM_DEVIATION_BAR = 0.10
TIME_DEVIATION_BAR = 0.50
TIME_TOTAL_DEVIATION_BAR = 0.25

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers.tf import import_graphdef
    from graphir.pass_infra import PassContext
    from graphir.passes.profile import Profile
    from graphir.passes.transform.batching import register_batch_builder
    from graphir.tools.zoo import build_train_graphdef

    model, batch, config = json.loads(sys.argv[1])
    config = [tuple(c) for c in config]
    name = f"{model}_se"
    register_batch_builder(name, lambda b: build_train_graphdef(model, b, config)[0])
    module = import_graphdef(build_train_graphdef(model, batch, config)[0], name=name)
    module.set_cluster(resolve_cluster("2xcpu-workers"))
    batches = (max(batch // 4, 1), max(batch // 2, 2))
    stats = Profile.of("standard-eval", batches=batches, iterations=3).run(module, PassContext()).stats
    placed = all(n.device is None for n in module.graph.nodes)
    print(json.dumps({"stats": stats, "restored": placed}))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["lstm", "gpt"])
def test_step2_on_the_rig_memory_within_10pct_and_time_bounded(case, tmp_path):
    model, batch, config = MODELS[case]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    command = [sys.executable, "-c", _SCRIPT, json.dumps([model, batch, [list(c) for c in config]])]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    stats = report["stats"]
    print(case, {k: v for k, v in stats.items() if k.startswith("se2-")})
    assert report["restored"], "the sequential placement is undone"
    assert stats["target"] == batch  # predicted at the model's batch, fitted below it
    assert stats["se2-devices"] == 2  # the sequential placement spans both workers
    assert stats["se2-mem-compared-ops"] > 0.5 * stats["nodes"]
    assert stats["se2-mem-deviation-mean"] < MEM_DEVIATION_BAR
    assert stats["se2-time-compared-ops"] > 0.5 * stats["nodes"]
    assert stats["se2-time-10us-compared-ops"] > 100
    assert stats["se2-time-10us-deviation-median"] <= TIME_DEVIATION_BAR
    assert stats["se2-time-total-deviation"] <= TIME_TOTAL_DEVIATION_BAR
    # every node off by more than the threshold now carries its measured time
    assert stats["se2-replaced-time-ops"] >= stats["se2-time-compared-ops"] * (1 - stats["se2-time-within-20pct"]) - 1


@pytest.mark.parametrize(
    ("output", "temporary", "expected"),
    [
        # a 4-byte scalar: BFC hands out 256 bytes, 252 of them padding, none temporary
        (4, 252, 0),
        # 1000 output bytes round up to 1024: 24 bytes padding; 2048 + 24 allocated beyond -> 2048 scratch
        (1000, 2072, 2048),
        # a multiple of 256 has no padding: all of it is scratch
        (512, 300, 300),
        # a forwarded output (no allocation recorded) reads 0 temporary; never negative
        (4, 0, 0),
        # output not reported (-1): left as read
        (-1, 7, 7),
    ],
)
def test_unpadded_temporary_by_hand(output, temporary, expected):
    assert BFC_ALLOCATION_BYTES == 256
    assert unpadded_temporary(output, temporary) == expected


def _tiny() -> Module:
    t = TensorType(DType.F32, (4,))
    graph = Graph()
    x = graph.add_input("x", t)
    a = graph.add_node("tf.Relu", [x], [t], name="a")
    graph.set_outputs([a.outputs[0]])
    return Module("tiny", graph)


@pytest.mark.parametrize(
    ("cluster", "options", "message"),
    [
        ("2xcpu", {}, "needs /job:worker/task:k devices"),
        ("2xcpu-workers", {"threshold": -1.0}, "'threshold' must be >= 0"),
        ("2xcpu-workers", {"target": 3}, "'target' must be its batch"),
        ("2xcpu-workers", {"step1": "gpu"}, "'step1' must be 'rig' or 'local'"),
    ],
)
def test_bad_input_is_one_line(cluster, options, message, monkeypatch):
    monkeypatch.setenv("GRAPHIR_MEASURE_CPU", "0")
    module = _tiny()
    module.set_cluster(resolve_cluster(cluster))
    with pytest.raises(PassError, match=message) as info:
        Profile.of("standard-eval", **options).run(module, PassContext())
    assert "\n" not in str(info.value)
