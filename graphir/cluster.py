"""Clusters: the devices a graph is placed on and the links between them.

A cluster comes from a shorthand (``4xV100``, ``2xA100-nvlink``), or a TOML file::

    [[device]]
    name = "gpu0"
    tf_device = "/device:GPU:0"
    kind = "V100"
    memory = "16GiB"
    peak_flops = 15.7e12
    mem_bandwidth = 900e9

    [[link]]
    src = "gpu0"
    dst = "gpu1"
    latency = 10e-6      # seconds
    bandwidth = 12e9     # bytes per second

Every ordered device pair is one FIFO channel whose transfer time is the papers' linear model
``latency + bytes / bandwidth``. Pairs with no link listed in a TOML file use the ``[default_link]``
table (or, when absent, a PCIe-class link).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import attrs

from graphir.errors import GraphIRError

DEFAULT_CLUSTER = "4xV100"
"""Cluster used when neither the module nor ``--cluster`` names one."""


@attrs.frozen
class Device:
    """One device.

    Attributes:
        name: short unique name used in ``device`` annotations (``gpu0``).
        tf_device: TensorFlow device string (``/job:worker/task:1/device:GPU:0`` is legal).
        kind: device kind used to look up per-kind costs (``V100``).
        memory: bytes of device memory.
        peak_flops: peak FLOP/s.
        mem_bandwidth: memory bandwidth in bytes/s.
    """

    name: str
    tf_device: str
    kind: str
    memory: int
    peak_flops: float
    mem_bandwidth: float


@attrs.frozen
class Link:
    """The channel from ``src`` to ``dst``: ``latency`` seconds + bytes / ``bandwidth`` (bytes/s)."""

    src: str
    dst: str
    latency: float
    bandwidth: float

    def transfer_time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` over this link."""
        return self.latency + nbytes / self.bandwidth


@attrs.frozen
class DeviceKind:
    """Catalogue entry for shorthands: memory, peak FLOP/s, memory bandwidth, TF device type."""

    memory: int
    peak_flops: float
    mem_bandwidth: float
    tf_type: str = "GPU"


GiB = 1 << 30
DEVICE_KINDS: dict[str, DeviceKind] = {
    "V100": DeviceKind(16 * GiB, 15.7e12, 900e9),
    "V100-32GB": DeviceKind(32 * GiB, 15.7e12, 900e9),
    "P100": DeviceKind(16 * GiB, 9.3e12, 732e9),
    "A100": DeviceKind(40 * GiB, 19.5e12, 1555e9),
    "H100": DeviceKind(80 * GiB, 67e12, 3350e9),
    "T4": DeviceKind(16 * GiB, 8.1e12, 320e9),
    "P4": DeviceKind(8 * GiB, 5.5e12, 192e9),
    "2080Ti": DeviceKind(11 * GiB, 13.4e12, 616e9),
    "3060Ti": DeviceKind(8 * GiB, 16.2e12, 448e9),
    "cpu": DeviceKind(8 * GiB, 100e9, 20e9, tf_type="CPU"),
}

PCIE = (10e-6, 12e9)
NVLINK = (5e-6, 50e9)
INTERCONNECTS = {"pcie": PCIE, "nvlink": NVLINK}


@attrs.frozen
class Cluster:
    """Devices and the links between every ordered pair.

    Attributes:
        spec: the text this cluster was resolved from (recorded in the module header).
        devices: the devices, in order.
        links: one link per ordered pair of distinct devices.
    """

    spec: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]

    def device(self, name: str) -> Device:
        """The device called ``name``; raises ``KeyError``."""
        for device in self.devices:
            if device.name == name:
                return device
        raise KeyError(name)

    @property
    def device_names(self) -> tuple[str, ...]:
        """Device names in order."""
        return tuple(d.name for d in self.devices)

    def link(self, src: str, dst: str) -> Link:
        """The channel from ``src`` to ``dst``; raises ``KeyError``."""
        for link in self.links:
            if link.src == src and link.dst == dst:
                return link
        raise KeyError((src, dst))


class ClusterError(GraphIRError):
    """A cluster spec that cannot be resolved."""


_SHORTHAND = re.compile(r"^(?P<count>\d+)x(?P<kind>[A-Za-z0-9]+(?:-32GB)?)(?:-(?P<link>pcie|nvlink))?$")


def _homogeneous(spec: str, count: int, kind: str, interconnect: str) -> Cluster:
    catalogue = DEVICE_KINDS[kind]
    devices = tuple(
        Device(
            name=f"{kind.lower() if catalogue.tf_type == 'CPU' else 'gpu'}{i}",
            tf_device=f"/device:{catalogue.tf_type}:{i}",
            kind=kind,
            memory=catalogue.memory,
            peak_flops=catalogue.peak_flops,
            mem_bandwidth=catalogue.mem_bandwidth,
        )
        for i in range(count)
    )
    latency, bandwidth = INTERCONNECTS[interconnect]
    links = tuple(Link(a.name, b.name, latency, bandwidth) for a in devices for b in devices if a.name != b.name)
    return Cluster(spec, devices, links)


def _parse_bytes(value: object, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB)\s*", value)
        if match:
            scale = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[match.group(2)]
            return int(float(match.group(1)) * scale)
    raise ClusterError(f'{where}: memory must be bytes or a size such as "16GiB", got {value!r}')


def load_cluster_toml(path: Path) -> Cluster:
    """Read a cluster TOML file (see the module docstring for the format)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ClusterError(f"{path}: cannot read cluster file: {exc}") from exc
    raw_devices = data.get("device", [])
    if not raw_devices:
        raise ClusterError(f"{path}: a cluster needs at least one [[device]]")
    devices = []
    for k, raw in enumerate(raw_devices):
        where = f"{path}: device #{k}"
        try:
            devices.append(
                Device(
                    name=str(raw["name"]),
                    tf_device=str(raw.get("tf_device", f"/device:GPU:{k}")),
                    kind=str(raw.get("kind", "V100")),
                    memory=_parse_bytes(raw.get("memory", 16 * GiB), where),
                    peak_flops=float(raw.get("peak_flops", 15.7e12)),
                    mem_bandwidth=float(raw.get("mem_bandwidth", 900e9)),
                )
            )
        except KeyError as exc:
            raise ClusterError(f"{where}: missing key {exc}") from exc
    names = [d.name for d in devices]
    if len(set(names)) != len(names):
        raise ClusterError(f"{path}: device names must be unique, got {names}")
    default = data.get("default_link", {})
    default_latency = float(default.get("latency", PCIE[0]))
    default_bandwidth = float(default.get("bandwidth", PCIE[1]))
    given: dict[tuple[str, str], Link] = {}
    for k, raw in enumerate(data.get("link", [])):
        src, dst = str(raw.get("src")), str(raw.get("dst"))
        if src not in names or dst not in names:
            raise ClusterError(f"{path}: link #{k} joins unknown devices '{src}' -> '{dst}'")
        link = Link(
            src, dst, float(raw.get("latency", default_latency)), float(raw.get("bandwidth", default_bandwidth))
        )
        given[(src, dst)] = link
        if raw.get("bidirectional", True) and (dst, src) not in given:
            given[(dst, src)] = Link(dst, src, link.latency, link.bandwidth)
    links = tuple(
        given.get((a, b), Link(a, b, default_latency, default_bandwidth)) for a in names for b in names if a != b
    )
    return Cluster(str(path), tuple(devices), links)


def resolve_cluster(spec: str) -> Cluster:
    """Resolve a shorthand (``4xV100``, ``2xA100-nvlink``) or a TOML file path.

    Raises:
        ClusterError: the spec is neither, naming the accepted forms.
    """
    match = _SHORTHAND.match(spec)
    if match and match.group("kind") in DEVICE_KINDS:
        count = int(match.group("count"))
        if count < 1:
            raise ClusterError(f"cluster '{spec}' has no devices")
        return _homogeneous(spec, count, match.group("kind"), match.group("link") or "pcie")
    path = Path(spec)
    if spec.endswith(".toml"):
        if not path.is_file():
            raise ClusterError(f"cluster file '{spec}' does not exist")
        return load_cluster_toml(path)
    kinds = ", ".join(DEVICE_KINDS)
    raise ClusterError(
        f"unknown cluster '{spec}': expected NxKIND[-pcie|-nvlink] (KIND one of {kinds}) or a .toml file"
    )
