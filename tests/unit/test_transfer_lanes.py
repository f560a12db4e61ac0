"""Transfer lanes (``[runtime] transfer_lanes``, :class:`graphir.cluster_model.TransferService`; issue 14).

On the rig a transfer is CPU on both ends: each worker's one core sends and receives, the loopback
wire is no resource. Golden tests worked by hand (times in ms). Every tensor is 1e6 B on a 1 GB/s
link (``MESH2``): 1 ms of ``bytes / bandwidth`` (the lone-transfer link), latency 0.2 ms (the
``[overheads] transfer``), sender CPU 0.1 + 0.2 = 0.3 ms, receiver CPU 0.1 + 0.5 = 0.6 ms.
Alone, a transfer takes 0.2 + max(1, 0.3, 0.6) = 1.2 ms with or without lanes.
"""

from __future__ import annotations

import pytest
from helpers import MESH2, MS, module, node, times, transfers

from graphir.cluster import TransferService, load_cluster_toml
from graphir.cluster_toml import service_toml
from graphir.links import LinkModel
from graphir.simulator import simulate

COSTS = (
    "[overheads]\ntransfer = 2e-4\nsend_cpu = 1e-4\nsend_cpu_per_byte = 2e-10\n"
    "recv_cpu = 1e-4\nrecv_cpu_per_byte = 5e-10\n"
)
NO_LANES = "[runtime]\nrecv_cpu_preempts = true\n" + COSTS + MESH2
LANES = "[runtime]\nrecv_cpu_preempts = true\ntransfer_lanes = true\n" + COSTS + MESH2


def _links(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text)
    return LinkModel.from_cluster(load_cluster_toml(path), "topology")


def _book(links, requests):
    """Book ``(src, dst)`` transfers of 1e6 B, all requested at 0, in order; return (begin, arrival) in ms."""
    free = [0.0] * links.num_resources
    return [tuple(round(t / MS, 9) for t in links.book(free, 0.0, 1e6, src, dst)[:2]) for src, dst in requests]


def test_a_lone_transfer_keeps_its_calibrated_time(tmp_path):
    # Lanes: begin 0; the sender's lane (and compute) 0..0.3; the receiver's lane from 0 + 0.2 (the
    # latency) to 0.8; arrival max(0 + 0.2 + max(1, 0.3), 0.8) = 1.2: the lone-transfer time.
    lanes = _links(tmp_path, LANES)
    assert lanes.transfer_time(1e6, 0, 1) == pytest.approx(1.2 * MS)
    assert _book(lanes, [(0, 1)]) == [(0.0, 1.2)]
    assert _book(_links(tmp_path, NO_LANES), [(0, 1)]) == [(0.0, 1.2)]


def test_a_stream_one_way_runs_at_the_slower_ends_cpu(tmp_path):
    # Three tensors g0 -> g1, all requested at 0.
    # Without lanes the route is held 1 ms per tensor: begins 0, 1, 2; arrivals 1.2, 2.2, 3.2.
    assert _book(_links(tmp_path, NO_LANES), [(0, 1)] * 3) == [(0.0, 1.2), (1.0, 2.2), (2.0, 3.2)]
    # Lanes (the route holds nothing):
    #   1st: begin 0, g0's lane 0..0.3, g1's lane 0.2..0.8, arrival max(1.2, 0.8) = 1.2.
    #   2nd: begin 0.3 (g0's lane and compute), g0's lane 0.3..0.6; g1's lane from max(0.5, 0.8) = 0.8
    #        to 1.4; arrival max(0.3 + 0.2 + 1, 1.4) = 1.5.
    #   3rd: begin 0.6, g0's lane 0.6..0.9; g1's lane 1.4..2.0; arrival max(0.6 + 1.2, 2.0) = 2.0.
    # From the second tensor on, one arrives every 0.6 ms: the receiver's CPU per tensor.
    assert _book(_links(tmp_path, LANES), [(0, 1)] * 3) == [(0.0, 1.2), (0.3, 1.5), (0.6, 2.0)]


def test_traffic_both_ways_pays_each_cores_send_and_receive(tmp_path):
    # g0 -> g1, g1 -> g0, g0 -> g1, g1 -> g0, all requested at 0, booked in that order.
    # Without lanes each direction has its own route: 1.2, 1.2, then 2.2, 2.2.
    both = [(0, 1), (1, 0), (0, 1), (1, 0)]
    assert _book(_links(tmp_path, NO_LANES), both) == [(0.0, 1.2), (0.0, 1.2), (1.0, 2.2), (1.0, 2.2)]
    # Lanes (each booking takes its lane's first idle slot that holds it):
    #   1 (g0 -> g1): begin 0; g0's lane 0..0.3; g1's lane 0.2..0.8; arrival 1.2.
    #   2 (g1 -> g0): g1's lane is idle 0..0.2 only (0.3 needed), then receiving until 0.8: begin
    #     0.8, g1's lane (and compute) 0.8..1.1; g0's lane from 0.8 + 0.2 = 1.0 to 1.6; arrival
    #     max(0.8 + 1.2, 1.6) = 2.0.
    #   3 (g0 -> g1): g0's compute is free at 0.3 and its lane idle 0.3..1.0: begin 0.3, lane
    #     0.3..0.6 (before the receive booked at 1.0); g1's lane from 0.5 is busy until 1.1: 1.1..1.7;
    #     arrival max(0.3 + 1.2, 1.7) = 1.7.
    #   4 (g1 -> g0): g1's compute is free at 1.1, its lane busy until 1.7: begin 1.7, 1.7..2.0;
    #     g0's lane is idle from 1.6: 1.9..2.5; arrival max(1.7 + 1.2, 2.5) = 2.9.
    assert _book(_links(tmp_path, LANES), both) == [(0.0, 1.2), (0.8, 2.0), (0.3, 1.7), (1.7, 2.9)]


def test_the_simulator_books_both_ways_on_the_lanes(tmp_path):
    # g0 runs a (1 ms) then q (reads p); g1 runs p (1 ms) then c (reads a): at 1 both workers send.
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("p", "%x", "g1", 0),
            node("q", "%p", "g0", 1),
            node("c", "%a", "g1", 1),
            "    return %q, %c",
        ]
    )
    # Without lanes: both tensors leave at 1 on their own routes and arrive at 2.2; their receives
    # (1.2..1.8 on each core) fall in idle gaps. q and c 2.2..3.2. Makespan 3.2.
    plain = module(tmp_path, NO_LANES, body)
    result = simulate(plain, "topology", "enforced")
    assert transfers(result) == [(1.0, 2.2), (1.0, 2.2)]
    assert result.makespan == pytest.approx(3.2 * MS)
    # Lanes: a's tensor (a ends first: it was launched first) begins at 1, g0's lane 1..1.3, g1's
    # lane 1.2..1.8, arrival 2.2. p's tensor waits for g1's lane: begin 1.8, g1's lane and compute
    # 1.8..2.1; g0's lane from max(2.0, 1.3) = 2.0 to 2.6; arrival max(1.8 + 1.2, 2.6) = 3.0.
    # c: arrived 2.2, g1's compute free at 2.1: 2.2..3.2 (the receive 1.2..1.8 was in an idle gap).
    # q: arrived 3.0 (its receive 2.0..2.6 in g0's idle gap): 3.0..4.0. Makespan 4.0.
    m = module(tmp_path, LANES, body)
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(1.0, 2.2), (1.8, 3.0)]
    assert times(result, m)["c"] == (2.2, 3.2) and times(result, m)["q"] == (3.0, 4.0)
    assert result.makespan == pytest.approx(4.0 * MS)
    # The papers' rules ignore the runtime's lanes: as without them.
    assert LinkModel.from_cluster(m.cluster, "pair").lanes is None
    assert simulate(m, "pair").makespan == pytest.approx(simulate(plain, "pair").makespan)


def test_a_receive_waiting_for_the_lane_stretches_the_kernel_running_then(tmp_path):
    # g0 runs a (1 ms) then b (1 ms); g1 runs h (4 ms), then c (reads a), then d (reads b).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g0", 1, "0.1ms"),
            node("h", "%x", "g1", 0, "4ms"),
            node("c", "%a", "g1", 1),
            node("d", "%b", "g1", 2),
            "    return %c, %d, %h",
        ]
    )
    # Lanes: a ends at 1: its tensor begins 1 (g0's lane and compute 1..1.3), g1's lane 1.2..1.8,
    # arrival 2.2. b (offered at 1) waits for g0's compute: 1.3..1.4; its tensor begins 1.4 (g0's
    # lane 1.4..1.7), g1's lane from max(1.6, 1.8) = 1.8 to 2.4 (the lane, not the latency, sets
    # when this receive runs), arrival max(1.4 + 1.2, 2.4) = 2.6. Both receives (1.2 and 1.8, 0.6
    # each) run during h (0..4), which ends 1.2 later: 5.2. c 5.2..6.2, d 6.2..7.2.
    m = module(tmp_path, LANES, body)
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(1.0, 2.2), (1.4, 2.6)]
    assert times(result, m)["b"] == (1.3, 1.4)
    assert times(result, m)["h"] == (0.0, 5.2) and times(result, m)["d"] == (6.2, 7.2)


def test_runtime_key_round_trips(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(LANES)
    cluster = load_cluster_toml(path)
    assert cluster.service == TransferService(recv_cpu_preempts=True, transfer_lanes=True)
    assert service_toml(cluster.service)[-1] == "transfer_lanes = true"
    path.write_text(NO_LANES)
    assert load_cluster_toml(path).service.transfer_lanes is False
    # Without a transfer CPU there is nothing on the lanes: the rule is off.
    path.write_text("[runtime]\ntransfer_lanes = true\n" + MESH2)
    assert LinkModel.from_cluster(load_cluster_toml(path), "topology").lanes is None


def test_the_calibration_writes_its_stream_check_with_the_lanes_prediction(tmp_path):
    # The fit of test_a_stream_one_way... and test_traffic_both_ways... (intercept 0.2 ms, 1 GB/s,
    # the same transfer CPU): three tensors one way arrive by 2.0 ms with lanes (3.2 without), two
    # each way alternately by 2.9 ms (2.2 without). Three runs' stream checks are merged by median.
    import dataclasses

    from helpers import rig_calibration

    from graphir.backends.host import cpu_workers_cluster
    from graphir.backends.tf.rig import WORKER_SERVICE
    from graphir.cluster import TransferCpu
    from graphir.passes.profile.calibrate_comm import LinkFit, RigFit, fit_rig

    measured = rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=4e-6, step=600e-6)
    measured.streams = [("both", 1_000_000, 2, t) for t in (3e-3, 4e-3, 3.5e-3)]
    assert fit_rig(measured).streams == (("both", 1_000_000, 2, 3.5e-3),)
    assert WORKER_SERVICE.transfer_lanes
    links = (LinkFit("worker0", "worker1", 2e-4, 1e9, 1.0, ()), LinkFit("worker1", "worker0", 2e-4, 1e9, 1.0, ()))
    fit = RigFit(
        links,
        2e-4,
        {},
        {},
        {},
        {},
        TransferCpu(1e-4, 2e-10, 1e-4, 5e-10),
        TransferService(recv_cpu_preempts=True, transfer_lanes=True),
        (("worker0->worker1", 1_000_000, 3, 2.1e-3), ("both", 1_000_000, 2, 3.5e-3)),
    )
    cluster = cpu_workers_cluster(2)
    predicted = [(way, round(p / MS, 9)) for way, _, _, _, p in fit.stream_predictions(cluster)]
    assert predicted == [("worker0->worker1", 2.0), ("both", 2.9)]
    plain = dataclasses.replace(fit, service=TransferService(recv_cpu_preempts=True))
    assert [round(p / MS, 9) for *_, p in plain.stream_predictions(cluster)] == [3.2, 2.2]
    text = fit.toml(cluster)
    assert "#   worker0->worker1 976 KiB x 3: 2.10 / 2.00 ms\n#   both 976 KiB x 2: 3.50 / 2.90 ms\n" in text
    path = tmp_path / "rig.toml"
    path.write_text(text)
    assert load_cluster_toml(path).service.transfer_lanes
