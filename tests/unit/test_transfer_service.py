"""How a runtime serves transfers (:class:`graphir.cluster_model.TransferService`, issue 14's rig).

Golden tests worked by hand (times in ms; helpers and clusters of ``test_congestion``: every tensor
is 1e6 B, 1 ms of bytes / bandwidth at 1 GB/s).
"""

from __future__ import annotations

import pytest
from helpers import CPU_CHARGED, MS, SLOW_MESH2, module, node, times, transfers

from graphir.cluster import ClusterError, TransferService, load_cluster_toml
from graphir.cluster_toml import service_toml
from graphir.links import LinkModel
from graphir.simulator import simulate

WHEN_IDLE = "[runtime]\nserve_when_idle = true\n" + SLOW_MESH2  # latency 0.5 ms
PREEMPTS = "[runtime]\nrecv_cpu_preempts = true\n" + CPU_CHARGED  # latency 0.2, sender/receiver CPU 0.5 ms


def _chain_after_send(tmp_path, cluster):
    # g0: a (1 ms) feeds b (2 ms, g0) and c (1 ms, g1).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%a", "g0", 1, "2ms"),
            node("c", "%a", "g1", 0),
            "    return %b, %c",
        ]
    )
    return module(tmp_path, cluster, body)


@pytest.mark.parametrize("order", ["enforced", "dynamic"])
def test_a_busy_sender_answers_when_it_runs_out_of_ready_work(tmp_path, order):
    # Without the rule (topology, latency 0.5): a 0..1; its tensor leaves at 1, holds the route
    # 1..2 and lands at 2.5; c 2.5..3.5; b 1..3. Makespan 3.5.
    plain = simulate(_chain_after_send(tmp_path, SLOW_MESH2), "topology", order)
    assert transfers(plain) == [(1.0, 2.5)]
    assert plain.makespan == pytest.approx(3.5 * MS)
    # serve_when_idle: g1 has nothing ready at 0 and asks for a's tensor (the request reaches g0
    # at 0.5); g0 is busy from 0, so the request waits in its queue. At 1, b is ready on g0 (a's
    # local successor runs first); g0 first has nothing ready when b ends at 3: the tensor leaves
    # then, lands at 3 + 1 + 0.5 = 4.5; c 4.5..5.5. Makespan 5.5.
    m = _chain_after_send(tmp_path, WHEN_IDLE)
    served = simulate(m, "topology", order)
    assert transfers(served) == [(3.0, 4.5)]
    assert times(served, m)["b"] == (1.0, 3.0) and times(served, m)["c"] == (4.5, 5.5)
    assert served.makespan == pytest.approx(5.5 * MS)
    # The papers' rules ignore how a runtime serves (their models as published): as without it.
    assert LinkModel.from_cluster(m.cluster, "pair").serve_when_idle is False
    assert simulate(m, "pair", order).makespan == pytest.approx(
        simulate(_chain_after_send(tmp_path, SLOW_MESH2), "pair", order).makespan
    )


# g0 runs a (1), q (1, reads p from g1), s (2, independent); g1 runs p (2), c (1, reads a), r (1,
# reads q): the graph of the two idle-moment goldens below.
IDLE_MOMENTS_BODY = "\n".join(
    [
        node("a", "%x", "g0", 0),
        node("p", "%x", "g1", 0, "2ms"),
        node("q", "%p", "g0", 1),
        node("s", "%x", "g0", 2, "2ms"),
        node("c", "%a", "g1", 1),
        node("r", "%q", "g1", 2),
        "    return %s, %c, %r",
    ]
)


def test_requests_are_made_and_answered_at_idle_moments(tmp_path):
    # g0 runs a (1), q (1, reads p from g1), s (2, independent); g1 runs p (2), c (1, reads a),
    # r (1, reads q). Enforced orders, serve_when_idle, latency 0.5, 1 ms on the route per tensor.
    body = IDLE_MOMENTS_BODY
    m = module(tmp_path, WHEN_IDLE, body)
    # Both workers are busy from 0, so neither has asked for its inputs yet.
    # 1: a ends; q (next on g0) waits for p: g0 is idle and makes its requests (they reach g1 at
    #    1.5); g1 has not asked for a's tensor yet, so it stays on g0.
    # 1.5: g0's requests reach g1, busy with p until 2: answered at g1's next idle moment.
    # 2: p ends; c (next on g1) waits for a's tensor: g1 is idle, answers g0 (p's tensor 2..3,
    #    lands 3.5; q is booked 3.5..4.5) and makes its requests (they reach g0 at 2.5).
    # 2.5: g1's requests reach g0, idle until q at 3.5: a's tensor 2.5..3.5, lands 4; c 4..5.
    # 4.5: q ends and g0, which has answered g1, sends q's tensor at once (4.5..5.5, lands 6)
    #    although s runs 4.5..6.5 (a sender that only sends at idle moments would send it at 6.5).
    # r 6..7. Makespan 7. (Without the rule: a's tensor 1..2.5, c 2.5..3.5, the rest as here.)
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(2.0, 3.5), (2.5, 4.0), (4.5, 6.0)]
    got = times(result, m)
    assert got["c"] == (4.0, 5.0) and got["q"] == (3.5, 4.5) and got["s"] == (4.5, 6.5) and got["r"] == (6.0, 7.0)
    assert result.makespan == pytest.approx(7 * MS)
    plain = simulate(module(tmp_path, SLOW_MESH2, body), "topology", "enforced")
    assert transfers(plain) == [(1.0, 2.5), (2.0, 3.5), (4.5, 6.0)]
    assert times(plain, m)["c"] == (2.5, 3.5)


def test_enforced_sends_wait_for_the_next_idle_moment(tmp_path):
    # The graph of the test above with send_when_idle too: under the enforced order a tensor
    # leaves its device at the device's next idle moment (TF runs the next node of the order
    # inline and queues the _Send behind it).
    # 1 .. 4.5 as above: a's tensor waits for g1's request, which reaches g0 at 2.5 while g0 is
    #    idle (q waits for p's tensor until 3.5): sent 2.5..3.5, lands 4; c 4..5. p's tensor
    #    leaves g1 at 2, when g1 is idle: 2..3, lands 3.5; q 3.5..4.5.
    # 4.5: q ends; s, next on g0, can start at once, so q's tensor for r waits; s 4.5..6.5.
    # 6.5: g0 has nothing left (idle): q's tensor 6.5..7.5, lands 8; r 8..9. Makespan 9.
    body = IDLE_MOMENTS_BODY
    cluster = "[runtime]\nserve_when_idle = true\nsend_when_idle = true\n" + SLOW_MESH2
    m = module(tmp_path, cluster, body)
    assert LinkModel.from_cluster(m.cluster, "topology").send_when_idle
    assert not LinkModel.from_cluster(m.cluster, "pair").send_when_idle
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(2.0, 3.5), (2.5, 4.0), (6.5, 8.0)]
    got = times(result, m)
    assert got["c"] == (4.0, 5.0) and got["q"] == (3.5, 4.5) and got["s"] == (4.5, 6.5) and got["r"] == (8.0, 9.0)
    assert result.makespan == pytest.approx(9 * MS)
    # Under dynamic the rule is off: q's tensor leaves when made, as with serve_when_idle alone.
    dynamic = simulate(m, "topology", "dynamic")
    alone = simulate(module(tmp_path, WHEN_IDLE, body), "topology", "dynamic")
    assert transfers(dynamic) == transfers(alone) and dynamic.makespan == pytest.approx(alone.makespan)


def test_enforced_send_when_idle_alone_sends_at_every_idle_moment(tmp_path):
    # send_when_idle without serve_when_idle (requests count as made at the start): the graph of
    # _chain_after_send, enforced. a 0..1 on g0; b, next on g0, starts at once (1..3), so a's
    # tensor for c waits for g0's next idle moment, 3 (nothing left): route 3..4, lands 4.5 (latency
    # 0.5); c 4.5..5.5. Without the rule: 1..2.5 and c 2.5..3.5.
    cluster = "[runtime]\nsend_when_idle = true\n" + SLOW_MESH2
    m = _chain_after_send(tmp_path, cluster)
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(3.0, 4.5)]
    assert times(result, m)["c"] == (4.5, 5.5) and result.makespan == pytest.approx(5.5 * MS)


def test_tensors_waiting_for_an_idle_moment_leave_newest_first(tmp_path):
    # send_when_idle alone, latency 0.5, 1 ms on the route per tensor. g0 runs a (0..1), b (1..2),
    # s (2..4); g1 runs d (reads b) then c (reads a). a's and b's tensors wait while g0 keeps
    # running; at 4 g0 has nothing left: the queued sends run newest first (TF's pool takes its own
    # queue's front): b's 4..5, lands 5.5; a's 5..6, lands 6.5. d 5.5..6.5, c 6.5..7.5.
    # (Oldest first would give a's 4..5.5, b's 5..6.5, d 6.5..7.5, c 7.5..8.5.)
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("b", "%x", "g0", 1),
            node("s", "%x", "g0", 2, "2ms"),
            node("d", "%b", "g1", 0),
            node("c", "%a", "g1", 1),
            "    return %s, %d, %c",
        ]
    )
    m = module(tmp_path, "[runtime]\nsend_when_idle = true\n" + SLOW_MESH2, body)
    result = simulate(m, "topology", "enforced")
    index = m.graph.index()
    left = {
        index.nodes[int(index.value_producer[x])].name: (begin / MS, end / MS)
        for x, *_, begin, end in result.transfer_log
    }
    assert left["b"] == pytest.approx((4.0, 5.5)) and left["a"] == pytest.approx((5.0, 6.5))
    got = times(result, m)
    assert got["d"] == (5.5, 6.5) and got["c"] == (6.5, 7.5)
    assert result.makespan == pytest.approx(7.5 * MS)


def _receive_during_kernels(tmp_path, cluster):
    # g0: a (1 ms) -> c on g1. g1: h (1 ms), then e (reads h, 1 ms), then c (reads a).
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("h", "%x", "g1", 0),
            node("e", "%h", "g1", 1),
            node("c", "%a", "g1", 2),
            "    return %e, %c",
        ]
    )
    return module(tmp_path, cluster, body)


def test_receive_cpu_queued_holds_the_core_from_its_booking(tmp_path):
    # CPU_CHARGED (queued, the rule before): a ends at 1 and its transfer is queued then (before
    # h's finish at 1: a was started first): the sender's core 1..1.5; the bytes are delivered at
    # 1 + max(1, 0.5) + 0.2 = 2.2; the receiver's core is booked 1.2..1.7. h ends at 1; e is ready
    # but g1's core is booked until 1.7: e 1.7..2.7 (the idle 1..1.2 cannot be used); c 2.7..3.7.
    m = _receive_during_kernels(tmp_path, CPU_CHARGED)
    result = simulate(m, "topology", "enforced")
    assert transfers(result) == [(1.0, 2.2)]
    assert times(result, m)["e"] == (1.7, 2.7) and times(result, m)["c"] == (2.7, 3.7)
    assert result.makespan == pytest.approx(3.7 * MS)


@pytest.mark.parametrize("order", ["enforced", "dynamic"])
def test_receive_cpu_preempts_the_running_kernel(tmp_path, order):
    # recv_cpu_preempts: the transfer is as above (sender 1..1.5, delivered 2.2; received from
    # 1 + 0.2 = 1.2 for 0.5 ms: unpacked 1.7; arrival max(2.2, 1.7) = 2.2), but g1's core is not
    # booked: e starts at 1, and the receive at 1.2 runs during e, which takes 0.5 ms longer:
    # e 1..2.5. c (arrived 2.2) 2.5..3.5. Makespan 3.5.
    m = _receive_during_kernels(tmp_path, PREEMPTS)
    links = LinkModel.from_cluster(m.cluster, "topology")
    assert links.recv_cpu_preempts and not links.serve_when_idle
    assert links.transfer_time(1e6, 0, 1) == pytest.approx(1.2 * MS)  # alone: unchanged
    result = simulate(m, "topology", order)
    assert transfers(result) == [(1.0, 2.2)]
    assert times(result, m)["e"] == (1.0, 2.5) and times(result, m)["c"] == (2.5, 3.5)
    assert result.makespan == pytest.approx(3.5 * MS)


def test_receive_in_an_idle_gap_is_free_and_overlap_stretches_the_next_kernel(tmp_path):
    # g0: a (1) -> c on g1 (reads a, 1). g1: h (0.5), then k (reads h, 1) - order h, c, k would
    # block; here g1 runs h, then c, then k (independent of a).
    # Transfer of a: 1..2 on the route, delivered 2.2, received 1.2..1.7 on g1: h ended at 0.5,
    # c waits for the tensor (idle until 2.2), so the receive costs nothing. c 2.2..3.2, k 3.2..4.2.
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("h", "%x", "g1", 0, "0.5ms"),
            node("c", "%a", "g1", 1),
            node("k", "%h", "g1", 2),
            "    return %c, %k",
        ]
    )
    m = module(tmp_path, PREEMPTS, body)
    result = simulate(m, "topology", "enforced")
    assert times(result, m)["c"] == (2.2, 3.2) and times(result, m)["k"] == (3.2, 4.2)
    # h of 1.5 ms instead: it runs 0..1.5 and the receive from 1.2 overlaps it: h ends at 2.
    m = module(tmp_path, PREEMPTS, body.replace("cost = 0.5ms", "cost = 1.5ms"))
    result = simulate(m, "topology", "enforced")
    assert times(result, m)["h"] == (0.0, 2.0) and times(result, m)["c"] == (2.2, 3.2)


def test_a_control_dependency_between_devices_is_an_empty_tensors_transfer(tmp_path):
    # g0: a (1 ms). g1: c then d (1 ms each, inputs %x), both after a by a control edge.
    body = "\n".join(
        [
            node("a", "%x", "g0", 0),
            node("c", "%x", "g1", 0).replace("(%x) :", "(%x) ctrl(@a) :"),
            node("d", "%x", "g1", 1).replace("(%x) :", "(%x) ctrl(@a) :"),
            "    return %c, %d",
        ]
    )
    # CPU_CHARGED (latency 0.2 = the [overheads] transfer): a signal, the latency only: c 1.2..2.2,
    # d 2.2..3.2.
    plain = module(tmp_path, CPU_CHARGED, body)
    assert times(simulate(plain, "topology"), plain)["c"] == (1.2, 2.2)
    # control_sends: one empty tensor for (a, g1), booked at 1 like a transfer of 0 bytes: the
    # sender's core 1..1.2 (send_cpu), delivered 1 + max(0, 0.2) + 0.2 = 1.4; g1's core unpacks
    # 1.2..1.3 (recv_cpu); arrival 1.4 for both c and d. c 1.4..2.4, d 2.4..3.4. Makespan 3.4.
    m = module(tmp_path, "[runtime]\ncontrol_sends = true\n" + CPU_CHARGED, body)
    assert LinkModel.from_cluster(m.cluster, "topology").control_sends
    assert not LinkModel.from_cluster(m.cluster, "pair").control_sends
    result = simulate(m, "topology")
    assert times(result, m)["c"] == (1.4, 2.4) and times(result, m)["d"] == (2.4, 3.4)
    assert result.makespan == pytest.approx(3.4 * MS)
    assert simulate(m, "pair").makespan == pytest.approx(simulate(plain, "pair").makespan)


def test_runtime_table_round_trips_and_rejects_bad_values(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[runtime]\nserve_when_idle = true\nrecv_cpu_preempts = true\nsend_when_idle = true\n" + SLOW_MESH2)
    cluster = load_cluster_toml(path)
    assert cluster.service == TransferService(True, True, False, True)
    assert service_toml(cluster.service) == [
        "[runtime]",
        "serve_when_idle = true",
        "recv_cpu_preempts = true",
        "control_sends = false",
        "send_when_idle = true",
        "transfer_lanes = false",
    ]
    assert service_toml(TransferService()) == []
    path.write_text(SLOW_MESH2)
    assert load_cluster_toml(path).service == TransferService()
    path.write_text('[runtime]\nserve_when_idle = "yes"\n' + SLOW_MESH2)
    with pytest.raises(ClusterError, match="serve_when_idle' must be true or false"):
        load_cluster_toml(path)
    path.write_text("[runtime]\nserve_when_ready = true\n" + SLOW_MESH2)
    with pytest.raises(ClusterError, match="unknown key 'serve_when_ready'"):
        load_cluster_toml(path)


def test_the_rig_calibration_writes_how_its_workers_serve_transfers(tmp_path):
    # The rig's workers (one compute thread on one pinned core) serve transfers by both rules; the
    # calibrated cluster file says so, and a fit without the rig (another runtime) says nothing.
    import dataclasses

    from helpers import rig_calibration

    from graphir.backends.host import cpu_workers_cluster
    from graphir.backends.tf.rig import WORKER_SERVICE
    from graphir.passes.profile.calibrate_comm import fit_rig

    assert WORKER_SERVICE == TransferService(
        serve_when_idle=True, recv_cpu_preempts=True, control_sends=True, send_when_idle=True, transfer_lanes=True
    )
    fitted = fit_rig(rig_calibration(latency=300e-6, bandwidth=2e9, kernel=1e-6, gap=4e-6, step=600e-6))
    path = tmp_path / "rig.toml"
    path.write_text(fitted.toml(cpu_workers_cluster(2)))
    assert load_cluster_toml(path).service == TransferService()
    path.write_text(dataclasses.replace(fitted, service=WORKER_SERVICE).toml(cpu_workers_cluster(2)))
    assert (
        "[runtime]\nserve_when_idle = true\nrecv_cpu_preempts = true\ncontrol_sends = true\nsend_when_idle = true\n"
        "transfer_lanes = true\n" in path.read_text()
    )
    assert load_cluster_toml(path).service == WORKER_SERVICE


def test_fidelity_resimulate_rejudges_measured_rows_with_another_cluster_file(tmp_path, capsys):
    # One measured row (5 ms) whose saved module is _chain_after_send in enforced order: 3.5 ms on
    # SLOW_MESH2 (-30 %), 5.5 ms with serve_when_idle (+10 %), as derived above.
    from devtools.bench_fidelity import Row, main, read_json, write_json
    from graphir.printer import print_module

    saved = tmp_path / "mods"
    saved.mkdir()
    (saved / "m-fine-enforced.gir").write_text(print_module(_chain_after_send(tmp_path, SLOW_MESH2)))
    out = tmp_path / "fidelity.md"
    write_json([Row("m", "fine", "enforced", 3, 2, 1, 1 << 20, 5 * MS, 1.0, [5 * MS], 1.0)], out.with_suffix(".json"))
    cluster = tmp_path / "idle.toml"
    # With a step overhead of 1 ms in the cluster file the simulated step is the makespan + 1 ms:
    # 3.5 + 1 = 4.5 ms (-10 %).
    stepped = "[overheads]\nstep = 1e-3\n" + SLOW_MESH2
    for text, simulated, error in ((SLOW_MESH2, 3.5, "30.0%"), (WHEN_IDLE, 5.5, "10.0%"), (stepped, 4.5, "10.0%")):
        cluster.write_text(text)
        argv = ["--resimulate", str(saved), "--cluster", str(cluster), "--out", str(out)]
        assert main(argv) == 0
        (row,), command, cluster_text, _ = read_json(out.with_suffix(".json"))
        assert row.simulated_s == pytest.approx(simulated * MS) and row.measured_s == pytest.approx(5 * MS)
        assert "--resimulate" in command and cluster_text == text
        assert f"median |error| {error}" in capsys.readouterr().err
    assert main(["--resimulate", str(tmp_path / "none"), "--cluster", str(cluster), "--out", str(out)]) == 1
    assert "write it with --save-modules" in capsys.readouterr().err
