"""The lowering and the simulator agree on the execution order a placement records (issue 14).

A placement records ``enforced`` (the attribute's absence) or ``dynamic`` in the module attribute
``execution_order``; the TF lowering adds the per-device control dependencies exactly under
``enforced``, and ``simulate`` defaults to the recorded order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graphir.driver import run
from graphir.errors import PassError
from graphir.parser import parse_module
from graphir.printer import print_module
from graphir.simulator import ORDER_METADATA, record_order, recorded_order, simulate

T = "f32[250000]"  # 1e6 B: 1 ms at 1 GB/s
MS = 1e-3
MESH2 = """
[default_link]
latency = 0.0
bandwidth = 1e9
[[device]]
name = "cpu0"
kind = "cpu"
tf_device = "/device:CPU:0"
[[device]]
name = "cpu1"
kind = "cpu"
tf_device = "/device:CPU:1"
"""


def stalled(tmp_path: Path, header: str = ""):
    """cpu0: a (0..1) -> c on cpu1; cpu1's written order: c (waits for a's tensor) before d (ready at 0).

    enforced: cpu1 stalls: c 2..3, d 3..4 (makespan 4). dynamic: d 0..1, c 2..3 (makespan 3).
    """
    cluster = tmp_path / "c.toml"
    cluster.write_text(MESH2)
    lines = [
        f'    %a = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu0", order = 0]',
        f'    %c = onnx.Relu(%a) : ({T}) -> {T} [cost = 1ms, device = "cpu1", order = 0]',
        f'    %d = onnx.Relu(%x) : ({T}) -> {T} [cost = 1ms, device = "cpu1", order = 1]',
        "    return %c, %d",
    ]
    body = "\n".join(lines)
    return parse_module(f'module @m {{cluster = "{cluster}"{header}}} {{\n  graph @g(%x : {T}) {{\n{body}\n  }}\n}}\n')


def test_simulate_defaults_to_the_recorded_order(tmp_path):
    m = stalled(tmp_path)
    assert recorded_order(m) == "enforced" and ORDER_METADATA not in m.metadata
    assert simulate(m, "pair").makespan == pytest.approx(4 * MS)
    record_order(m, "dynamic")
    assert m.metadata[ORDER_METADATA] == "dynamic"
    assert simulate(m, "pair").makespan == pytest.approx(3 * MS)
    assert simulate(m, "pair", "enforced").makespan == pytest.approx(4 * MS)  # an explicit order wins
    record_order(m, "enforced")  # enforced is the attribute's absence: printed modules stay as they were
    assert ORDER_METADATA not in m.metadata


def test_the_record_survives_the_text_format_and_reaches_the_pass(tmp_path, capsys):
    m = stalled(tmp_path, f', {ORDER_METADATA} = "dynamic"')
    assert recorded_order(m) == "dynamic"
    text = print_module(m)
    assert f'{ORDER_METADATA} = "dynamic"' in text.splitlines()[0]
    assert recorded_order(parse_module(text)) == "dynamic"
    source = tmp_path / "m.gir"
    source.write_text(text)
    out = str(tmp_path / "o.gir")
    assert run([str(source), "--passes=simulate{congestion=pair}", "--stats", "-o", out]) == 0
    assert "simulate.makespan-s = 0.003" in capsys.readouterr().err
    assert run([str(source), "--passes=simulate{congestion=pair order=enforced}", "--stats", "-o", out]) == 0
    assert "simulate.makespan-s = 0.004" in capsys.readouterr().err


def test_schedule_and_place_record_the_order(tmp_path, capsys):
    source = tmp_path / "m.gir"
    source.write_text(print_module(stalled(tmp_path)))
    out = tmp_path / "o.gir"
    assert run([str(source), "--passes=schedule{order=dynamic}", "-o", str(out)]) == 0
    assert recorded_order(parse_module(out.read_text())) == "dynamic"
    # place records its placer's order (every placer today: enforced), replacing a stale record.
    assert run([str(out), "--passes=place{algo=single}", "-o", str(tmp_path / "p.gir")]) == 0
    assert ORDER_METADATA not in parse_module((tmp_path / "p.gir").read_text()).metadata


def test_an_unknown_recorded_order_is_an_error(tmp_path):
    m = stalled(tmp_path, f', {ORDER_METADATA} = "eager"')
    with pytest.raises(PassError, match="execution_order = 'eager'"):
        simulate(m)


def test_the_lowering_adds_control_dependencies_only_under_enforced(tmp_path):
    pytest.importorskip("tensorflow")
    from graphir.backends.tf import lower
    from graphir.backends.tf.lowering import enforces_order

    m = stalled(tmp_path)
    assert enforces_order(m)
    enforced = lower(m).graph_def()
    # cpu1's order c -> d: d carries a control input on c's op (cpu0 has a single node: none there).
    order_edges = [(n.name, i) for n in enforced.node for i in n.input if i.startswith("^")]
    assert order_edges and all(
        "CPU:1" in next(x.device for x in enforced.node if x.name == name) for name, _ in order_edges
    )
    record_order(m, "dynamic")
    assert not enforces_order(m)
    dynamic = lower(m).graph_def()
    assert [i for n in dynamic.node for i in n.input if i.startswith("^")] == []
    # an explicit argument still wins over the record
    assert [i for n in lower(m, enforce_order=True).graph_def().node for i in n.input if i.startswith("^")]
