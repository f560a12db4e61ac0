"""Spike for issue 37: which XLA clusters TensorFlow makes of marked op sets, under graphir's session settings.

One graph with three chains: ``A`` (LayerNorm + tanh GELU on ``[4, 128, 1024]``), ``B`` (scaled and
masked softmax on ``[4, 16, 128, 128]``) and ``C`` (a copy of ``A`` fed by ``A`` through an
unmarked ``Identity``). Each case marks chains with ``tf.xla.experimental.jit_scope``'s attributes
(``_XlaCompile``, ``_XlaScope``, ``_XlaSeparateCompiledGradients``) and/or turns on auto-clustering,
runs one step in a local ``tf.compat.v1.Session`` configured by graphir's
:func:`graphir.backends.tf.session.session_config` (Grappler off, graph optimiser at L0), and reads
the clusters from ``TF_XLA_FLAGS=--tf_xla_clustering_debug`` (the ``_XlaCluster`` attribute of
every node in the dumped ``mark_for_compilation`` graph) and the ops of the traced step. Each case
runs in a fresh process, since TensorFlow reads ``TF_XLA_FLAGS`` once.

Usage::

    python -m devtools.xla_clusters            # every case, one line each
    python -m devtools.xla_clusters --case attr --flags "--tf_xla_enable_lazy_compilation=false"
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

CASES = {
    # name: (marked scopes {chain: scope}, global_jit_level ON_1 in the session, TF_XLA_FLAGS)
    "none": ({}, False, ""),
    "attr": ({"A": "a", "B": "b"}, False, ""),
    "attr-lazy-off": ({"A": "a", "B": "b"}, False, "--tf_xla_enable_lazy_compilation=false"),
    "attr-one-scope-A-and-C": ({"A": "ac", "B": "b", "C": "ac"}, False, "--tf_xla_enable_lazy_compilation=false"),
    "session-global-jit": ({}, True, ""),
    "session-global-jit-cpu-flag": ({}, True, "--tf_xla_cpu_global_jit"),
    "env-auto-jit": ({}, False, "--tf_xla_auto_jit=1 --tf_xla_cpu_global_jit"),
    "attr-and-env-auto-jit": ({"A": "a", "B": "b"}, False, "--tf_xla_auto_jit=1 --tf_xla_cpu_global_jit"),
}


def _chains(tf: Any) -> tuple[Any, list[str]]:
    tf1 = tf.compat.v1
    rng = np.random.default_rng(0)
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [4, 128, 1024], name="x")
        scores = tf1.placeholder(tf.float32, [4, 16, 128, 128], name="s")
        mask = tf.constant(np.zeros((4, 1, 1, 128), np.float32), name="mask")
        gamma = tf.constant(1.0 + 0.1 * rng.standard_normal(1024).astype(np.float32), name="gamma")
        beta = tf.constant(0.1 * rng.standard_normal(1024).astype(np.float32), name="beta")

        def ln_gelu(h: Any, scope: str) -> Any:
            with tf.name_scope(scope):
                mean, variance = tf.nn.moments(h, axes=[-1], keepdims=True)
                y = tf.nn.batch_normalization(h, mean, variance, beta, gamma, 1e-12)
                return y * 0.5 * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * tf.pow(y, 3))))

        a = ln_gelu(x, "A")
        c = ln_gelu(tf.identity(a, name="between"), "C")
        with tf.name_scope("B"):
            probs = tf.nn.softmax(scores * 0.125 + mask)
        outputs = [tf.identity(c, name="out_c").name, tf.identity(probs, name="out_b").name]
    return graph.as_graph_def(), outputs


def child(case: str, dump: str) -> dict[str, Any]:
    """Run ``case`` in this process (``TF_XLA_FLAGS`` already set): clusters and the traced step's ops."""
    import tensorflow as tf
    from google.protobuf import text_format

    from graphir.backends.tf.session import session_config

    tf1 = tf.compat.v1
    scopes, global_jit, _ = CASES[case]
    graph_def, outputs = _chains(tf)
    for node in graph_def.node:
        scope = scopes.get(node.name.split("/")[0])
        if scope is not None:
            node.attr["_XlaCompile"].b = True
            node.attr["_XlaScope"].s = scope.encode()
            node.attr["_XlaSeparateCompiledGradients"].b = False
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    config = session_config(tf)
    config.intra_op_parallelism_threads = config.inter_op_parallelism_threads = 1
    if global_jit:
        config.graph_options.optimizer_options.global_jit_level = tf1.OptimizerOptions.ON_1
    rng = np.random.default_rng(1)
    feed = {
        "x:0": rng.standard_normal((4, 128, 1024)).astype(np.float32),
        "s:0": rng.standard_normal((4, 16, 128, 128)).astype(np.float32),
    }
    with tf1.Session(graph=graph, config=config) as session:
        session.run(outputs, feed)
        metadata = tf1.RunMetadata()
        options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        session.run(outputs, feed, options=options, run_metadata=metadata)
    ran = sorted({s.node_name for d in metadata.step_stats.dev_stats for s in d.node_stats} - {"_SOURCE"})
    clusters: dict[str, list[str]] = {}
    for path in sorted(glob.glob(os.path.join(dump, "mark_for_compilation*.pbtxt"))):
        if "annotated" in path:
            continue
        dumped = tf1.GraphDef()
        text_format.Parse(open(path).read(), dumped)
        for node in dumped.node:
            if "_XlaCluster" in node.attr:
                clusters.setdefault(node.attr["_XlaCluster"].s.decode(), []).append(node.name)
    members = {
        name: f"{len(nodes)} nodes of {','.join(sorted({n.split('/')[0] for n in nodes}))}"
        for name, nodes in sorted(clusters.items())
    }
    left = {chain: sum(1 for op in ran if op.startswith(chain + "/")) for chain in "ABC"}
    xla = [op for op in ran if op.startswith("cluster_")]
    return {"case": case, "ops": len(ran), "xla_ops": len(xla), "clusters": members, "unfused_left": left}


def main(argv: Sequence[str] | None = None) -> int:
    """Run every case (or ``--case``) in a fresh process; print one line per case."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), help="one case (default: all)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.case, args.dump)))
        return 0
    for case in [args.case] if args.case else list(CASES):
        flags = " ".join(filter(None, [CASES[case][2], "--tf_xla_clustering_debug"]))
        with tempfile.TemporaryDirectory() as dump:
            env = {
                **os.environ,
                "TF_XLA_FLAGS": flags,
                "TF_DUMP_GRAPH_PREFIX": dump,
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "TF_ENABLE_ONEDNN_OPTS": "0",
            }
            command = [sys.executable, "-m", "devtools.xla_clusters", "--child", "--case", case, "--dump", dump]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
            print(f"{case}: failed: {tail[0]}")
            continue
        result = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"{case} (TF_XLA_FLAGS={flags!r}): {result['ops']} ops in the step, {result['xla_ops']} XLA ops; "
            f"clusters {result['clusters']}; unfused ops left per chain {result['unfused_left']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
