"""Small cases shared by the hand-worked golden tests: cluster files and modules built from text.

Not a test module: the golden tests import what they need from here (``from gir_cases import ...``),
so that a cluster of ``n`` identical links or the fork of the congestion goldens is written once.
"""

from __future__ import annotations

from pathlib import Path

from graphir.ir import Module
from graphir.parser import parse_module


def mesh_cluster(
    devices: int, *, bandwidth: float = 1e9, latency: float = 0.0, memory: int | None = None, prefix: str = "g"
) -> str:
    """A cluster file: devices ``{prefix}0`` .. ``{prefix}{devices-1}`` (of ``memory`` bytes when given),
    every ordered pair joined by one default link."""
    head = f"[default_link]\nlatency = {latency}\nbandwidth = {bandwidth:g}\n"
    size = "" if memory is None else f"memory = {memory}\n"
    return head + "".join(f'[[device]]\nname = "{prefix}{k}"\n{size}' for k in range(devices))


def write_cluster(tmp_path: Path, name: str, devices: int, *, memory: int, latency: float, bandwidth: float) -> str:
    """:func:`mesh_cluster` of devices ``d0``.. of ``memory`` bytes, written to ``tmp_path / name``; its path."""
    path = tmp_path / name
    path.write_text(mesh_cluster(devices, bandwidth=bandwidth, latency=latency, memory=memory, prefix="d"))
    return str(path)


def module_on_cluster(tmp_path: Path, cluster_toml: str, body: str, inputs: str) -> Module:
    """Module ``@m`` whose graph ``@g(inputs)`` holds ``body``, on ``cluster_toml`` written to ``tmp_path``."""
    path = tmp_path / "cluster.toml"
    path.write_text(cluster_toml)
    return parse_module(f'module @m {{cluster = "{path}"}} {{\n  graph @g({inputs}) {{\n{body}\n  }}\n}}\n')


# A fork: a (1 s) produces 1,000,000 B read by b, c and e (3 s each); on links of 1 MB/s a copy
# takes 1 s. The goldens of test_place_ilp_rules.py and test_place_plan_congestion.py work on it.
FORK_BODY = """\
    %a = t.N(%in) : (f32[1]) -> f32[250000] [cost = 1s]
    %b = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    %c = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    %e = t.N(%a) : (f32[250000]) -> f32[1] [cost = 3s]
    return %b, %c, %e"""


def fork(tmp_path: Path, *, latency: float = 0.0) -> Module:
    """:data:`FORK_BODY` on three devices joined by links of 1 MB/s and ``latency`` seconds."""
    return module_on_cluster(tmp_path, mesh_cluster(3, bandwidth=1e6, latency=latency), FORK_BODY, "%in : f32[1]")
