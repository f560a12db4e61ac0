"""``python -m graphir.tools.replicate.fastt --quick``: the FastT replication table on VGG-19, 2 GPUs.

The quick run uses the zoo's ``vgg19_train`` at a global batch of twice its own, so each replica is the
zoo graph itself (nothing is re-traced); the test checks the written table against the same pipeline
run through the passes here. The entry is built first when missing (a clean clone).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from graphir.cluster_presets import fastt_gpus
from graphir.pass_infra import PassContext, load_builtin_passes
from graphir.passes.place import Place
from graphir.passes.profile import Profile
from graphir.passes.transform.data_parallel import DataParallel
from graphir.simulator import simulate
from graphir.tools import zoo
from graphir.tools.replicate import fastt


@pytest.fixture(scope="module", autouse=True)
def vgg19_train_built() -> None:
    """Build the zoo entry on a clean clone (TensorFlow, about half a minute); a no-op once built."""
    zoo.build_entry("vgg19_train", quiet=True)


def _row(text: str, label: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_quick_run_writes_the_table(tmp_path: Path) -> None:
    assert fastt.main(["--quick", "--quiet", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert text.startswith("# FastT replication")
    for heading in ("Table 1 DP columns", "Table 1 analogue", "Table 6 analogue", "Where and why these numbers differ"):
        assert heading in text
    table1 = _row(text, "VGG-19 (256)")
    # model, 1 GPU (not measured in --quick), DP, DPOS, OS-DPOS, FastT speed-up
    assert table1[1] == "-"
    rates = [float(re.match(r"[0-9.]+", cell).group()) for cell in table1[2:5]]  # type: ignore[union-attr]
    assert all(rate > 0 for rate in rates)
    best = max(rates[0], rates[2])
    assert table1[5] == f"{(best / rates[0] - 1) * 100:+.1f}%"
    # the DP cell is the global batch over the simulated step of the data-parallel pipeline
    load_builtin_passes()
    module = zoo.load_entry("vgg19_train")
    module.set_cluster(fastt_gpus(2))  # the fastt preset's GPUs 0-1 and its host
    ctx = PassContext()
    stats = DataParallel(replicas=2, batch=256).run(module, ctx).stats
    assert stats["replica-batch"] == 128 and stats["aggregated-values"] == 39  # 38 variables + the loss
    Profile().run(module, ctx)
    Place.of("data-parallel", variables="cpu", sums="first-replica").run(module, ctx)  # TF-slim's deployment
    assert f"{256 / simulate(module, congestion='topology', order='dynamic').makespan:.1f}" == f"{rates[0]:.1f}"
    detail = _row(text, "VGG-19 | 2")
    assert detail[2] == f"{stats['nodes']} ({stats['replicated-nodes']} / {stats['shared-nodes']})"


def test_bad_out_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    assert fastt.main(["--quick", "--out", str(target)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error:" in err[0] and "not a directory" in err[0]
    assert fastt.main(["--bogus"]) == 1


def test_strategies_option_runs_only_the_named_placements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert fastt.parse_strategies("dp-gpu") == ("data-parallel", "dp-gpu")  # DP always runs
    assert fastt.main(["--quick", "--quiet", "--out", str(tmp_path), "--strategies=dp-gpu"]) == 0
    text = (tmp_path / "replicate_fastt.md").read_text()
    assert "--strategies=data-parallel,dp-gpu" in text.splitlines()[2]
    table1 = _row(text, "VGG-19 (256)")
    assert re.fullmatch(r"[0-9.]+", table1[2]) and table1[3:6] == ["not run", "not run", "-"]
    detail = _row(text, "VGG-19 | 2")
    assert re.fullmatch(r"[0-9.]+", detail[6]) and detail[7:9] == ["-", "-"]  # DP-GPU ran, DPOS did not
    assert "Not run: this run's `--strategies` left out DPOS or OS-DPOS." in text
    assert fastt.main(["--quick", "--strategies=dp,nope"]) == 1
    assert "unknown strategy 'dp'" in capsys.readouterr().err
