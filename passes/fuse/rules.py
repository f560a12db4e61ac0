"""Moirai's graph coarsening with operator fusion (GCOF, §III-B, Algorithm 1, Table I).

A fusion rule is an ordered sequence of op types (``conv, bn, relu``); each element names one
dialect-qualified op (``onnx.Conv``) or an alias for several (``conv = ["onnx.Conv",
"tf.Conv2D"]``). Rules are read from TOML::

    [alias]
    conv = ["onnx.Conv", "tf.Conv2D"]
    bn = ["onnx.BatchNormalization", "tf.FusedBatchNormV3"]

    [[rule]]
    name = "conv-bn"
    ops = ["conv", "bn"]

Matching follows GCOF: the graph is traversed in depth-first order (DFS-TOPO) and a chain
``v_1 -> v_2 -> ... -> v_k`` is fused when its op types spell a rule and every connection is
*direct or multi-input* (Moirai Fig. 6): each member but the last feeds nothing but the next
member (``is_valid_conn``; a multi-output producer whose result also feeds another node is never
fused inside a chain — Fig. 7), while members may take extra inputs from outside. GCOF's
``bind``/``unbind`` of partial matches (``is_sub_rule``) amounts to a longest-match search: from a
node that starts a rule the chain is extended while some rule still matches its prefix, and the
longest prefix that is a complete rule is fused; partial matches are released. A node belongs to
at most one match; earlier nodes in the traversal win.

Such chains never create a loop: edges leave a fused chain only from its last member, so a cycle
through fused chains would be a cycle of the original DAG. Coarse nodes that already hold several
nodes (groups from an earlier fusion) have no single op type and match no rule.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import numpy as np

from graphir.errors import Location, PassError
from graphir.passes.fuse.common import CoarseGraph
from graphir.passes.orders import dfs_topo

DEFAULT_RULES_TOML = """\
# graphir's default fusion rules (Moirai Table I and the usual backend fusions).
[alias]
conv = ["onnx.Conv", "tf.Conv2D", "tf.DepthwiseConv2dNative"]
bn = ["onnx.BatchNormalization", "tf.FusedBatchNorm", "tf.FusedBatchNormV2", "tf.FusedBatchNormV3"]
add = ["onnx.Add", "onnx.Sum", "tf.Add", "tf.AddV2", "tf.AddN", "tf.BiasAdd"]
act = ["onnx.Relu", "onnx.LeakyRelu", "onnx.Clip", "onnx.Sigmoid", "onnx.Tanh", "onnx.Gelu", "onnx.Elu",
       "tf.Relu", "tf.Relu6", "tf.LeakyRelu", "tf.Sigmoid", "tf.Tanh", "tf.Elu", "tf.Selu", "tf.Gelu"]
matmul = ["onnx.MatMul", "onnx.Gemm", "tf.MatMul", "tf.BatchMatMul", "tf.BatchMatMulV2", "tf.BatchMatMulV3"]
act_grad = ["tf.ReluGrad", "tf.Relu6Grad", "tf.LeakyReluGrad", "tf.SigmoidGrad", "tf.TanhGrad", "tf.EluGrad"]
bn_grad = ["tf.FusedBatchNormGrad", "tf.FusedBatchNormGradV2", "tf.FusedBatchNormGradV3"]

# Moirai Table I: r1, r2, r3.
[[rule]]
name = "conv-bn"
ops = ["conv", "bn"]

[[rule]]
name = "conv-bn-relu"
ops = ["conv", "bn", "act"]

[[rule]]
name = "conv-bn-add-relu"
ops = ["conv", "bn", "add", "act"]

# Convolutions with folded batch norm (inference graphs) and TF's bias.
[[rule]]
name = "conv-relu"
ops = ["conv", "act"]

[[rule]]
name = "conv-bias-relu"
ops = ["conv", "add", "act"]

[[rule]]
name = "conv-add-relu"
ops = ["conv", "add", "add", "act"]

# Dense layers.
[[rule]]
name = "matmul-add"
ops = ["matmul", "add"]

[[rule]]
name = "matmul-add-act"
ops = ["matmul", "add", "act"]

[[rule]]
name = "matmul-act"
ops = ["matmul", "act"]

# Layer normalization decomposed by exporters: the mean-centring and the variance/normalise chain.
[[rule]]
name = "layernorm-center"
ops = ["onnx.ReduceMean", "onnx.Sub"]

[[rule]]
name = "layernorm-normalize"
ops = ["onnx.Pow", "onnx.ReduceMean", "onnx.Add", "onnx.Sqrt", "onnx.Div", "onnx.Mul", "onnx.Add"]

[[rule]]
name = "layernorm-scale"
ops = ["onnx.Div", "onnx.Mul", "onnx.Add"]

[[rule]]
name = "tf-layernorm-variance"
ops = ["tf.SquaredDifference", "tf.Mean", "tf.AddV2", "tf.Rsqrt", "tf.Mul"]

[[rule]]
name = "tf-layernorm-center"
ops = ["tf.Mean", "tf.Sub"]

# TensorFlow training graphs: backward chains of the fused forward ops.
[[rule]]
name = "act-grad-bn-grad"
ops = ["act_grad", "bn_grad"]

[[rule]]
name = "add-act-grad-bn-grad"
ops = ["add", "act_grad", "bn_grad"]

[[rule]]
name = "add-act-grad"
ops = ["add", "act_grad"]
"""


@dataclasses.dataclass(frozen=True)
class Rule:
    """One fusion rule: a name and, per position, the op names accepted there."""

    name: str
    ops: tuple[frozenset[str], ...]


def _error(source: str, text: str, message: str, anchor: str | None = None, occurrence: int = 0) -> PassError:
    """A PassError at ``source``, on the line of the ``occurrence``-th match of ``anchor`` when given."""
    line = 0
    if anchor is not None:
        matches = [m.start() for m in re.finditer(anchor, text, flags=re.MULTILINE)]
        if occurrence < len(matches):
            line = text.count("\n", 0, matches[occurrence]) + 1
    return PassError(f"invalid fusion rules: {message}", Location(file=source, line=line))


def parse_rules(text: str, source: str) -> list[Rule]:
    """Parse fusion rules from TOML ``text`` (``source`` names it in errors).

    Raises:
        PassError: the text is not TOML, or a rule is malformed (the error names the file and line).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+), column (\d+)", str(exc))
        if found:
            line, col = int(found.group(1)), int(found.group(2))
        else:  # "(at end of document)": point at the last line
            line, col = max(1, len(text.splitlines())), 0
        message = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise PassError(f"cannot parse fusion rules: {message}", Location(file=source, line=line, col=col)) from exc
    unknown = sorted(set(data) - {"alias", "rule"})
    if unknown:
        raise _error(
            source,
            text,
            f"unknown table '{unknown[0]}' (expected [alias] and [[rule]])",
            rf"^[ \t]*\[+{re.escape(unknown[0])}",
        )
    aliases_raw = data.get("alias", {})
    if not isinstance(aliases_raw, dict):
        raise _error(source, text, "'alias' must be a table of name = [op, ...]", r"^[ \t]*alias")
    aliases: dict[str, frozenset[str]] = {}
    for name, ops in aliases_raw.items():
        if not isinstance(ops, list) or not ops or not all(isinstance(op, str) and "." in op for op in ops):
            raise _error(
                source,
                text,
                f"alias '{name}' must list dialect-qualified op names",
                rf"^[ \t]*{re.escape(name)}[ \t]*=",
            )
        aliases[name] = frozenset(ops)
    rules_raw = data.get("rule", [])
    if not isinstance(rules_raw, list) or not rules_raw:
        raise _error(source, text, "no [[rule]] tables")
    rules: list[Rule] = []
    for k, raw in enumerate(rules_raw):
        anchor = r"^[ \t]*\[\[rule\]\]"
        name = raw.get("name", f"rule{k}")
        extra = sorted(set(raw) - {"name", "ops"})
        if extra:
            raise _error(source, text, f"rule '{name}' has unknown key '{extra[0]}'", anchor, k)
        ops = raw.get("ops")
        if not isinstance(name, str) or not name:
            raise _error(source, text, f"rule #{k + 1} needs a non-empty string 'name'", anchor, k)
        if not isinstance(ops, list) or len(ops) < 2 or not all(isinstance(op, str) for op in ops):
            raise _error(source, text, f"rule '{name}' needs 'ops', a list of at least two op types", anchor, k)
        elements = []
        for op in ops:
            if op in aliases:
                elements.append(aliases[op])
            elif "." in op:
                elements.append(frozenset([op]))
            else:
                known = ", ".join(sorted(aliases)) or "none"
                raise _error(
                    source,
                    text,
                    f"rule '{name}': '{op}' is neither an alias ({known}) nor a dialect-qualified op name",
                    anchor,
                    k,
                )
        rules.append(Rule(name, tuple(elements)))
    return rules


def load_rules(path: str) -> list[Rule]:
    """The rules of TOML file ``path``, or the built-in defaults when ``path`` is empty.

    Raises:
        PassError: the file cannot be read or parsed.
    """
    if not path:
        return parse_rules(DEFAULT_RULES_TOML, "<default fusion rules>")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise PassError(f"cannot read fusion rules: {exc.strerror or exc}", Location(file=path)) from exc
    return parse_rules(text, path)


def fuse_rules(
    graph: CoarseGraph, op_types: list[str | None], rules: list[Rule]
) -> tuple[np.ndarray, dict[str, int | float | str]]:
    """GCOF: fuse chains that spell a rule through direct or multi-input connections.

    Args:
        graph: the coarse graph.
        op_types: op name of each coarse node (``None`` for a node that is already a group).
        rules: the fusion rules.

    Returns:
        A label per coarse node and statistics (matches per rule).
    """
    n = graph.num_nodes
    by_first: dict[str, list[Rule]] = {}
    for rule in rules:
        for op in rule.ops[0]:
            by_first.setdefault(op, []).append(rule)
    succ_offsets = graph.succ_offsets.tolist()
    succ = graph.succ.tolist()
    labels = list(range(n))
    taken = [False] * n
    matches: dict[str, int] = {}
    for v in dfs_topo(n, graph.succ_offsets, graph.succ).tolist():
        op = op_types[v]
        if taken[v] or op is None or op not in by_first:
            continue
        live = by_first[op]
        chain = [v]
        best_length, best_rule = 0, ""
        tail = v
        while live:
            # is_valid_conn: the tail's only consumer is the next member (direct or multi-input).
            if succ_offsets[tail + 1] - succ_offsets[tail] != 1:
                break
            nxt = succ[succ_offsets[tail]]
            nxt_op = op_types[nxt]
            if taken[nxt] or nxt_op is None:
                break
            k = len(chain)
            live = [rule for rule in live if len(rule.ops) > k and nxt_op in rule.ops[k]]
            if not live:
                break
            chain.append(nxt)
            tail = nxt
            complete = [rule for rule in live if len(rule.ops) == len(chain)]
            if complete:
                best_length, best_rule = len(chain), complete[0].name
        if best_length:
            for member in chain[:best_length]:
                taken[member] = True
                labels[member] = v
            matches[best_rule] = matches.get(best_rule, 0) + 1
    stats: dict[str, int | float | str] = {"matches": sum(matches.values())}
    for name in sorted(matches):
        stats[f"rule.{name}"] = matches[name]
    return np.asarray(labels, dtype=np.int64), stats
