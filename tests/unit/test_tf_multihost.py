"""Multi-host: a placed graph runs across two local ``tf.distribute.Server`` processes.

The cluster's two devices are ``/job:worker/task:0/device:CPU:0`` and ``/job:worker/task:1/device:CPU:0``;
:func:`graphir.backends.tf.distributed.start_local_servers` starts one server per task on free
127.0.0.1 ports, a session on task 0's master runs the lowered graph, and the test checks the
outputs against onnxruntime and, from ``RunMetadata``, that every op ran on its assigned task. The
client runs in a subprocess with a bounded timeout; the servers are its children and exit with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from helpers import TWO_TASKS

from graphir.backends.tf.distributed import cluster_tasks, free_ports
from graphir.cluster import load_cluster_toml
from graphir.errors import BackendError

MODEL = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
TOLERANCE = 1e-4

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from graphir.backends.tf import lower
    from graphir.backends.tf.check import placement_mismatches, reference_values, relative_error
    from graphir.backends.tf.distributed import run_step, start_local_servers
    from graphir.backends.tf.run import random_inputs, tasks_used
    from graphir.driver import load_builtin_passes
    from graphir.driver.clusters import resolve_cluster
    from graphir.importers.onnx import import_onnx
    from graphir.pass_infra import PassContext
    from graphir.pass_manager import PassManager
    from graphir.pipeline import parse_pipeline

    load_builtin_passes()
    model, cluster = Path(sys.argv[1]), sys.argv[2]
    module = import_onnx(model)
    module.set_cluster(resolve_cluster(cluster))
    PassManager(parse_pipeline("profile,place{algo=m-topo}")).run(module, PassContext(seed=0))
    lowered = lower(module, enforce_order=True)
    inputs = random_inputs(module, lowered.input_names, seed=0)
    with start_local_servers(module.cluster, timeout_s=60) as servers:
        pids = [p.pid for p in servers.processes.values()]
        outputs, placed = run_step(module, lowered, servers, inputs, timeout_s=60)
    alive = [p.poll() is None for p in servers.processes.values()]
    expected = reference_values(model, list(lowered.output_names), dict(zip(lowered.input_names, inputs)))
    checked, problems = placement_mismatches(lowered, placed)
    print(json.dumps({
        "error": relative_error(outputs, [expected[n] for n in lowered.output_names]),
        "tasks": sorted(tasks_used(placed)),
        "assigned": sorted({n.device for n in module.graph.nodes}),
        "checked": checked,
        "nodes": len(module.graph),
        "problems": problems[:10],
        "servers": len(pids),
        "alive_after": alive,
        "spec": servers.cluster_spec,
    }))
    """
)


def test_lowered_graph_runs_on_two_local_servers(tmp_path):
    cluster = tmp_path / "two_tasks.toml"
    cluster.write_text(TWO_TASKS)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GRAPHIR_MEASURE_CPU="0", GRAPHIR_CACHE_DIR=str(tmp_path / "c"))
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(MODEL), str(cluster)],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["assigned"] == ["w0", "w1"]  # m-topo spreads squeezenet over both tasks
    assert report["error"] <= TOLERANCE, report
    assert report["tasks"] == ["/job:worker/task:0", "/job:worker/task:1"], report
    assert report["problems"] == [] and report["checked"] >= report["nodes"], report
    assert report["servers"] == 2 and report["alive_after"] == [False, False]
    assert all(address.startswith("127.0.0.1:") for address in report["spec"]["worker"])


def test_cluster_tasks_and_errors(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(TWO_TASKS.replace("task:1/device:CPU:0", "task:2/device:CPU:1"))
    assert cluster_tasks(load_cluster_toml(path)) == {("worker", 0): 1, ("worker", 1): 1, ("worker", 2): 2}
    path.write_text(TWO_TASKS.replace("/job:worker/task:1/device:CPU:0", "/device:CPU:1"))
    with pytest.raises(BackendError, match=r"device 'w1' \(/device:CPU:1\) names no /job:J/task:K"):
        cluster_tasks(load_cluster_toml(path))
    path.write_text(TWO_TASKS.replace("task:1/device:CPU:0", "task:1/device:GPU:0"))
    with pytest.raises(BackendError, match="local servers provide CPU devices only"):
        cluster_tasks(load_cluster_toml(path))


def test_free_ports_are_distinct():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1024 <= p < 65536 for p in ports)
