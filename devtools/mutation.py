r"""Mutation testing of graphir's algorithmic core with cosmic-ray (``make mutation``).

A mutant is the source with one small change (``<`` for ``<=``, ``+`` for ``-``, a number moved by one,
``break`` for ``continue``...). A mutant is *killed* when the module's tests fail on it (or run past the
per-mutant timeout) and *survives* when they pass: a surviving mutant is a wrong answer the tests would
let through. The score of a module is ``killed / (killed + survived)``; a survivor that computes the same
answers as the original on every input (an *equivalent* mutant) is listed in ``EQUIVALENT`` below with
the reason, and only such listed mutants leave the denominator.

How a run goes, per module:

1. The tree (``graphir/ passes/ backends/ tools/ devtools/ tests/ pyproject.toml``) is copied to ``--work``
   (``build/mutation/tree``), with ``graphir/passes`` etc. symlinked the way the package-dir mapping of
   pyproject.toml maps them, so the copy imports itself and the checkout is never mutated (a killed run
   leaves no mutant behind, and tests run in the checkout meanwhile see the real code).
2. The module's test selection (``MODULES``: the test files that exercise it, run with ``pytest -x``)
   runs once unmutated; it must pass, and its time sets the per-mutant timeout (``3 x`` that time plus
   10 s). A mutant that runs past it (an endless loop) counts as killed.
3. ``cosmic-ray init`` lists every mutant; with ``--sample N`` a seeded random sample of N is kept (the
   others are marked skipped, and the results file says so); ``cosmic-ray exec`` runs them one at a time.
4. The outcome of each module goes into ``benchmarks/results/mutation.json`` (modules run before are
   kept) and the table is written anew to ``benchmarks/results/mutation.md``.

Usage::

    python -m devtools.mutation --modules memory,heft --sample 60 --seed 1
    python -m devtools.mutation --report-only      # rewrite mutation.md from mutation.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_JSON = ROOT / "benchmarks" / "results" / "mutation.json"
RESULTS_MD = ROOT / "benchmarks" / "results" / "mutation.md"
TREE_PARTS = ("graphir", "passes", "backends", "tools", "devtools", "tests", "pyproject.toml")
# The package-dir mapping of pyproject.toml, rebuilt in the copy with symlinks.
MAPPED = {"passes": "passes", "backends": "backends", "tools": "tools"}


@dataclass(frozen=True)
class Target:
    """One module under mutation and the tests that exercise it."""

    path: str
    tests: tuple[str, ...]
    what: str
    skip: tuple[str, ...] = ()
    """Slow tests left out of the selection (``pytest -k``): they repeat what faster ones check."""


ILP_SLOW = (
    "test_ilp_isolated_solver_process_gives_the_same_schedule",
    "test_ilp_on_groups_no_worse_than_warm_start",
    "test_the_pipeline_seed_and_the_options_reach_cp_sat",
)


MODULES: dict[str, Target] = {
    "memory": Target(
        "graphir/memory.py",
        ("tests/unit/test_memory.py", "tests/unit/test_mut_core.py"),
        "liveness memory accounting",
    ),
    "heft": Target("passes/place/heft.py", ("tests/unit/test_place_heft.py", "tests/unit/test_mut_core.py"), "HEFT"),
    "common": Target(
        "passes/place/common.py",
        (
            "tests/unit/test_place_heft.py",
            "tests/unit/test_place_constraints.py",
            "tests/unit/test_place_fastt.py",
            "tests/unit/test_place_celeritas.py",
            "tests/unit/test_place_liveness.py",
            "tests/unit/test_place_plan_congestion.py",
            "tests/unit/test_mut_core.py",
        ),
        "the list scheduler (insertion slots, EST/EFT) of HEFT, DPOS, Celeritas",
    ),
    "links": Target(
        "graphir/links.py",
        ("tests/unit/test_congestion.py", "tests/unit/test_cluster.py", "tests/unit/test_mut_core.py"),
        "the link model (transfer cost, routes)",
    ),
    "baechi": Target(
        "passes/place/baechi.py",
        (
            "tests/unit/test_place_baechi.py",
            "tests/unit/test_place_baechi_liveness.py",
            "tests/unit/test_mut_core.py",
        ),
        "Baechi's m-TOPO, m-ETF and the m-SCT placer",
    ),
    "sct_lp": Target(
        "passes/place/sct_lp.py",
        ("tests/unit/test_place_baechi.py", "tests/unit/test_mut_core.py"),
        "m-SCT's LP and its rounding",
    ),
    "simulator": Target(
        "graphir/simulator.py",
        (
            "tests/unit/test_congestion.py",
            "tests/unit/test_place_heft.py",
            "tests/unit/test_execution_order.py",
            "tests/unit/test_mut_core.py",
        ),
        "the simulator",
    ),
    "roofline": Target(
        "passes/profile/roofline.py",
        ("tests/unit/test_profile.py", "tests/unit/test_mut_core.py"),
        "the analytical cost model",
        # a 100k-node smoke test and onnxruntime measurements, neither of which checks a roofline number
        ("test_large_graph_profiles_without_fallback", "test_onnxruntime_times_add_up_and_rank_like_the_roofline"),
    ),
    "cpd": Target(
        "passes/fuse/cpd.py",
        ("tests/unit/test_orders.py", "tests/unit/test_fuse.py", "tests/unit/test_mut_core.py"),
        "CPD-TOPO and Optimal_BP",
    ),
    "celeritas": Target(
        "passes/place/celeritas.py",
        ("tests/unit/test_place_celeritas.py", "tests/unit/test_mut_core.py"),
        "Adjusting / Order-Place",
    ),
    "fastt": Target(
        "passes/place/fastt.py",
        ("tests/unit/test_place_fastt.py", "tests/unit/test_os_dpos.py", "tests/unit/test_mut_core.py"),
        "DPOS",
    ),
    "batch": Target(
        "passes/fuse/batch.py",
        ("tests/unit/test_fuse_batch.py", "tests/unit/test_fuse.py", "tests/unit/test_mut_core.py"),
        "Pesto batch merging",
    ),
    "ilp_model": Target(
        "passes/place/ilp_model.py",
        # the hand-worked model cases (seconds), then the brute-force optimality checks
        ("tests/unit/test_ilp_model.py", "tests/unit/test_place_ilp.py"),
        "the ILP model builder",
        ILP_SLOW,
    ),
    "ilp_memory": Target(
        "passes/place/ilp_memory.py",
        ("tests/unit/test_place_ilp.py", "tests/unit/test_mut_core.py"),
        "the ILP's memory constraints",
        ILP_SLOW,
    ),
}

SMALL_INT_IS = (
    "device numbers are Python ints below the cluster's device count (far below 256), which CPython "
    "caches: `is` and `==` agree on them"
)

ANNOTATION = (
    "a type annotation: the module has `from __future__ import annotations`, so a signature's "
    "annotations stay unevaluated strings, and a local variable's is never evaluated (PEP 526)"
)

# Equivalent mutants: (module, original line, mutated line, a piece of the diff's context that tells
# apart equal lines, why the mutant computes the same answers as the original). Only these leave the
# denominator; each reason is checked against the code it names.
EQUIVALENT: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "ilp_model",
        "if s != d and allowed[g][s] and allowed[h][d]:",
        "if s is not d and allowed[g][s] and allowed[h][d]:",
        "",
        "s and d both come from self.devices = list(range(num_devices)): " + SMALL_INT_IS,
    ),
    (
        "ilp_model",
        "model.AddHint(var, int(device[g] == d))",
        "model.AddHint(var, int(device[g] is d))",
        "",
        "d comes from self.devices and device[g] from the caller's list (ilp.py passes ndarray.tolist(), "
        "Python ints): " + SMALL_INT_IS,
    ),
    (
        "ilp_model",
        "self.problem.pred[self.problem.pred_offsets[h] : self.problem.pred_offsets[h + 1]].tolist()",
        "self.problem.pred[self.problem.pred_offsets[h] : self.problem.pred_offsets[h >> 1]].tolist()",
        "",
        "replay's predecessor term max(end[g]) is implied by the others: a predecessor on h's device ran "
        "earlier on it (device_free[d] >= end[g]); one on another device reaches h by a crossing value "
        "(every external data edge carries one, Transfers) whose arrival is at least end[g] plus one "
        "unit, or by a control pair, which control_in charges with its latency; so dropping preds "
        "(the slice off[h]:off[h >> 1] is empty: h >> 1 <= h) changes no start",
    ),
    (
        "ilp_model",
        "model.Add(self.start[h] >= self.end[g])",
        "model.Add(self.start[h] is not self.end[g])",
        "for g, h in transfers.control:\n-",  # the line right after the control loop header
        "the control pairs' own precedence (the mutant adds a constant True) repeats one the model has "
        "already: a control pair is a coarse edge (the quotient keeps control edges, 0 bytes), and the "
        "loop over every coarse edge just above adds S[h] >= E[g] for it",
    ),
    (
        "ilp_model",
        'ts[d] = model.NewIntVar(0, horizon, f"Ts{k}_{d}")',
        'ts[d] = model.NewIntVar( 1, horizon, f"Ts{k}_{d}")',
        "",
        "a lower bound the model implies: Ts >= E[g] = S[g] + the producer's duration, every duration "
        "is at least one unit (max(1, ...)) and S[g] >= 0, so Ts >= 1 already",
    ),
    (
        "common",
        "if end <= start:",
        "if end == start:",
        "",
        "reserve's one caller (commit) books [start, start + times[v][d]), and times are >= 0 (a Cost "
        "must be a finite non-negative time, graphir.annotations): end < start never happens",
    ),
    (
        "links",
        "if a != b:",
        "if a is not b:",
        "",
        "a and b both come from range(count), count the cluster's devices: " + SMALL_INT_IS,
    ),
    (
        "baechi",
        "self.where[v] = -1",
        "self.where[v] = ~1",
        "",
        "where[v] is the removed node's 'absent' marker and is never read again: the only reads of "
        "where for a node f (the favourite-child checks) are guarded by is_ready[f], which run() clears "
        "as it removes the node, and a node enters the ready set once (when its last predecessor ran)",
    ),
    (
        "links",
        "delivered = begin + (held if held > sending else sending) + latency",
        "delivered = begin + (held if held >= sending else sending) + latency",
        "",
        "the larger of held and sending: when they are equal either branch gives the same number",
    ),
    (
        "baechi",
        "if f >= 0 and is_ready[f] and pin[f] < 0:",
        "if f > 0 and is_ready[f] and pin[f] < 0:",
        "",
        "coarse nodes are numbered topologically (PlacementProblem), so node 0 has no parent and is "
        "nobody's favourite child: f is -1 or at least 1, where `>= 0` and `> 0` agree",
    ),
    (
        "links",
        'if congestion == "port":',
        'if congestion <= "port":',
        "",
        "the rules that reach this test are port, task and topology (pair returned above; the "
        "constructor rejects any name outside CONGESTION_RULES), and of these only 'port' is <= 'port'",
    ),
    (
        "baechi",
        "device = np.full(n, -1, dtype=np.int64)",
        "device = np.full(n, ~1, dtype=np.int64)",
        "",
        "m-TOPO's initial device is never read: the loop assigns device[v] for every v of the M-TOPO "
        "order, a permutation of all n nodes (Kahn's algorithm on an acyclic graph)",
    ),
    (
        "baechi",
        "device = np.full(n, -1, dtype=np.int64)",
        "device = np.full(n, +1, dtype=np.int64)",
        "",
        "m-TOPO's initial device is never read: the loop assigns device[v] for every v of the M-TOPO "
        "order, a permutation of all n nodes (Kahn's algorithm on an acyclic graph)",
    ),
    (
        "links",
        'if congestion == "task" or self.transfer_cpu is not None:',
        'if congestion <= "task" or self.transfer_cpu is not None:',
        "",
        "the mutant also gives pair and port a compute resource per device, which only that device's "
        "nodes ever hold: their transfers hold their channel or ports (routes), and book() charges "
        "compute only with a transfer CPU (topology); a device already runs one node at a time, so "
        "max(resource_free, begin) never moves a start (simulator, ilp_model's no-overlap and replay); "
        "link statistics are per device pair",
    ),
    (
        "baechi",
        '"favourite-children": int((favourite >= 0).sum()),',
        '"favourite-children": int((favourite > 0).sum()),',
        "",
        "coarse nodes are numbered topologically (PlacementProblem), so node 0 has no parent and is "
        "nobody's favourite child: favourite[u] is -1 or at least 1, where `>= 0` and `> 0` agree",
    ),
    (
        "baechi",
        "self.where = [-1] * n",
        "self.where = [not 1] * n",
        "",
        "the initial marker of a node not yet in the ready set is never read: where[f] is read only "
        "when is_ready[f], which is set with add(), and add() writes where[f] first",
    ),
    (
        "baechi",
        "awake_row = -1",
        "awake_row = ~1",
        "",
        "awake_row is only tested with `awake_row >= 0`, which -2 fails as -1 does",
    ),
    (
        "fastt",
        "if k > j and (best is None or (total / (k - j), j - k, d) < best):",
        "if k is not j and (best is None or (total / (k - j), j - k, d) < best):",
        "",
        "k starts as the very object j (`k = j`) and only changes by `k += 1`, which makes it larger: "
        "`k is not j` holds exactly when k was advanced, i.e. when k > j",
    ),
    (
        "fastt",
        "i = position.get(v, -1)",
        "i = position.get(v, +1)",
        "",
        "a node off the critical path then takes the critical branch: pinned, it is booked on its pin at "
        "its earliest start there, which is what book_min_eft does for a pinned node (its only finite "
        "EST); unpinned, cp_device has no entry for it (d = -1), so it goes to book_min_eft as before; "
        "i is read only by the reselection, which needs a CP device (d >= 0)",
    ),
    (
        "sct_lp",
        "if favourite[u] < 0 and not has_parent[v]:",
        "if favourite[u] < 1 and not has_parent[v]:",
        "",
        "coarse nodes are numbered topologically (PlacementProblem), so node 0 has no parent and is "
        "nobody's favourite child: favourite[u] is -1 or at least 1, where `< 0` and `< 1` agree",
    ),
    (
        "simulator",
        "if resource_free[r] > begin:",
        "if resource_free[r] is not begin:",
        "begin = ready[v]\n",
        "the first node of each device: begin = ready[v] = 0.0 and no resource is booked before 0, so "
        "resource_free[r] >= begin; where they differ both branches set begin to the same "
        "max(resource_free[r], begin), and where they are equal the assignment changes nothing",
    ),
    (
        "simulator",
        "resource_free = [0.0] * links.num_resources  # when each shared resource (channel, port, ...) is free",
        "resource_free = [ -1.0] * links.num_resources  # when each shared resource (channel, port, ...) is free",
        "",
        "every read of resource_free takes the larger of it and a time >= 0 (the simulator's clock starts "
        "at 0: `if resource_free[r] > begin` here and in LinkModel.book), so an unbooked resource free "
        "at -1 or at 0 gives the same begin",
    ),
    (
        "batch",
        "(out_degree[src] == 1)",
        "(out_degree[src] < 1)",
        "",
        "an edge's tail has at least one successor, and when it has exactly one that successor is its "
        "unique lowest one, which the last clause of condition (ii) accepts already: the clause "
        "|succ(u)| = 1 is implied, so dropping it (< 1 is never true) changes no mask",
    ),
    (
        "batch",
        "(out_degree[src] == 1)",
        "(out_degree[src] <= 1)",
        "",
        "an edge's tail has at least one successor, so <= 1 and == 1 agree",
    ),
    (
        "batch",
        "dense = dense.reshape(-1)",
        "dense = dense.reshape(~1)",
        "",
        "numpy (2.x, as pinned) takes any negative size in reshape as the one inferred dimension: "
        "reshape(-2) is reshape(-1)",
    ),
    (
        "celeritas",
        "if scheduler.allowed[v][current] and d > current:",
        "if scheduler.allowed[v][current] and d >= current:",
        "",
        "d is one of (current + step) % num_devices for step in 1..num_devices-1, never current itself",
    ),
    (
        "celeritas",
        "if kept == first:",
        "if kept is first:",
        "",
        "device numbers are small ints (at most the cluster's device count, far below 256), which "
        "CPython caches: `is` and `==` agree on them",
    ),
    (
        "memory",
        "while k + 1 < count and times[k + 1] <= point:",
        "while k + 1 != count and times[k + 1] <= point:",
        "",
        "k starts at bisect_right(times, low) - 1 <= count - 1 and grows by one while k + 1 < count, "
        "so k + 1 never passes count and `<` and `!=` stop at the same step",
    ),
    (
        "memory",
        "points.update(e for _, _, e in extra if e < high)",
        "points.update(e for _, _, e in extra if e <= high)",
        "",
        "the only point added is `high`, where every tentative allocation has ended (half-open spans): "
        "the level there is the ledger's own, already counted in best = max(0, the ledger's max level)",
    ),
    (
        "memory",
        "spans = spans.reshape(-1, 2)",
        "spans = spans.reshape(~1, 2)",
        "",
        "numpy (2.x, as pinned) takes any negative size in reshape as the inferred dimension",
    ),
    (
        "memory",
        "keys = np.fromiter(itertools.chain.from_iterable(arrival), dtype=np.int64, count=count).reshape(-1, 2)",
        "keys = np.fromiter(itertools.chain.from_iterable(arrival), dtype=np.int64, count=count).reshape(- 2, 2)",
        "",
        "numpy (2.x, as pinned) takes any negative size in reshape as the inferred dimension",
    ),
    (
        "memory",
        "half = len(times) // 2",
        "half = len(times) // 3",
        "",
        "where a full block is cut changes only the blocks' sizes (both parts keep at least 171 of the "
        "513 breakpoints): every level and peak is the one a flat list gives, whatever the cut "
        "(test_ledger_blocks_agree_with_a_brute_force_sweep checks the answers against a sweep)",
    ),
    (
        "memory",
        "if holder != home or not self._is_output[x]:  # a graph output stays home until the end",
        "if holder is not home or not self._is_output[x]:  # a graph output stays home until the end",
        "",
        "place stores one argument object both as _home[x] and as the first key of copy_end[x], and a "
        "dict keeps a key's first object, so the holder equal to home is home itself and no other "
        "holder equals it: `!=` and `is not` agree whatever int type the device is",
    ),
    (
        "fastt",
        "indegree = np.bincount(problem.edge_dst, minlength=n) if len(problem.edge_dst) "
        "else np.zeros(n, dtype=np.int64)",
        "indegree = np.bincount(problem.edge_dst, minlength=n) if not len(problem.edge_dst) "
        "else np.zeros(n, dtype=np.int64)",
        "",
        "with every node taken as an entry the path still starts at an entry: rank_u(p) >= rank_u(s) "
        "for every edge p -> s (times and transfers are >= 0), so the lowest-numbered node of largest "
        "rank, which argmax returns, has no predecessor (one would be numbered lower with a rank as "
        "large); without edges both branches give zeros",
    ),
    (
        "fastt",
        "d = -1",
        "d = ~1",
        "",
        "d is only read by the `if d < 0` after it, which -2 passes as -1 does",
    ),
    (
        "fastt",
        "if n == 0:",
        "if n <= 0:",
        "",
        "n is a node count, never negative",
    ),
    (
        "cpd",
        "_BLOCK = 2048",
        "_BLOCK = 2047",
        "",
        "the block is only how many positions the programme prepares at a time: each block's inward "
        "sums are built from every edge into it, so any block size gives the same S and P",
    ),
    (
        "cpd",
        "if n == 0:",
        "if n == -1:",
        "",
        "with no position the general path returns the same: no block runs, no breakpoint is read back "
        "(j = 0), and S(0) = 0, so ([], 0.0) either way",
    ),
    (
        "cpd",
        "cost = np.zeros(n + r + 1)",
        "cost = np.zeros(n + r // 1)",
        "",
        "the largest index written is cost[m + r] with m <= n - 1, i.e. n + r - 1, and slices past the "
        "end are clipped: n + r entries suffice, the last one of n + r + 1 is never used",
    ),
    (
        "ilp_memory",
        "model.Add(size == last - ilp.start[g])",
        "model.Add(size >= last - ilp.start[g])",
        "",
        "size is the length of the optional intervals (start, size, last) on the producer's allowed "
        "devices; CP-SAT enforces start + size == end on the one that is present (the node is placed "
        "somewhere), so size == last - start holds either way",
    ),
    (
        "roofline",
        "if TYPE_CHECKING:",
        "if not TYPE_CHECKING:",
        "",
        "the guarded names (Cluster, Device, Graph, Node) appear only in annotations, which the module "
        "defers; importing them at run time as well changes no value (graphir.ir is imported already)",
    ),
    (
        "ilp_memory",
        "if nbytes and finish > begin:",
        "if nbytes or finish > begin:",
        "",
        "every call holds bytes over [begin, finish) with finish >= begin (end >= start, L >= E, R >= "
        "Te >= Ts, the horizon last); the extra events it lets through are zero bytes, or a free and an "
        "allocation of the same bytes at one instant, which the sort puts free first: no level changes",
    ),
    (
        "batch",
        "| (in_degree[dst] == 1)",
        "| (in_degree[dst] <= 1)",
        "",
        "an edge's head has at least one predecessor, so <= 1 and == 1 agree",
    ),
    (
        "batch",
        "| (height[dst] == height[src] + 1)",
        "| (height[dst] <= height[src] + 1)",
        "",
        "heights are longest-path levels (Definition 3.4), so an edge u -> v has H(v) >= H(u) + 1 and "
        "<= agrees with ==",
    ),
)


def _annotation_only(old: str, new: str) -> bool:
    """True when the two lines differ only in annotations (a signature's or a local variable's).

    Every module under mutation starts with ``from __future__ import annotations`` (checked by
    :func:`main`), so such a change is never evaluated. The lines are compared as syntax trees with
    their annotations removed.
    """

    def bare(line: str) -> str | None:
        source = line + "\n    pass" if line.startswith("def ") else line + ("}" if line.endswith("{") else "")
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                node.returns = None
                for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                    arg.annotation = None
            elif isinstance(node, ast.AnnAssign):
                node.annotation = ast.Constant(None)
        return ast.dump(tree)

    before = bare(old)
    if before is None and not old.startswith("def "):
        # a line of a signature split over lines (parameters, or the closing `) -> ...:`): parse it
        # as a one-line signature
        def signature(line: str) -> str:
            return "def _(" + (line if line.startswith(")") else line.rstrip(",") + "):")

        before, after = bare(signature(old)), bare(signature(new))
        return before is not None and before == after
    return before is not None and before == bare(new)


def _equivalent(name: str, old: str, new: str, diff: str) -> str | None:
    """The documented reason when this survivor is a listed equivalent mutant."""
    if old != new and _annotation_only(old, new):
        return ANNOTATION
    for module, old_line, new_line, context, reason in EQUIVALENT:
        if (module, old_line, new_line) == (name, old, new) and context in diff:
            return reason
    return None


def _copy_tree(work: Path) -> Path:
    """A fresh copy of the sources under ``work/tree`` that imports itself (see the module docstring)."""
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "Output")
    for part in TREE_PARTS:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, tree / part, ignore=ignore, symlinks=True)
        else:
            shutil.copy2(src, tree / part)
    for name, folder in MAPPED.items():
        (tree / "graphir" / name).symlink_to(Path("..") / folder)
    zoo = ROOT / "zoo"
    if zoo.exists():
        (tree / "zoo").symlink_to(zoo.resolve())
    return tree


def _test_command(target: Target) -> list[str]:
    # -B: the mutated module is compiled from its source every run (a stale .pyc with the same size
    # and mtime second would otherwise hide a mutant).
    command = [sys.executable, "-B", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow"]
    if target.skip:
        command += ["-k", " and ".join(f"not {name}" for name in target.skip)]
    return [*command, *target.tests]


def _sample(session: Path, size: int | None, seed: int) -> tuple[int, int]:
    """Keep a seeded sample of ``size`` mutants (the rest marked skipped); returns (all, kept)."""
    from cosmic_ray.work_db import WorkDB, use_db  # noqa: PLC0415 (installed by make mutation only)
    from cosmic_ray.work_item import WorkerOutcome, WorkResult  # noqa: PLC0415

    with use_db(str(session), WorkDB.Mode.open) as db:
        ids = sorted(item.job_id for item in db.work_items)
        # job ids are random uuids: sort the items by position so the sample depends on the seed only
        items = sorted(
            db.work_items,
            key=lambda item: (
                item.mutations[0].start_pos,
                item.mutations[0].operator_name,
                item.mutations[0].occurrence,
            ),
        )
        if size is None or size >= len(items):
            return len(ids), len(ids)
        keep = {item.job_id for item in random.Random(seed).sample(items, size)}
        skipped = [job for job in ids if job not in keep]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled"))
        return len(ids), size


def _diff_lines(diff: str) -> tuple[str, str]:
    old = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    new = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(old), " / ".join(new)


def _ran_no_test(output: str) -> bool:
    """True when pytest selected nothing or could not parse its command line (not a kill)."""
    tail = output.strip().splitlines()[-1:] if output.strip() else [""]
    usage = ("error: unrecognized arguments", "file or directory not found")
    return tail[0].startswith("no tests ran") or any(text in output for text in usage)


def _all_passed(output: str) -> bool:
    """True when pytest's summary line reports passes only (no failure, error or timeout)."""
    lines = output.strip().splitlines()
    summary = lines[-1] if lines else ""
    return " passed" in summary and not any(word in summary for word in ("failed", "error", "interrupted"))


def _collect(session: Path, name: str) -> dict[str, object]:
    from cosmic_ray.work_db import WorkDB, use_db  # noqa: PLC0415
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome  # noqa: PLC0415

    killed = timeouts = incompetent = 0
    survivors: list[dict[str, object]] = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.test_outcome == TestOutcome.KILLED and _ran_no_test(result.output or ""):
                incompetent += 1  # the test command itself failed to start: no evidence either way
            elif (
                result.test_outcome == TestOutcome.KILLED
                and not _all_passed(result.output or "")
                and not (
                    # a listed equivalent mutant that ran past the timeout was slowed by the machine's load
                    result.output == "timeout" and _equivalent(name, *_diff_lines(result.diff or ""), result.diff or "")
                )
            ):
                killed += 1
                timeouts += result.output == "timeout"
            elif result.test_outcome in (TestOutcome.SURVIVED, TestOutcome.KILLED):
                # SURVIVED, or a non-zero exit although every test passed (seen under heavy load,
                # after the summary line), or a listed equivalent's timeout: no test failed on the
                # mutant, so it counts as a survivor unless EQUIVALENT lists it
                spec = item.mutations[0]
                old, new = _diff_lines(result.diff or "")
                survivors.append(
                    {
                        "line": spec.start_pos[0],
                        "operator": spec.operator_name.removeprefix("core/"),
                        "function": spec.definition_name or "",
                        "old": old,
                        "new": new,
                        "diff": result.diff or "",
                    }
                )
            else:
                incompetent += 1
    survivors.sort(key=lambda s: (s["line"], s["operator"], s["new"]))
    return {"killed": killed, "timeouts": timeouts, "incompetent": incompetent, "survivors": survivors}


def _reopen_survivors(tree: Path, session: Path) -> None:
    """Copy the checkout's tests into ``tree`` and forget the survivors' results, so they run again.

    Tests are only ever added between runs, so a mutant that a test killed stays killed; the ones
    that survived meet the new tests.
    """
    shutil.rmtree(tree / "tests")
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "Output"))
    connection = sqlite3.connect(session)
    with connection:  # cosmic-ray stores the outcome by its enum name
        connection.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")
    connection.close()


def run_module(
    name: str,
    work: Path,
    sample: int | None,
    seed: int,
    resume: bool = False,
    retest: bool = False,
    collect_only: bool = False,
) -> dict[str, object]:
    """Mutate one module in a fresh copy of the tree; the outcome as a JSON-able dict.

    ``resume``: reuse the copy and session of an interrupted run of the same module (only the mutants
    without a result run). ``retest`` (with ``resume``): also run the survivors again against the
    checkout's current tests. ``collect_only`` (with ``resume``): read the session as it is (the
    equivalent-mutant list may have grown since), running nothing.
    """
    target = MODULES[name]
    tree = work / name / "tree"
    session = tree / "session.sqlite"
    meta_file = tree / "meta.json"
    config = tree / "cosmic-ray.toml"
    cosmic = Path(sys.executable).parent / "cosmic-ray"
    if resume and meta_file.exists():
        meta = json.loads(meta_file.read_text())
        if retest:
            _reopen_survivors(tree, session)
    else:
        tree = _copy_tree(work / name)
        command = _test_command(target)
        test_command = shlex.join(command)
        began = time.monotonic()
        # exactly as cosmic-ray will run it (it splits the string with shlex), so a quoting slip shows here
        baseline = subprocess.run(shlex.split(test_command), cwd=tree, capture_output=True, text=True, check=False)
        baseline_s = time.monotonic() - began
        if baseline.returncode != 0 or " passed" not in baseline.stdout:
            raise SystemExit(f"error: the tests of {name} fail unmutated:\n{baseline.stdout[-3000:]}")
        timeout = round(3 * baseline_s + 10)
        config.write_text(
            "[cosmic-ray]\n"
            f'module-path = "{target.path}"\n'
            f"timeout = {timeout}\n"
            "excluded-modules = []\n"
            f"test-command = {json.dumps(test_command)}\n"
            "\n[cosmic-ray.distributor]\n"
            'name = "local"\n'
        )
        subprocess.run([str(cosmic), "init", str(config), str(session)], cwd=tree, check=True)
        total, kept = _sample(session, sample, seed)
        meta = {"total": total, "kept": kept, "seed": seed, "timeout": timeout, "baseline_s": baseline_s}
        meta["seconds"] = 0.0
        meta_file.write_text(json.dumps(meta))
    total, kept, timeout, baseline_s = meta["total"], meta["kept"], meta["timeout"], meta["baseline_s"]
    print(f"mutation: {name}: {kept} of {total} mutants, timeout {timeout} s", flush=True)
    if not collect_only:
        began = time.monotonic()
        subprocess.run([str(cosmic), "exec", str(config), str(session)], cwd=tree, check=True)
        meta["seconds"] += time.monotonic() - began
        meta_file.write_text(json.dumps(meta))
    elapsed = meta["seconds"]
    outcome = _collect(session, name)
    equivalent = []
    survivors = []
    for survivor in outcome.pop("survivors"):
        reason = _equivalent(name, survivor["old"], survivor["new"], survivor.pop("diff"))
        (equivalent if reason else survivors).append({**survivor, **({"why": reason} if reason else {})})
    killed = int(outcome["killed"])
    denominator = killed + len(survivors)
    ran = denominator + len(equivalent) + int(outcome["incompetent"])
    return {
        "module": target.path,
        "what": target.what,
        "tests": list(target.tests),
        "skipped_tests": list(target.skip),
        "mutants": total,
        "run": ran,
        "drawn": kept,
        "sample_seed": meta["seed"] if kept < total else None,
        **outcome,
        "survived": len(survivors),
        "equivalent": equivalent,
        "survivors": survivors,
        "score": round(100 * killed / denominator, 1) if denominator else None,
        "baseline_s": round(baseline_s, 1),
        "timeout_s": timeout,
        "seconds": round(elapsed),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


SCOPE = (
    "Scope. Each row mutates the one file named. HEFT's row is `passes/place/heft.py` alone (rank_u order",
    "and the min-EFT call: 4 mutants); the list scheduler it drives (insertion slots, EST/EFT, received",
    "copies, shared by HEFT, DPOS, Order-Place and Adjusting) is the `common` row",
    "(`passes/place/common.py`). m-SCT's LP and its rounding are `sct_lp`; the placers around it (m-TOPO,",
    "m-ETF, m-SCT's placement) are `baechi`. The link model (`graphir/links.py`) is the `links` row. The",
    "ranks (`passes/place/problem.py`) are not mutated. The samples are small (40-45 mutants a module, 20",
    "for ilp_memory): a score is an estimate with a spread of several points, not an exhaustive count.",
    "",
    "ilp_model's selection is `tests/unit/test_ilp_model.py` (the model builder on hand-worked instances,",
    "seconds) then `test_place_ilp` less its three slowest tests (the brute-force optimality cases); each",
    "section gives its module's unmutated selection time, measured on the shared, loaded machine.",
)


# Why a survivor survives, and whether it matters: (module, line number) -> note, shown in the report.
SURVIVOR_NOTES: dict[tuple[str, int], str] = {
    ("simulator", 303): "ties among the first nodes' finishes at one instant go by node number instead of device; "
    "matters only when such finishes then queue transfers on one shared resource",
    ("simulator", 370): "devices offered at one instant in event order instead of sorted; changes only the "
    "sequence numbers of simultaneous starts, hence later tie order",
    ("memory", 319): "differs only for a tentative negative allocation (a release), which no caller passes",
    ("baechi", 115): "killed by test_m_topo_memory_share_by_hand (added after this mutant ran; checked by applying "
    "it by hand)",
    ("baechi", 555): "killed by test_m_sct_reports_its_lp_wall_time (added after this mutant ran; checked by "
    "applying it by hand)",
    ("baechi", 376): "m-ETF would jump to the next candidate's start past an earlier event (a device freeing): "
    "the node is still started at its own earliest time, so it differs only when that event would have let "
    "another node in first; no hand-worked case of it yet",
    ("baechi", 302): "m-SCT's 'awake' test with `is` for `==`: when two devices tie for the favourite child's "
    "earliest start only the first (the object min returns) counts as awake; no hand-worked tie case yet",
    ("baechi", 481): "m-ETF's lazy chooser (mem-model=liveness) would start a node whose data arrives after "
    "`now` instead of waiting for the next event: differs only when a device freed before that arrival "
    "offers an earlier start; no hand-worked case of it yet",
    ("ilp_memory", 80): "CP-SAT model constraint: killing it needs a solve where memory binds on these bytes",
    ("ilp_memory", 93): "CP-SAT model bound: killing it needs a solve where a zero-length lifetime matters",
    ("ilp_memory", 112): "CP-SAT model constraint: killing it needs a solve where a copy's last unit of life matters",
}


def write_report(results: dict[str, dict[str, object]]) -> str:
    """The Markdown page of every module measured so far."""
    lines = [
        "# Mutation testing of the algorithmic core",
        "",
        "Written by `make mutation` (`python -m devtools.mutation`, cosmic-ray 8, one mutant at a time,",
        "each module's own test selection with `pytest -x`; see the module docstring of `devtools/mutation.py`).",
        "Score = killed / (killed + survived); a mutant that runs past the timeout counts as killed (on a",
        "loaded machine a timeout can also be a slow run: a listed equivalent mutant that timed out is",
        "reported as equivalent, and the timeouts are counted in the table); a non-zero exit with every",
        "test passed counts as a survivor;",
        "equivalent mutants (listed below with the reason) leave the denominator; *incompetent* mutants",
        "(the mutation could not be applied or the tests could not start) are counted apart.",
        "",
        "Sampling: a module with more mutants than `--sample N` runs N of them, drawn with",
        "`random.Random(seed).sample` from the mutants sorted by (position, operator, occurrence), so the",
        "same seed on the same source draws the same mutants. A module's survivors may be run again",
        "after new tests (`--resume --retest-survivors`: tests are only added, so a killed mutant stays",
        "killed); each module's section lists every run that produced its row, and the time is their sum.",
        "",
        "| module | what | mutants | run | killed (timeouts) | survived | equivalent | incompetent | score | time "
        "| tests |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sorted(results):
        r = results[name]
        drawn = r.get("drawn", r["run"])
        run = f"{r['run']}" if drawn == r["mutants"] else f"{r['run']} (sample, seed {r['sample_seed']})"
        if r["run"] < drawn:
            run += f", {drawn - r['run']} of the {drawn} drawn not run: stopped at the deadline"
        score = "-" if r["score"] is None else f"{r['score']:.1f} %"
        tests = ", ".join(Path(str(t)).stem for t in r["tests"])
        if r.get("skipped_tests"):
            tests += " (less " + ", ".join(r["skipped_tests"]) + ")"
        lines.append(
            f"| {name} | {r['what']} | {r['mutants']} | {run} | {r['killed']} ({r['timeouts']}) | {r['survived']} "
            f"| {len(r['equivalent'])} | {r['incompetent']} | {score} | {r['seconds']} s | {tests} |"
        )
    lines += ["", *SCOPE]
    missing = sorted(set(MODULES) - set(results))
    low = sorted(name for name, r in results.items() if r["score"] is None or r["score"] < 80)
    lines += ["", "Not measured yet: " + (", ".join(missing) if missing else "none") + "."]
    lines += ["Measured below 80 %: " + (", ".join(low) if low else "none") + "."]
    for name in sorted(results):
        r = results[name]
        lines += [
            "",
            f"## {name} (`{r['module']}`, measured {r['date']}, unmutated selection {r['baseline_s']} s, "
            f"per-mutant timeout {r['timeout_s']} s)",
        ]
        commands = r.get("commands") or []
        if commands:
            lines += ["", "Command(s), in order (under `nice -n 19`): " + "; ".join(f"`{c}`" for c in commands)]
        if r["survivors"]:
            lines += ["", "Surviving mutants:", ""]
            for s in r["survivors"]:
                note = SURVIVOR_NOTES.get((name, int(s["line"])))
                lines.append(
                    f"- line {s['line']} ({s['function']}, {s['operator']}): `{s['old']}` -> `{s['new']}`"
                    + (f": {note}" if note else "")
                )
        if r["equivalent"]:
            lines += ["", "Equivalent mutants:", ""]
            for s in r["equivalent"]:
                lines.append(f"- line {s['line']}: `{s['old']}` -> `{s['new']}`: {s['why']}")
        if not r["survivors"] and not r["equivalent"]:
            lines += ["", "No survivor."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", default=",".join(MODULES), help="comma-separated names from MODULES")
    parser.add_argument("--sample", type=int, default=None, help="run a seeded sample of this many mutants per module")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "mutation")
    parser.add_argument("--resume", action="store_true", help="finish an interrupted run's sessions")
    parser.add_argument("--collect-only", action="store_true", help="with --resume: rewrite the results, run nothing")
    parser.add_argument(
        "--retest-survivors", action="store_true", help="with --resume: run the survivors against the current tests"
    )
    parser.add_argument("--report-only", action="store_true", help="rewrite mutation.md from mutation.json")
    args = parser.parse_args(argv)
    command_line = "python -m devtools.mutation " + shlex.join(sys.argv[1:] if argv is None else argv)
    results = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
    if not args.report_only:
        names = [name.strip() for name in args.modules.split(",") if name.strip()]
        unknown = [name for name in names if name not in MODULES]
        if unknown:
            print(f"error: unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}", file=sys.stderr)
            return 1
        os.environ.setdefault("PYTHONHASHSEED", "0")
        lazy = [n for n in names if "from __future__ import annotations" not in (ROOT / MODULES[n].path).read_text()]
        if lazy:
            print(f"error: {', '.join(lazy)} evaluate annotations; ANNOTATION does not hold there", file=sys.stderr)
            return 1
        for name in names:
            outcome = run_module(
                name, args.work, args.sample, args.seed, args.resume, args.retest_survivors, args.collect_only
            )
            # another run may have written other modules meanwhile: merge into the file as it is now
            results = json.loads(RESULTS_JSON.read_text()) if RESULTS_JSON.exists() else {}
            before = results.get(name, {}).get("commands", []) if args.resume else []
            outcome["commands"] = [*before, command_line]
            results[name] = outcome
            RESULTS_JSON.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            RESULTS_MD.write_text(write_report(results))
            print(f"mutation: {name}: score {results[name]['score']} %", flush=True)
    RESULTS_MD.write_text(write_report(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
