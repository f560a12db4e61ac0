"""``simulate{order=dynamic}``: TensorFlow's executor order, newest first on a CPU, FIFO on a GPU.

Worked by hand (the simulator's module docstring states the rule): on a CPU the node a device's own
node made ready most recently runs first (a stack; a finished node's newly ready successors are
pushed in successor order, so the last runs first); a node made ready by an arrival from another
device, and the step's initial nodes, wait behind that stack, first ready first, ties by ``order``.
On a GPU every ready node queues first ready first, ties by ``order``. Cluster: two devices, link
latency 0 and 1 GB/s, so a 1e6-byte tensor takes 1 ms and an empty one none (``pair`` rule).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graphir.parser import parse_module
from graphir.simulator import newest_first_device, simulate

T = "f32[250000]"  # 1e6 B: 1 ms at 1 GB/s
E = "f32[0]"  # an empty tensor: no transfer time
MS = 1e-3


def cluster_toml(kind: str) -> str:
    return "\n".join(
        [
            "[default_link]",
            "latency = 0.0",
            "bandwidth = 1e9",
            *[f'[[device]]\nname = "d{i}"\nkind = "cpu"\ntf_device = "/device:{kind}:{i}"' for i in range(2)],
        ]
    )


def node(name: str, arg: str, device: str, order: int, cost: str = "1ms", out: str = T, arg_type: str = T) -> str:
    where = f'cost = {cost}, device = "{device}", order = {order}'
    return f"    %{name} = onnx.Relu(%{arg}) : ({arg_type}) -> {out} [{where}]"


def module(tmp_path: Path, kind: str, lines: list[str], results: str):
    path = tmp_path / f"{kind}.toml"
    path.write_text(cluster_toml(kind))
    body = "\n".join([*lines, f"    return {results}"])
    return parse_module(f'module @m {{cluster = "{path}"}} {{\n  graph @g(%x : {T}) {{\n{body}\n  }}\n}}\n')


def times(result, m) -> dict[str, tuple[float, float]]:
    """Start and finish of every node, in ms (rounded: the sums of 1e-3 s steps are not exact)."""
    nodes = m.graph.index().nodes
    return {
        n.name: (round(float(result.start[i]) / MS, 9), round(float(result.finish[i]) / MS, 9))
        for i, n in enumerate(nodes)
    }


def test_only_a_gpu_runs_first_ready_first():
    assert not newest_first_device("/device:GPU:0")
    assert not newest_first_device("/job:worker/task:1/device:gpu:3")
    assert newest_first_device("/device:CPU:0")
    assert newest_first_device("/job:worker/task:0/device:CPU:0")


@pytest.mark.parametrize("kind", ["CPU", "GPU"])
def test_newest_first_feeds_the_other_device_sooner(tmp_path, kind):
    # d0: p and q (roots, order 0 and 1), s = f(p); d1: t = f(s), 5 ms; s's tensor takes 1 ms.
    # Both: p 0..1 (the roots by order). p's end makes s ready at 1, while q waits since 0.
    # CPU (newest first): s 1..2 (made ready by d0's own p, on top), q 2..3; s's tensor 2..3,
    #   t 3..8. Makespan 8.
    # GPU (first ready first): q 1..2 (ready at 0), s 2..3; tensor 3..4, t 4..9. Makespan 9.
    lines = [node("p", "x", "d0", 0), node("q", "x", "d0", 1), node("s", "p", "d0", 2), node("t", "s", "d1", 0, "5ms")]
    m = module(tmp_path, kind, lines, "%q, %t")
    result = simulate(m, "pair", "dynamic")
    got = times(result, m)
    if kind == "CPU":
        assert got["s"] == (1, 2) and got["q"] == (2, 3) and got["t"] == (3, 8)
        assert result.makespan == pytest.approx(8 * MS)
    else:
        assert got["q"] == (1, 2) and got["s"] == (2, 3) and got["t"] == (4, 9)
        assert result.makespan == pytest.approx(9 * MS)


@pytest.mark.parametrize("kind", ["CPU", "GPU"])
def test_the_last_successor_runs_first_and_its_own_successors_before_its_siblings(tmp_path, kind):
    # d0: a 0..1 makes b, c, d ready at 1 (successor order b, c, d; ``order`` 1, 2, 3); e = f(d).
    # CPU: the stack holds b, c, d: d 1..2, then e (made ready by d, on top) 2..3, c 3..4, b 4..5.
    # GPU: b, c, d tie at 1 and go by order: b 1..2, c 2..3, d 3..4; e (ready at 4) 4..5.
    lines = [
        node("a", "x", "d0", 0),
        node("b", "a", "d0", 1),
        node("c", "a", "d0", 2),
        node("d", "a", "d0", 3),
        node("e", "d", "d0", 4),
    ]
    m = module(tmp_path, kind, lines, "%b, %c, %e")
    got = times(simulate(m, "pair", "dynamic"), m)
    if kind == "CPU":
        assert [got[k] for k in "dceb"] == [(1, 2), (3, 4), (2, 3), (4, 5)]
    else:
        assert [got[k] for k in "bcde"] == [(1, 2), (2, 3), (3, 4), (4, 5)]


@pytest.mark.parametrize("kind", ["CPU", "GPU"])
def test_an_arrival_waits_behind_local_work(tmp_path, kind):
    # d1: c 0..1 sends an empty tensor to r on d0 (arrives at 1). d0: a 0..2, then b = f(a).
    # At 2 d0 has r (ready at 1, by an arrival) and b (ready at 2, by d0's own a).
    # CPU: b 2..3 (local work first), r 3..4. GPU: r 2..3 (ready first), b 3..4.
    lines = [
        node("a", "x", "d0", 0, "2ms"),
        node("b", "a", "d0", 1),
        node("c", "x", "d1", 0, out=E),
        node("r", "c", "d0", 2, out=E, arg_type=E),
    ]
    m = module(tmp_path, kind, lines, "%b, %r")
    got = times(simulate(m, "pair", "dynamic"), m)
    if kind == "CPU":
        assert got["b"] == (2, 3) and got["r"] == (3, 4)
    else:
        assert got["r"] == (2, 3) and got["b"] == (3, 4)


def test_every_rule_is_deterministic_under_newest_first(tmp_path):
    lines = [node("p", "x", "d0", 0), node("q", "x", "d0", 1), node("s", "p", "d0", 2), node("t", "s", "d1", 0, "5ms")]
    m = module(tmp_path, "CPU", lines, "%q, %t")
    for rule in ("pair", "port", "task", "topology"):
        first, second = simulate(m, rule, "dynamic"), simulate(m, rule, "dynamic")
        assert first.start.tolist() == second.start.tolist() and first.transfer_log == second.transfer_log
