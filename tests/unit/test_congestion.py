"""Congestion rules and execution orders of the simulator (issue 14), golden cases worked by hand.

Every cluster here has latency 0 and 1 GB/s wherever it moves data, and every tensor is
``f32[250000]`` = 1e6 B, so one transfer alone takes exactly 1 ms; every node costs 1 ms unless
stated. Times below are in ms.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CPU_CHARGED, MESH2, MS, SLOW_MESH2, mesh_cluster, module, node, times, transfers

from graphir.cluster import load_cluster_toml
from graphir.cluster_model import ClusterError
from graphir.driver import run
from graphir.errors import PassError
from graphir.links import CONGESTION_RULES, LinkModel
from graphir.parser import parse_module
from graphir.simulator import simulate

MESH3 = mesh_cluster(3)

# Two PCIe switches under one host bridge: g0, g1 behind sw0; g2, g3 behind sw1.
SWITCHES = """
[topology]
relay = false
[[device]]
name = "g0"
[[device]]
name = "g1"
[[device]]
name = "g2"
[[device]]
name = "g3"
[[switch]]
name = "sw0"
[[switch]]
name = "sw1"
[[switch]]
name = "hb"
kind = "host-bridge"
""" + "".join(
    f'[[wire]]\na = "{a}"\nb = "{b}"\nlatency = 0.0\nbandwidth = 1e9\n'
    for a, b in [("g0", "sw0"), ("g1", "sw0"), ("g2", "sw1"), ("g3", "sw1"), ("sw0", "hb"), ("sw1", "hb")]
)


# ---- port: Moirai eq. (8), a device sends one and receives one transfer at a time


def fan_out(tmp_path):
    # a on g0 (0..1) feeds b on g1 and c on g2: two transfers leave g0 at t = 1.
    nodes = [node("a", "%x", "g0", 0), node("b", "%a", "g1", 0), node("c", "%a", "g2", 0)]
    body = "\n".join([*nodes, "    return %b, %c"])
    return module(tmp_path, MESH3, body)


def test_port_serialises_two_transfers_out_of_one_device(tmp_path):
    m = fan_out(tmp_path)
    # pair: g0->g1 and g0->g2 are different channels: both 1..2; b and c run 2..3. Makespan 3.
    pair = simulate(m, "pair")
    assert transfers(pair) == [(1.0, 2.0), (1.0, 2.0)]
    assert pair.makespan == pytest.approx(3 * MS)
    # port: both need g0.out: the first 1..2, the second 2..3; its consumer runs 3..4. Makespan 4.
    port = simulate(m, "port")
    assert transfers(port) == [(1.0, 2.0), (2.0, 3.0)]
    assert sorted(times(port, m)[k] for k in "bc") == [(2.0, 3.0), (3.0, 4.0)]
    assert port.makespan == pytest.approx(4 * MS)


def test_port_serialises_two_transfers_into_one_device(tmp_path):
    # a on g0 and b on g1 (0..1) both feed c on g2: two transfers enter g2 at t = 1.
    nodes = [node("a", "%x", "g0", 0), node("b", "%x", "g1", 0), node("c", "%a, %b", "g2", 0)]
    body = "\n".join([*nodes, "    return %c"])
    m = module(tmp_path, MESH3, body)
    # pair: 1..2 each, c 2..3. port: g2.in takes one at a time: 1..2 then 2..3, c 3..4.
    assert simulate(m, "pair").makespan == pytest.approx(3 * MS)
    port = simulate(m, "port")
    assert transfers(port) == [(1.0, 2.0), (2.0, 3.0)]
    assert times(port, m)["c"] == (3.0, 4.0)


# ---- topology: a PCIe switch's uplink is one wire per direction, shared by every route over it


def cross_switch(tmp_path):
    # a on g0, b on g1 (both behind sw0, 0..1); c on g2 reads a, d on g3 reads b (behind sw1).
    # Routes: g0 -> sw0 -> hb -> sw1 -> g2 and g1 -> sw0 -> hb -> sw1 -> g3: both use the uplink
    # sw0->hb and the downlink hb->sw1; ports and the GPU wires differ.
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g1", 0),
            node("c", "%a", "g2", 0),
            node("d", "%b", "g3", 0),
            "    return %c, %d",
        ]
    )
    return module(tmp_path, SWITCHES, body)


def test_topology_serialises_transfers_through_one_switch_uplink(tmp_path):
    m = cross_switch(tmp_path)
    links = LinkModel.from_cluster(m.cluster, "topology")
    route = [links.resource_names[r] for r in links.routes[0][2]]
    assert route == ["g0.out", "g0->sw0", "sw0->hb", "hb->sw1", "sw1->g2", "g2.in"]
    # Bottleneck 1 GB/s, latency 0: each transfer alone takes 1 ms.
    # topology: a's transfer (requested first: g0 started first) 1..2, b's waits for the uplink 2..3;
    # c 2..3, d 3..4. Makespan 4.
    topology = simulate(m, "topology")
    assert transfers(topology) == [(1.0, 2.0), (2.0, 3.0)]
    assert times(topology, m)["c"] == (2.0, 3.0) and times(topology, m)["d"] == (3.0, 4.0)
    assert topology.makespan == pytest.approx(4 * MS)
    # port and pair see no shared resource: both transfers 1..2, makespan 3.
    for rule in ("pair", "port"):
        assert transfers(simulate(m, rule)) == [(1.0, 2.0), (1.0, 2.0)]


def test_topology_same_switch_traffic_leaves_the_uplink_free(tmp_path):
    # g0 -> g1 stays under sw0 (g0 -> sw0 -> g1): it does not wait for a transfer on the uplink.
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g2", 0),
            node("c", "%a", "g3", 0),  # uplink sw0->hb, from g0
            node("d", "%b", "g1", 0),  # g2 -> sw1 -> hb -> sw0 -> g1: the *other* direction
            "    return %c, %d",
        ]
    )
    m = module(tmp_path, SWITCHES, body)
    # Full duplex: sw0->hb and hb->sw0 are different wires: both transfers 1..2, makespan 3.
    result = simulate(m, "topology")
    assert transfers(result) == [(1.0, 2.0), (1.0, 2.0)]
    assert result.makespan == pytest.approx(3 * MS)


# ---- task: Celeritas §6.1, a transfer is a task on the sending and on the receiving device


def test_task_blocks_compute_on_both_ends(tmp_path):
    # g0: a (order 0, 0..1) -> c on g1; b (order 1) on g0 is independent.
    # g1: d (order 0, 1.5 ms, independent) then c (order 1, reads a).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g0", 1),
            node("d", "%x", "g1", 0, "1.5ms"),
            node("c", "%a", "g1", 1),
            "    return %b, %c, %d",
        ]
    )
    m = module(tmp_path, MESH2, body)
    # pair: the transfer overlaps compute: 1..2; b 1..2 on g0; c at max(2, d's end 1.5) = 2..3.
    pair = times(simulate(m, "pair"), m)
    assert pair["b"] == (1.0, 2.0) and pair["c"] == (2.0, 3.0)
    # task: requested at 1, the transfer needs g0's compute (free at 1) and g1's (d runs until
    # 1.5): 1.5..2.5. b, offered g0 after the transfer was booked, waits for it: 2.5..3.5 (FIFO,
    # no back-filling). c starts when the transfer frees g1: 2.5..3.5. Makespan 3.5.
    result = simulate(m, "task")
    task = times(result, m)
    assert transfers(result) == [(1.5, 2.5)]
    assert task["d"] == (0.0, 1.5)
    assert task["b"] == (2.5, 3.5) and task["c"] == (2.5, 3.5)
    assert result.makespan == pytest.approx(3.5 * MS)


# ---- execution order: enforced (control dependencies) against dynamic (TF's executor)


def test_dynamic_order_runs_a_ready_op_ahead_of_a_blocked_one(tmp_path):
    # g0: a (0..1) -> c on g1. g1's written order: c (order 0, waits for a's tensor), d (order 1,
    # independent).
    body = "\n".join(
        [node("a", "%x", "g0", 0), node("c", "%a", "g1", 0), node("d", "%x", "g1", 1), "    return %c, %d"]
    )
    m = module(tmp_path, MESH2, body)
    # enforced: g1 stalls until c's input arrives at 2: c 2..3, then d 3..4. Makespan 4.
    enforced = times(simulate(m, order="enforced"), m)
    assert enforced["c"] == (2.0, 3.0) and enforced["d"] == (3.0, 4.0)
    # dynamic: at t = 0 only d is ready on g1: d 0..1; c runs when its input lands: 2..3. Makespan 3.
    result = simulate(m, order="dynamic")
    dynamic = times(result, m)
    assert dynamic["d"] == (0.0, 1.0) and dynamic["c"] == (2.0, 3.0)
    assert result.makespan == pytest.approx(3 * MS)


def test_dynamic_ties_follow_the_written_order(tmp_path):
    # Three independent nodes on g0, all ready at 0: the executor runs them in their ``order``
    # (2, 0, 1 as written): q 0..1, r 1..2, p 2..3.
    body = "\n".join([node("p", "%x", "g0", 2), node("q", "%x", "g0", 0), node("r", "%x", "g0", 1), "    return %p"])
    m = module(tmp_path, MESH2, body)
    dynamic = times(simulate(m, order="dynamic"), m)
    assert dynamic["q"] == (0.0, 1.0) and dynamic["r"] == (1.0, 2.0) and dynamic["p"] == (2.0, 3.0)


# ---- pair: today's model, unchanged


def test_pair_reproduces_the_channel_model():
    # tests/filecheck/simulate/congestion.gir on 4xV100 (PCIe 10 us + 12e6 B / 12 GB/s = 1.01 ms):
    # a 0..1 sent 1..2.01; b 1..2 waits for the channel: 2.01..3.02; c 3.02..4.02.
    m = parse_module(Path("tests/filecheck/simulate/congestion.gir").read_text())
    pair = simulate(m, "pair", "enforced")
    assert pair.makespan == pytest.approx(4.02 * MS)
    assert [(b, e) for *_, b, e in pair.transfer_log] == [
        pytest.approx((1 * MS, 2.01 * MS)),
        pytest.approx((2.01 * MS, 3.02 * MS)),
    ]
    # topology (4xV100 has no wires: the route is g0.out, g0->g1, g1.in with the channel's numbers):
    # the 10 us latency holds nothing, so b's transfer starts at 2 when a's bytes are off the
    # route: 2..3.01, c 3.01..4.01.
    topology = simulate(m, "topology", "enforced")
    assert [(b, e) for *_, b, e in topology.transfer_log] == [
        pytest.approx((1 * MS, 2.01 * MS)),
        pytest.approx((2 * MS, 3.01 * MS)),
    ]
    assert topology.makespan == pytest.approx(4.01 * MS)


def test_overheads_are_charged(tmp_path):
    # op_overhead 0.5 ms per op, transfer overhead 0.25 ms: a 0..1.5, transfer 1.5..2.75, c 2.75..4.25.
    toml = MESH2.replace('name = "g0"\n', 'name = "g0"\nop_overhead = 5e-4\n').replace(
        'name = "g1"\n', 'name = "g1"\nop_overhead = 5e-4\n'
    )
    toml = "[overheads]\ntransfer = 2.5e-4\n" + toml
    m = module(tmp_path, toml, "\n".join([node("a", "%x", "g0", 0), node("c", "%a", "g1", 0), "    return %c"]))
    result = simulate(m)
    assert transfers(result) == [(1.5, 2.75)]
    assert result.makespan == pytest.approx(4.25 * MS)


def test_every_rule_runs_on_every_preset_and_is_deterministic(tmp_path):
    for rule in CONGESTION_RULES:
        cluster = load_cluster_toml(_write(tmp_path, SWITCHES))
        links = LinkModel.from_cluster(cluster, rule)
        assert all(links.routes[a][b] for a in range(4) for b in range(4) if a != b)
    m = cross_switch(tmp_path)
    for rule in CONGESTION_RULES:
        for order in ("enforced", "dynamic"):
            first, second = simulate(m, rule, order), simulate(m, rule, order)
            assert first.transfer_log == second.transfer_log and first.makespan == second.makespan


def test_unknown_rule_is_an_error(tmp_path):
    with pytest.raises(PassError, match="unknown congestion rule 'ring'"):
        simulate(fan_out(tmp_path), "ring")


def test_pass_options_reach_the_simulator(tmp_path, capsys):
    m = fan_out(tmp_path)
    from graphir.printer import print_module

    source = tmp_path / "m.gir"
    source.write_text(print_module(m))
    assert run([str(source), "--passes=simulate{congestion=port}", "--stats", "-o", str(tmp_path / "o.gir")]) == 0
    assert "simulate.makespan-s = 0.004" in capsys.readouterr().err


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


# ---- latency and occupancy (issue 14): under topology only bytes / bandwidth holds the route

SLOW_MESH3 = MESH3.replace("latency = 0.0", "latency = 5e-4")


def test_latency_does_not_hold_the_route_under_topology(tmp_path):
    # g0: a (0..1) -> c on g1, b (1..2) -> d on g1; g1 runs c (order 0) then d (order 1).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g0", 1),
            node("c", "%a", "g1", 0),
            node("d", "%b", "g1", 1),
            "    return %c, %d",
        ]
    )
    m = module(tmp_path, SLOW_MESH2, body)
    assert LinkModel.from_cluster(m.cluster, "topology").transfer_time(1e6, 0, 1) == pytest.approx(1.5 * MS)
    # pair (Pesto's channel, busy for latency + bytes / bandwidth = 1.5): a's tensor 1..2.5; b's,
    # requested at 2, waits for the channel: 2.5..4. c 2.5..3.5, d 4..5.
    pair = simulate(m, "pair")
    assert transfers(pair) == [(1.0, 2.5), (2.5, 4.0)]
    assert times(pair, m)["d"] == (4.0, 5.0)
    # topology: a's bytes hold g0.out, g0->g1, g1.in for 1..2 and land at 2.5; b's start at 2 (the
    # route is free once a's bytes are on it), hold it 2..3 and land at 3.5. c 2.5..3.5, d 3.5..4.5.
    topology = simulate(m, "topology")
    assert transfers(topology) == [(1.0, 2.5), (2.0, 3.5)]
    assert times(topology, m)["c"] == (2.5, 3.5) and times(topology, m)["d"] == (3.5, 4.5)
    assert topology.makespan == pytest.approx(4.5 * MS)
    assert topology.link_busy[("g0", "g1")] == pytest.approx(2 * MS)  # occupancy only
    assert pair.link_busy[("g0", "g1")] == pytest.approx(3 * MS)


def test_port_holds_latency_as_moirai_topology_does_not(tmp_path):
    # fan_out with 0.5 ms latency: a on g0 (0..1) feeds b on g1 and c on g2; both leave g0.out at 1.
    body = "\n".join(
        [node("a", "%x", "g0", 0), node("b", "%a", "g1", 0), node("c", "%a", "g2", 0), "    return %b, %c"]
    )
    m = module(tmp_path, SLOW_MESH3, body)
    # port (Moirai eq. 8: a communication op of 1.5 ms at a time per port): 1..2.5, then 2.5..4.
    assert transfers(simulate(m, "port")) == [(1.0, 2.5), (2.5, 4.0)]
    # topology: g0.out is held 1 ms per tensor: 1..2 (lands 2.5), 2..3 (lands 3.5). Consumers end
    # at 3.5 and 4.5.
    topology = simulate(m, "topology")
    assert transfers(topology) == [(1.0, 2.5), (2.0, 3.5)]
    assert topology.makespan == pytest.approx(4.5 * MS)


def test_topology_charges_a_transfers_cpu_to_both_workers(tmp_path):
    # g0: a (0..1) -> c on g1, then b (independent). g1: d (3 ms, independent) then c (reads a).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g0", 1),
            node("d", "%x", "g1", 0, "3ms"),
            node("c", "%a", "g1", 1),
            "    return %b, %c, %d",
        ]
    )
    m = module(tmp_path, CPU_CHARGED, body)
    links = LinkModel.from_cluster(m.cluster, "topology")
    assert links.transfer_time(1e6, 0, 1) == pytest.approx(1.2 * MS)  # 0.2 + max(1, 0.5, 0.5): pipelined
    assert LinkModel.from_cluster(m.cluster, "pair").transfer_cpu is None
    # topology: requested at 1; g0's compute is free: the sender serialises 1..1.5 while the bytes
    # hold the route 1..2; delivered at 1 + max(1, 0.5) + 0.2 = 2.2. g1's core runs d until 3, so
    # the receiver unpacks at max(1 + 0.2, 3) = 3 until 3.5 (the tensor waits for the long kernel);
    # arrival max(2.2, 3.5) = 3.5. b, offered g0 at 1, waits for the serialisation: 1.5..2.5.
    # c 3.5..4.5. Makespan 4.5.
    result = simulate(m, "topology")
    charged = times(result, m)
    assert transfers(result) == [(1.0, 3.5)]
    assert charged["b"] == (1.5, 2.5) and charged["c"] == (3.5, 4.5)
    assert result.makespan == pytest.approx(4.5 * MS)
    # pair ignores the CPU charge (Pesto's model as published): 1..2.2, b 1..2, c after d: 3..4.
    pair = simulate(m, "pair")
    assert transfers(pair) == [(1.0, 2.2)]
    assert times(pair, m)["b"] == (1.0, 2.0) and times(pair, m)["c"] == (3.0, 4.0)


# ---- topology with TensorFlow's copy streams (Topology.copy_streams): a transfer queues on the
# stream TensorFlow issues it on (host -> GPU: the receiver's h2d; GPU -> host: the sender's d2h;
# GPU -> GPU: the sender's d2d), not on device ports. One direct 1 GB/s wire per pair, latency 0:
# a 1 MB tensor holds its wire 1 ms.

STREAMS = """
[topology]
relay = false
copy_streams = true
[[device]]
name = "h"
kind = "cpu"
tf_device = "/device:CPU:0"
[[device]]
name = "g0"
[[device]]
name = "g1"
[[device]]
name = "g2"
""" + "".join(
    f'[[wire]]\na = "{a}"\nb = "{b}"\nlatency = 0.0\nbandwidth = 1e9\n'
    for a, b in [("h", "g0"), ("h", "g1"), ("h", "g2"), ("g0", "g1"), ("g0", "g2"), ("g1", "g2")]
)
PORTS = STREAMS.replace("copy_streams = true", "copy_streams = false")


def test_copy_streams_name_the_stream_tensorflow_issues_the_copy_on(tmp_path):
    m = module(tmp_path, STREAMS, "\n".join([node("a", "%x", "g0", 0), "    return %a"]))
    links = LinkModel.from_cluster(m.cluster, "topology")

    def route(a: int, b: int) -> list[str]:
        return [links.resource_names[r] for r in links.routes[a][b]]

    assert route(0, 1) == ["g0.h2d", "h->g0"]  # host -> GPU: the receiving GPU's h2d stream
    assert route(1, 0) == ["g0.d2h", "g0->h"]  # GPU -> host: the sending GPU's d2h stream
    assert route(1, 2) == ["g0.d2d", "g0->g1"]  # GPU -> GPU: the sending GPU's d2d stream
    # The other rules and a topology without copy streams keep their resources.
    port = LinkModel.from_cluster(m.cluster, "port")
    assert [port.resource_names[r] for r in port.routes[1][2]] == ["g0.out", "g1.in"]
    ports = module(tmp_path, PORTS, "\n".join([node("a", "%x", "g0", 0), "    return %a"]))
    plain = LinkModel.from_cluster(ports.cluster, "topology")
    assert [plain.resource_names[r] for r in plain.routes[1][2]] == ["g0.out", "g0->g1", "g1.in"]


def test_copy_streams_let_a_gpu_receive_from_two_peers_at_once(tmp_path):
    # a on g0 and b on g1 (0..1) both feed c on g2 over the wires g0->g2 and g1->g2.
    body = "\n".join([node("a", "%x", "g0", 0), node("b", "%x", "g1", 0), node("c", "%a, %b", "g2", 0)])
    body += "\n    return %c"
    # Device ports: g2.in takes one at a time: 1..2 then 2..3; c 3..4, makespan 4.
    ports = simulate(module(tmp_path, PORTS, body), "topology")
    assert transfers(ports) == [(1.0, 2.0), (2.0, 3.0)]
    assert ports.makespan == pytest.approx(4 * MS)
    # Copy streams: g0.d2d + g0->g2 and g1.d2d + g1->g2 share nothing: both 1..2; c 2..3, makespan 3.
    streams = simulate(module(tmp_path, STREAMS, body), "topology")
    assert transfers(streams) == [(1.0, 2.0), (1.0, 2.0)]
    assert streams.makespan == pytest.approx(3 * MS)


def test_copy_streams_give_the_host_no_port_and_each_gpu_one_h2d_stream(tmp_path):
    # a on the host (0..1) feeds b on g0 and c on g1; d on the host (1..2) feeds e on g0.
    body = "\n".join(
        [
            node("a", "%x", "h", 0),
            node("d", "%x", "h", 1),
            node("b", "%a", "g0", 0),
            node("c", "%a", "g1", 0),
            node("e", "%d", "g0", 1),
            "    return %b, %c, %e",
        ]
    )
    # Device ports: a's two copies share h.out: 1..2 and 2..3; d's copy (requested at 2) waits for
    # h.out until 3: 3..4. b 2..3, c 3..4, e 4..5: makespan 5.
    ports = simulate(module(tmp_path, PORTS, body), "topology")
    assert transfers(ports) == [(1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert ports.makespan == pytest.approx(5 * MS)
    # Copy streams: h->g0 (g0.h2d) and h->g1 (g1.h2d) share nothing: both 1..2. d's copy to g0,
    # requested at 2, finds g0.h2d and h->g0 free: 2..3. b 2..3, c 2..3, e 3..4: makespan 4.
    streams = simulate(module(tmp_path, STREAMS, body), "topology")
    assert transfers(streams) == [(1.0, 2.0), (1.0, 2.0), (2.0, 3.0)]
    assert streams.makespan == pytest.approx(4 * MS)
    # A host copy and a peer copy into g0 at once (a on h, f on g1, both 0..1, feed b on g0): the
    # host's goes on g0.h2d + h->g0, the peer's on g1.d2d + g1->g0: both 1..2, b 2..3. Under device
    # ports g0.in serialises them: 1..2 and 2..3, b 3..4.
    body2 = "\n".join(
        [
            node("a", "%x", "h", 0),
            node("f", "%x", "g1", 0),
            node("b", "%a, %f", "g0", 0),
            "    return %b",
        ]
    )
    mixed = simulate(module(tmp_path, STREAMS, body2), "topology")
    assert transfers(mixed) == [(1.0, 2.0), (1.0, 2.0)]
    assert mixed.makespan == pytest.approx(3 * MS)
    assert transfers(simulate(module(tmp_path, PORTS, body2), "topology")) == [(1.0, 2.0), (2.0, 3.0)]


def test_copy_streams_must_be_a_boolean(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(STREAMS.replace("copy_streams = true", 'copy_streams = "yes"'))
    with pytest.raises(ClusterError, match="copy_streams"):
        load_cluster_toml(path)
