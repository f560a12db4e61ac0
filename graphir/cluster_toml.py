"""Reading and writing cluster TOML files (the format is documented in :mod:`graphir.cluster`)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from graphir.cluster_model import (
    DEVICE_KINDS,
    GPU_LAUNCH_OVERHEAD,
    PCIE,
    SWITCH_KINDS,
    Cluster,
    ClusterError,
    Device,
    GiB,
    Link,
    Switch,
    TransferCpu,
    TransferService,
    Wire,
    build_topology,
    check_kinds,
    widest_routes,
)

TRANSFER_CPU_KEYS = ("send_cpu", "send_cpu_per_byte", "recv_cpu", "recv_cpu_per_byte")
"""The ``[overheads]`` keys of :class:`graphir.cluster_model.TransferCpu`, in its field order."""
SERVICE_KEYS = ("serve_when_idle", "recv_cpu_preempts", "control_sends", "send_when_idle", "transfer_lanes")
"""The ``[runtime]`` keys of :class:`graphir.cluster_model.TransferService`, in its field order."""


def service_toml(service: TransferService) -> list[str]:
    """The ``[runtime]`` table of ``service`` as cluster-file lines (none when every rule is off)."""
    values = attrs.astuple(service)
    if not any(values):
        return []
    return ["[runtime]", *(f"{key} = {str(value).lower()}" for key, value in zip(SERVICE_KEYS, values, strict=True))]


def _service(data: dict[str, Any], path: Path) -> TransferService:
    raw = data.get("runtime", {})
    if not isinstance(raw, dict):
        raise ClusterError(f"{path}: 'runtime' must be a table")
    unknown = sorted(set(raw) - set(SERVICE_KEYS))
    if unknown:
        raise ClusterError(f"{path}: runtime: unknown key '{unknown[0]}' (expected {', '.join(SERVICE_KEYS)})")
    for key, value in raw.items():
        if not isinstance(value, bool):
            raise ClusterError(f"{path}: runtime: '{key}' must be true or false, got {value!r}")
    return TransferService(*(raw.get(key, False) for key in SERVICE_KEYS))


def device_toml(device: Device, memory: int | None = None) -> list[str]:
    """The ``[[device]]`` table of ``device`` as cluster-file lines (``memory`` overrides its bytes)."""
    extra = [f"op_overhead = {device.op_overhead!r}"] if device.op_overhead else []
    extra += [f"kernel_dispatch = {device.kernel_dispatch!r}"] if device.kernel_dispatch else []
    return [
        "[[device]]",
        f'name = "{device.name}"',
        f'tf_device = "{device.tf_device}"',
        f'kind = "{device.kind}"',
        f"memory = {device.memory if memory is None else memory}",
        f"peak_flops = {device.peak_flops!r}",
        f"mem_bandwidth = {device.mem_bandwidth!r}",
        f"launch_overhead = {device.launch_overhead!r}",
        *extra,
    ]


def link_toml(src: str, dst: str, latency: float, bandwidth: float, comment: str = "") -> list[str]:
    """A one-way ``[[link]]`` table as cluster-file lines (``comment`` follows the header after ``#``)."""
    return [
        "[[link]]" + (f"  # {comment}" if comment else ""),
        f'src = "{src}"',
        f'dst = "{dst}"',
        f"latency = {latency!r}",
        f"bandwidth = {bandwidth!r}",
        "bidirectional = false",
    ]


def _parse_bytes(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ClusterError(f"{where}: memory must be >= 0, got {value}")
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)\s*", value)
        if match:
            scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[match.group(2)]
            return int(float(match.group(1)) * scale)
    raise ClusterError(f'{where}: memory must be bytes or a size such as "16GiB", got {value!r}')


def _number(raw: dict[str, Any], key: str, default: float | None, where: str, *, positive: bool) -> float:
    value = raw.get(key, default)
    if value is None:
        raise ClusterError(f"{where}: missing key '{key}'")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ClusterError(f"{where}: '{key}' must be a number, got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0 or (positive and value == 0):
        raise ClusterError(f"{where}: '{key}' must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    return value


def _table_list(data: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    raw = data.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(item, dict) for item in raw):
        raise ClusterError(f"{path}: '{key}' must be an array of tables ([[{key}]])")
    return raw


def _load_device(raw: dict[str, Any], k: int, where: str) -> Device:
    if "name" not in raw:
        raise ClusterError(f"{where}: missing key 'name'")
    kind = str(raw.get("kind", "V100"))
    entry = DEVICE_KINDS.get(kind)
    tf_type = entry.tf_type if entry is not None else "GPU"
    return Device(
        name=str(raw["name"]),
        tf_device=str(raw.get("tf_device", f"/device:{tf_type}:{k}")),
        kind=kind,
        memory=_parse_bytes(raw.get("memory", entry.memory if entry else 16 * GiB), where),
        peak_flops=_number(raw, "peak_flops", entry.peak_flops if entry else None, where, positive=True),
        mem_bandwidth=_number(raw, "mem_bandwidth", entry.mem_bandwidth if entry else None, where, positive=True),
        launch_overhead=_number(
            raw, "launch_overhead", entry.launch_overhead if entry else GPU_LAUNCH_OVERHEAD, where, positive=False
        ),
        op_overhead=_number(raw, "op_overhead", 0.0, where, positive=False),
        kernel_dispatch=_number(raw, "kernel_dispatch", entry.kernel_dispatch if entry else 0.0, where, positive=False),
    )


def load_cluster_toml(path: Path) -> Cluster:
    """Read a cluster TOML file (see the module docstring for the format).

    Raises:
        ClusterError: unreadable file, bad syntax, unknown keys' values, unknown devices in links,
            kinds with inconsistent speeds, or wires that leave a pair unconnected (one line).
    """
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read cluster file: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{path}: invalid TOML: {exc}") from exc
    raw_devices = _table_list(data, "device", path)
    if not raw_devices:
        raise ClusterError(f"{path}: a cluster needs at least one [[device]]")
    devices = [_load_device(raw, k, f"{path}: device #{k}") for k, raw in enumerate(raw_devices)]
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: device names must be unique, got {names}")
    check_kinds(devices, str(path))
    default = data.get("default_link", {})
    if not isinstance(default, dict):
        raise ClusterError(f"{path}: 'default_link' must be a table")
    default_latency = _number(default, "latency", PCIE[0], f"{path}: default_link", positive=False)
    default_bandwidth = _number(default, "bandwidth", PCIE[1], f"{path}: default_link", positive=True)
    given: dict[tuple[str, str], Link] = {}
    for k, raw in enumerate(_table_list(data, "link", path)):
        where = f"{path}: link #{k}"
        src, dst = str(raw.get("src")), str(raw.get("dst"))
        if src not in names or dst not in names:
            raise ClusterError(f"{where} joins unknown devices '{src}' -> '{dst}'")
        if src == dst:
            raise ClusterError(f"{where} joins '{src}' to itself")
        latency = _number(raw, "latency", default_latency, where, positive=False)
        bandwidth = _number(raw, "bandwidth", default_bandwidth, where, positive=True)
        given[(src, dst)] = Link(src, dst, latency, bandwidth)
        if raw.get("bidirectional", True) and (dst, src) not in given:
            given[(dst, src)] = Link(dst, src, latency, bandwidth)
    switches: list[Switch] = []
    for k, raw in enumerate(_table_list(data, "switch", path)):
        where = f"{path}: switch #{k}"
        if "name" not in raw:
            raise ClusterError(f"{where}: missing key 'name'")
        kind = str(raw.get("kind", "pcie-switch"))
        if kind not in SWITCH_KINDS:
            raise ClusterError(f"{where}: kind must be one of {', '.join(SWITCH_KINDS)}, got '{kind}'")
        switches.append(Switch(str(raw["name"]), kind))
    nodes = names + [s.name for s in switches]
    if len(set(nodes)) != len(nodes):
        raise ClusterError(f"{path}: device and switch names must be unique, got {nodes}")
    topology_table = data.get("topology", {})
    if not isinstance(topology_table, dict) or not isinstance(topology_table.get("relay", True), bool):
        raise ClusterError(f"{path}: 'topology' must be a table with a boolean 'relay'")
    relay = topology_table.get("relay", True)
    copy_streams = topology_table.get("copy_streams", False)
    if not isinstance(copy_streams, bool):
        raise ClusterError(f"{path}: topology 'copy_streams' must be a boolean")
    wires: dict[tuple[str, str], tuple[float, float]] = {}
    wire_kinds: dict[tuple[str, str], str] = {}
    for k, raw in enumerate(_table_list(data, "wire", path)):
        where = f"{path}: wire #{k}"
        a, b = str(raw.get("a")), str(raw.get("b"))
        if a not in nodes or b not in nodes:
            raise ClusterError(f"{where} joins unknown devices or switches '{a}' - '{b}'")
        if a == b:
            raise ClusterError(f"{where} joins '{a}' to itself")
        spec = (
            _number(raw, "latency", default_latency, where, positive=False),
            _number(raw, "bandwidth", None, where, positive=True),
        )
        wires[(a, b)] = spec
        wire_kinds[(a, b)] = str(raw.get("kind", "wire"))
        if raw.get("bidirectional", True) and (b, a) not in wires:
            wires[(b, a)] = spec
            wire_kinds[(b, a)] = wire_kinds[(a, b)]
    overheads = data.get("overheads", {})
    if not isinstance(overheads, dict):
        raise ClusterError(f"{path}: 'overheads' must be a table")
    transfer_overhead = _number(overheads, "transfer", 0.0, f"{path}: overheads", positive=False)
    step_overhead = _number(overheads, "step", 0.0, f"{path}: overheads", positive=False)
    cpu = TransferCpu(
        *(_number(overheads, key, 0.0, f"{path}: overheads", positive=False) for key in TRANSFER_CPU_KEYS)
    )
    service = _service(data, path)
    relays = None if relay else frozenset(s.name for s in switches)
    links: list[Link] = []
    for a in names:
        routes = widest_routes(nodes, wires, a, relays) if wires else {}
        for b in names:
            if a == b:
                continue
            if (a, b) in given:
                links.append(given[(a, b)])
            elif wires:
                if b not in routes:
                    raise ClusterError(f"{path}: the wires connect no route from '{a}' to '{b}'")
                links.append(routes[b])
            else:
                links.append(Link(a, b, default_latency, default_bandwidth))
    topology = None
    if wires:
        directed = [
            Wire(a, b, latency, bandwidth, wire_kinds[(a, b)]) for (a, b), (latency, bandwidth) in wires.items()
        ]
        topology = build_topology(names, switches, directed, relay=relay, where=str(path), copy_streams=copy_streams)
    return Cluster(
        str(path),
        tuple(devices),
        tuple(links),
        topology,
        transfer_overhead,
        cpu if cpu.charged else None,
        service,
        step_overhead,
    )
